/* fuzz-cli.c: the command line (cli/main.c, compiled into this target with
 * its main renamed): the input is an argv, one argument per line (or per
 * NUL), after "dnnmem"; the command runs as a user runs it, parse, load and
 * estimate, max-* or compare included. An argument "MODEL" stands for a
 * tiny Llama config (written to a temporary directory at start), "CNN" for
 * tests/models/onnx/tiny_cnn_eval_export.onnx (make fuzz-run runs from the
 * repository). Standard output and the CLI's messages go to /dev/null, and
 * every file the CLI writes (--report, --timeline, --events) to one file of
 * the temporary directory, whatever its name. Seeds: fuzz/corpus/cli, the
 * command lines of tests/cli/run.sh (fuzz/make-seeds.py).
 *
 *   make fuzz && build-fuzz/fuzz-cli -max_total_time=60 NEW_DIR fuzz/corpus/cli
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_dir[] = "/tmp/dnnmem-fuzz-cli.XXXXXX";
static char fuzz_model[64], fuzz_out[64];
static FILE *fuzz_null;

/* The CLI's fopen: every file it writes is fuzz_out. */
static FILE *fuzz_fopen(const char *path, const char *mode)
{
    return fopen(strchr(mode, 'w') ? fuzz_out : path, mode);
}

#define main dnnmem_cli_main
#define fopen fuzz_fopen
#undef stderr
#define stderr fuzz_null
#undef stdout
#define stdout fuzz_null
#define printf(...) fprintf(fuzz_null, __VA_ARGS__)
#define putchar(c) fputc(c, fuzz_null)
#include "../cli/main.c"
#undef putchar
#undef printf
#undef stdout
#undef stderr
#undef fopen
#undef main

/* fuzz-options.c's Llama: 2 layers, every option a decoder takes. */
static const char model_json[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 64,"
    " \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": 2, \"max_position_embeddings\": 512, \"vocab_size\": 100,"
    " \"hidden_act\": \"silu\", \"rms_norm_eps\": 1e-06, \"tie_word_embeddings\": false}";

static void fuzz_cleanup(void)
{
    unlink(fuzz_out);
    unlink(fuzz_model);
    rmdir(fuzz_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_null = fopen("/dev/null", "w");
    if (!fuzz_null || !mkdtemp(fuzz_dir))
        abort();
    snprintf(fuzz_model, sizeof fuzz_model, "%s/config.json", fuzz_dir);
    snprintf(fuzz_out, sizeof fuzz_out, "%s/out", fuzz_dir);
    FILE *f = fopen(fuzz_model, "w");
    if (!f || fwrite(model_json, 1, sizeof model_json - 1, f) != sizeof model_json - 1 ||
        fclose(f) != 0)
        abort();
    atexit(fuzz_cleanup);
    return 0;
}

enum { MAX_INPUT = 4096, MAX_ARGV = 512 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAX_INPUT)
        return 0;
    char text[MAX_INPUT + 1], *argv[MAX_ARGV + 2];
    memcpy(text, data, size);
    text[size] = '\0';
    int argc = 0;
    argv[argc++] = (char *)"dnnmem";
    for (size_t k = 0, start = 0; k <= size && argc < MAX_ARGV; k++)
        if (k == size || text[k] == '\n' || text[k] == '\0') {
            text[k] = '\0';
            if (k > start || k < size) /* an empty line is an empty argument */
                argv[argc++] = !strcmp(text + start, "MODEL") ? fuzz_model
                               : !strcmp(text + start, "CNN")
                                   ? (char *)"tests/models/onnx/tiny_cnn_eval_export.onnx"
                                   : text + start;
            start = k + 1;
        }
    argv[argc] = NULL;
    (void)dnnmem_cli_main(argc, argv);
    unlink(fuzz_out);
    return 0;
}
