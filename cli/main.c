/*
 * main.c: the dnnmem command line. Uses only the public header.
 *
 * Exit codes: 0 ok; 2 usage error (bad flag, unbound dim); 3 model error
 * (unreadable, corrupt, invalid, inconsistent shapes); 4 unsupported op or
 * feature; 5 internal error or out of host memory; 6 beyond a resource
 * budget; 7 plan: constraints no configuration meets.
 */
#define _GNU_SOURCE
#include "dnnmem.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum {
    EXIT_OK = 0,
    EXIT_DOES_NOT_FIT = 1,
    EXIT_USAGE = 2,
    EXIT_MODEL = 3,
    EXIT_UNSUPPORTED = 4,
    EXIT_INTERNAL = 5,
    EXIT_LIMIT = 6,
    EXIT_CONSTRAINT = 7
};

static int exit_code(enum dnnmem_status s)
{
    switch (s) {
    case DNNMEM_OK: return EXIT_OK;
    case DNNMEM_E_USAGE:
    case DNNMEM_E_UNBOUND: return EXIT_USAGE;
    case DNNMEM_E_CONSTRAINT: return EXIT_CONSTRAINT;
    case DNNMEM_E_IO:
    case DNNMEM_E_PARSE:
    case DNNMEM_E_MODEL:
    case DNNMEM_E_SHAPE: return EXIT_MODEL;
    case DNNMEM_E_UNSUPPORTED: return EXIT_UNSUPPORTED;
    case DNNMEM_E_DEVICE_OOM: return EXIT_DOES_NOT_FIT;
    case DNNMEM_E_LIMIT: return EXIT_LIMIT;
    case DNNMEM_E_NOMEM:
    case DNNMEM_E_INTERNAL: return EXIT_INTERNAL;
    }
    return EXIT_INTERNAL;
}

/* --help: this, each group of options (src/options.def, then
 * cli/cli_options.def), and usage_tail. */
static const char usage_head[] =
    "usage: dnnmem estimate MODEL [options]      the peak, why, and whether it fits\n"
    "       dnnmem max-batch MODEL --gpu G [options]    the largest batch that fits\n"
    "       dnnmem max-seq-len MODEL --gpu G [options]  the largest sequence length that fits\n"
    "       dnnmem compare MODEL_A MODEL_B [options]   two models side by side\n"
    "       dnnmem compare MODEL [options] --with \"OPTIONS\"  two configurations\n"
    "       dnnmem plan MODEL --gpu G --gpus K [options]  the parallel configurations that fit\n"
    "       dnnmem gpus                                 the GPU catalogue\n"
    "       dnnmem --help | --version\n"
    "\n"
    "Estimate the peak GPU memory of running MODEL before it runs: with PyTorch\n"
    "eager on a CUDA device unless --framework and --device say otherwise. MODEL\n"
    "is an ONNX file, a HuggingFace config.json or model directory, a Keras model\n"
    "JSON or .keras archive, an MXNet *-symbol.json, or a PyTorch step captured\n"
    "by the Python package (dnnmem.torch.capture, a .dnnmem file). Weights are\n"
    "never read: an ONNX file whose weights live in external data works without them.\n";

static const char usage_tail[] =
    "\n"
    "Exit codes: 0 ok (fits or tight), 1 does not fit (max-*: not even 1 fits), 2 usage\n"
    "error (bad flag, unbound dim), 3 model error\n"
    "(unreadable, corrupt or invalid file, inconsistent shapes), 4 unsupported op\n"
    "or feature, 5 internal error, 6 the file is beyond a resource budget (--max-nodes,\n"
    "or its size), 7 plan: constraints no configuration meets (--global-batch that no\n"
    "data-parallel size divides, a fixed --tp that does not divide --gpus). plan: 0\n"
    "some configuration fits, 1 none does.\n"
    "\n"
    "Examples:\n"
    "  dnnmem estimate resnet50.onnx --batch-size 64\n"
    "  dnnmem estimate resnet50.onnx --batch-size 64 --mode train --optimizer adam\n"
    "  dnnmem estimate resnet50.onnx -b 64 --mode train --gpu A100-40GB\n"
    "  dnnmem max-batch resnet50.onnx --mode train --precision amp-bf16 --gpu L4\n"
    "  dnnmem estimate bert.onnx -b 8,16,32 -s 128,512 --mode train --csv\n"
    "  dnnmem compare resnet50.onnx -b 64 --mode train --with \"--precision amp-bf16\"\n"
    "  dnnmem plan llama.json --mode train -s 4096 --gpu H100-80GB --gpus 8 --global-batch 64\n"
    "  dnnmem estimate bert.onnx --batch-size 8 --seq-len 512 --json\n"
    "  dnnmem estimate gpt2.onnx --dim batch_size=1 --dim past_sequence_length=1024 --seq-len 1\n";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dnnmem: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'dnnmem --help'.\n");
    va_end(ap);
    return EXIT_USAGE;
}

static int fail(enum dnnmem_status s, const struct dnnmem_error *err)
{
    fprintf(stderr, "dnnmem: %s\n", err->message);
    return exit_code(s);
}

/* Everything the command line says about one run. */
struct cli {
    struct dnnmem_config cfg;
    dnnmem_options *store;         /* owns what cfg points to; dnnmem_options_free */
    const int64_t *batches, *seqs; /* sweeps: --batch-size 8,16,32 (the store's) */
    size_t n_batches, n_seqs;
    bool json, csv;
    const char *gpu;               /* --gpu, echoed */
    const char *memory;            /* --memory, echoed */
    const char *search_dim;        /* max-*: --dim-name */
    const char *report, *timeline; /* --report page.html, --timeline steps.csv */
    const char *events;            /* --events events.csv */
    const char *command;           /* the command line, for --report's page */
    bool page_modules;             /* the module table is for --report's page only */
    int64_t limit;                 /* max-*: --limit */
    struct dnnmem_plan_options plan; /* plan: --global-batch, --fewest-gpus, --max-steps */
    struct dnnmem_load_options load; /* --max-nodes */
    const char *model;
};

/* ---- the CLI's own options (cli/cli_options.def) ---------------------------- */

static int print_help(void);

/* The positive integer of --flag v into *out: -1 (taken), or the usage
 * error's exit code. */
static int positive(const char *flag, const char *v, int64_t *out)
{
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || *end || n <= 0)
        return usage_error("--%s %s: expected a positive integer", flag, v);
    *out = n;
    return -1;
}

static int act_limit(struct cli *cl, const char *v) { return positive("limit", v, &cl->limit); }

static int act_max_nodes(struct cli *cl, const char *v)
{
    return positive("max-nodes", v, &cl->load.max_nodes);
}

static int act_global_batch(struct cli *cl, const char *v)
{
    return positive("global-batch", v, &cl->plan.global_batch);
}

static int act_max_steps(struct cli *cl, const char *v)
{
    int64_t n = 0;
    int rc = positive("max-steps", v, &n);
    if (rc < 0 && n > DNNMEM_PLAN_MAX_STEPS)
        return usage_error("--max-steps %s: at most %d", v, DNNMEM_PLAN_MAX_STEPS);
    cl->plan.max_steps = (int)n;
    return rc;
}

static int act_fewest_gpus(struct cli *cl, const char *v)
{
    (void)v;
    cl->plan.fewest_gpus = true;
    return -1;
}

static int act_every_micro_step(struct cli *cl, const char *v)
{
    (void)v;
    cl->plan.every_micro_step = true;
    return -1;
}

static int act_dim_name(struct cli *cl, const char *v)
{
    cl->search_dim = v;
    return -1;
}

static int act_json(struct cli *cl, const char *v)
{
    (void)v;
    cl->json = true;
    return -1;
}

static int act_csv(struct cli *cl, const char *v)
{
    (void)v;
    cl->csv = true;
    return -1;
}

static int act_report(struct cli *cl, const char *v)
{
    cl->report = v;
    cl->cfg.timeline = true;
    return -1;
}

static int act_timeline(struct cli *cl, const char *v)
{
    cl->timeline = v;
    cl->cfg.timeline = true;
    return -1;
}

static int act_events(struct cli *cl, const char *v)
{
    cl->events = v;
    cl->cfg.events = true;
    return -1;
}

static int act_help(struct cli *cl, const char *v)
{
    (void)cl, (void)v;
    return print_help();
}

/* A CLI option: the action returns -1 to go on, else the exit code. */
struct cli_row {
    struct dnnmem_option opt;
    int (*act)(struct cli *cl, const char *v);
};

static const struct cli_row cli_rows[] = {
#define CLI_OPT(name, s, alias, arg, group, cmds, act, help) \
    {{name, s, alias, arg, DNNMEM_GROUP_##group, cmds, help}, act},
#include "cli_options.def"
#undef CLI_OPT
};
enum { N_CLI_ROWS = sizeof cli_rows / sizeof cli_rows[0] };

/* ---- help ------------------------------------------------------------------ */

/* "  -b, --batch-size N" padded to column 25, then the help lines, each
 * further one indented to it. */
static void print_option(const struct dnnmem_option *o)
{
    int n = printf("  ");
    if (o->short_name)
        n += printf("-%c, ", o->short_name);
    n += printf("--%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
    printf("%*s", n < 25 ? 25 - n : 2, "");
    for (const char *p = o->help; *p; p++) {
        putchar(*p);
        if (*p == '\n')
            printf("%25s", "");
    }
    putchar('\n');
}

static int print_help(void)
{
    fputs(usage_head, stdout);
    for (int g = 0; g < DNNMEM_GROUP_COUNT; g++) {
        printf("\n%s", dnnmem_option_group_heading((enum dnnmem_option_group)g));
        for (size_t k = 0; k < dnnmem_option_count(); k++)
            if (dnnmem_option_at(k)->group == (enum dnnmem_option_group)g)
                print_option(dnnmem_option_at(k));
        for (size_t k = 0; k < N_CLI_ROWS; k++)
            if (cli_rows[k].opt.group == (enum dnnmem_option_group)g)
                print_option(&cli_rows[k].opt);
        fputs(dnnmem_option_group_note((enum dnnmem_option_group)g), stdout);
    }
    fputs(usage_tail, stdout);
    return EXIT_OK;
}

/* ---- the parser ---------------------------------------------------------------- */

/* getopt_long's table from both tables' rows: the library's row k answers
 * LIB_VAL + k, the CLI's CLI_VAL + k (an alias as its row), a short option
 * its letter. */
enum { LIB_VAL = 256, CLI_VAL = 1024, MAX_OPTS = 256 };
struct getopt_table {
    struct option opts[MAX_OPTS];
    char shorts[32];
};

static int add_option(struct getopt_table *t, size_t *n, const struct dnnmem_option *o, int val)
{
    int has_arg = o->arg ? required_argument : no_argument;
    size_t ns = strlen(t->shorts);
    if (*n + 3 > MAX_OPTS || ns + 3 > sizeof t->shorts)
        return -1;
    t->opts[(*n)++] = (struct option){o->name, has_arg, NULL, val};
    if (o->alias)
        t->opts[(*n)++] = (struct option){o->alias, has_arg, NULL, val};
    if (o->short_name)
        snprintf(t->shorts + ns, 3, "%c%s", o->short_name, o->arg ? ":" : "");
    return 0;
}

static int build_getopt(struct getopt_table *t)
{
    size_t n = 0;
    strcpy(t->shorts, ":");
    for (size_t k = 0; k < dnnmem_option_count(); k++)
        if (add_option(t, &n, dnnmem_option_at(k), LIB_VAL + (int)k))
            return -1;
    for (size_t k = 0; k < N_CLI_ROWS; k++)
        if (cli_rows[k].act && add_option(t, &n, &cli_rows[k].opt, CLI_VAL + (int)k))
            return -1;
    t->opts[n] = (struct option){NULL, 0, NULL, 0};
    return 0;
}

/* One option getopt_long returned: -1 to go on, else an exit code. */
static int apply_option(struct cli *cl, int c, char **argv)
{
    const struct dnnmem_option *lib = NULL;
    const struct cli_row *row = NULL;
    if (c == ':')
        return usage_error("%s: this option needs a value", argv[optind - 1]);
    if (c >= CLI_VAL)
        row = &cli_rows[c - CLI_VAL];
    else if (c >= LIB_VAL)
        lib = dnnmem_option_at((size_t)(c - LIB_VAL));
    for (size_t k = 0; c < LIB_VAL && k < dnnmem_option_count(); k++)
        if (dnnmem_option_at(k)->short_name == c)
            lib = dnnmem_option_at(k);
    for (size_t k = 0; c < LIB_VAL && k < N_CLI_ROWS; k++)
        if (cli_rows[k].opt.short_name == c && cli_rows[k].act)
            row = &cli_rows[k];
    if (row)
        return row->act(cl, optarg);
    if (!lib)
        return usage_error("%s: unknown option", argv[optind - 1]);
    struct dnnmem_error err;
    enum dnnmem_status s = dnnmem_config_set(&cl->cfg, cl->store, lib->name, lib->arg ? optarg : NULL, &err);
    if (s == DNNMEM_E_USAGE)
        return usage_error("%s", err.message);
    return s == DNNMEM_OK ? -1 : fail(s, &err);
}

/* Parse options (shared by estimate, max-* and compare); -1 to go on, else an
 * exit code. Either way cl->store is the caller's to free. */
static int parse_cli(int argc, char **argv, struct cli *cl)
{
    struct getopt_table t;
    memset(cl, 0, sizeof *cl);
    dnnmem_config_init(&cl->cfg);
    dnnmem_load_options_init(&cl->load);
    dnnmem_plan_options_init(&cl->plan);
    cl->store = dnnmem_options_new();
    if (!cl->store || build_getopt(&t)) {
        fprintf(stderr, "dnnmem: out of memory\n");
        return EXIT_INTERNAL;
    }
    int c;
    /* 0, not 1: getopt's full reset (glibc and musl), so a parse after one
     * that stopped within "-xyz" (compare's two sides, the fuzz target's
     * runs) does not resume in the last argv's strings */
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, t.shorts, t.opts, NULL)) != -1) {
        int rc = apply_option(cl, c, argv);
        if (rc >= 0)
            return rc;
    }
    struct dnnmem_error err;
    if (dnnmem_config_check(&cl->cfg, cl->store, &err) != DNNMEM_OK)
        return usage_error("%s", err.message);
    if (optind + 1 != argc)
        return usage_error("%s: %s", argv[0], optind >= argc ? "no MODEL given" : "exactly one MODEL expected");
    cl->model = argv[optind];
    cl->batches = dnnmem_options_list(cl->store, "batch-size", &cl->n_batches);
    cl->seqs = dnnmem_options_list(cl->store, "seq-len", &cl->n_seqs);
    const char *gpu = dnnmem_options_value(cl->store, "gpu");
    cl->gpu = gpu ? dnnmem_gpu_find(gpu)->name : NULL;
    cl->memory = dnnmem_options_value(cl->store, "memory");
    if (cl->report && !cl->cfg.module_depth) { /* the page shows the bytes by module */
        cl->cfg.module_depth = DNNMEM_MODULE_DEPTH_DEFAULT;
        cl->page_modules = true;
    }
    return -1;
}

/* The command line as a shell would take it back ("dnnmem estimate m.onnx
 * --checkpoint '/model/layers.*'"), malloc'd; NULL when out of memory. */
static char *command_line(int argc, char **argv)
{
    size_t len = sizeof "dnnmem";
    for (int k = 0; k < argc; k++)
        len += 4 * strlen(argv[k]) + 3;
    char *out = malloc(len), *p = out;
    if (!out)
        return NULL;
    p += sprintf(p, "dnnmem");
    for (int k = 0; k < argc; k++) {
        const char *a = argv[k];
        bool plain = *a != 0;
        for (const char *c = a; *c; c++)
            if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:=,@%+-", *c))
                plain = false;
        *p++ = ' ';
        if (plain) {
            p += sprintf(p, "%s", a);
            continue;
        }
        *p++ = '\'';
        for (const char *c = a; *c; c++)
            p += *c == '\'' ? sprintf(p, "'\\''") : sprintf(p, "%c", *c);
        *p++ = '\'';
    }
    *p = 0;
    return out;
}

static int write_done(int wr)
{
    if (wr != 0 || fflush(stdout) != 0) {
        fprintf(stderr, "dnnmem: cannot write the result\n");
        return EXIT_INTERNAL;
    }
    return EXIT_OK;
}

static const char *mib(uint64_t bytes, char buf[32])
{
    snprintf(buf, 32, "%.1f", (double)bytes / 1048576.0);
    return buf;
}

/* One row per value of the swept flags: text, CSV or a JSON array. */
static int sweep(const struct cli *cl, const dnnmem_model *m)
{
    size_t nb = cl->n_batches ? cl->n_batches : 1, ns = cl->n_seqs ? cl->n_seqs : 1;
    bool any_bad = false;
    if (cl->cfg.module_depth && !cl->page_modules && !cl->json)
        return usage_error("--by-module: one estimate at a time, not a sweep or --csv "
                           "(--json gives each value its table)");
    /* a model without a sequence given (a CNN) gets no seq column in text,
     * an empty seq_len in CSV */
    bool has_seq = cl->n_seqs || cl->cfg.seq_len > 0;
    if (cl->csv)
        printf("batch_size,seq_len,total_bytes,peak_allocated_bytes,peak_reserved_bytes,verdict\n");
    else if (cl->json)
        printf("[");
    else if (has_seq)
        printf("%10s %8s %14s %14s %14s  %s\n", "batch", "seq", "total MiB", "allocated MiB",
               "reserved MiB", "verdict");
    else
        printf("%10s %14s %14s %14s  %s\n", "batch", "total MiB", "allocated MiB", "reserved MiB",
               "verdict");
    for (size_t i = 0; i < nb; i++)
        for (size_t j = 0; j < ns; j++) {
            struct dnnmem_config cfg = cl->cfg;
            if (cl->n_batches)
                cfg.batch_size = cl->batches[i];
            if (cl->n_seqs)
                cfg.seq_len = cl->seqs[j];
            struct dnnmem_result *r;
            struct dnnmem_error err;
            enum dnnmem_status s = dnnmem_estimate(m, &cfg, &r, &err);
            if (s != DNNMEM_OK) {
                if (cl->json)
                    printf("]\n");
                return fail(s, &err);
            }
            any_bad |= r->verdict == DNNMEM_VERDICT_DOES_NOT_FIT;
            char a[32], b[32], c[32];
            char seq[24] = "";
            if (has_seq)
                snprintf(seq, sizeof seq, "%lld", (long long)cfg.seq_len);
            if (cl->csv) {
                printf("%lld,%s,%llu,%llu,%llu,%s\n", (long long)cfg.batch_size, seq,
                       (unsigned long long)r->total_bytes,
                       (unsigned long long)r->peak_allocated, (unsigned long long)r->peak_reserved,
                       r->verdict ? dnnmem_verdict_name(r->verdict) : "");
            } else if (cl->json) {
                printf("%s\n", i + j ? "," : "");
                dnnmem_report_json(r, m, stdout);
            } else {
                printf("%10lld ", (long long)cfg.batch_size);
                if (has_seq)
                    printf("%8s ", seq);
                printf("%14s %14s %14s  %s\n", mib(r->total_bytes, a), mib(r->peak_allocated, b),
                       mib(r->peak_reserved, c), r->verdict ? dnnmem_verdict_name(r->verdict) : "");
            }
            dnnmem_result_free(r);
        }
    if (cl->json)
        printf("]\n");
    int rc = write_done(0);
    return rc ? rc : any_bad ? EXIT_DOES_NOT_FIT : EXIT_OK;
}

/* --report, --timeline and --events: 0, or an exit code. The page shows
 * the result's advice (dnnmem_result_advise). */
static int write_files(const struct cli *cl, const struct dnnmem_result *r, const dnnmem_model *m)
{
    struct dnnmem_page_info pi = {cl->command};
    const char *files[3] = {cl->report, cl->timeline, cl->events};
    static const char *const flag[3] = {"--report", "--timeline", "--events"};
    for (int k = 0; k < 3; k++) {
        if (!files[k])
            continue;
        FILE *out = fopen(files[k], "w");
        int bad = !out || (k == 0   ? dnnmem_report_html_page(r, m, &pi, out)
                           : k == 1 ? dnnmem_report_timeline_csv(r, out)
                                    : dnnmem_report_events_csv(r, out));
        if (out && fclose(out) != 0)
            bad = 1;
        if (bad) {
            fprintf(stderr, "dnnmem: %s %s: cannot write the file\n", flag[k], files[k]);
            return EXIT_INTERNAL;
        }
    }
    return 0;
}

/* One estimate of the model, or a sweep. */
static int estimate(const struct cli *cl, const dnnmem_model *m)
{
    if (cl->n_batches > 1 || cl->n_seqs > 1 || cl->csv)
        return sweep(cl, m);
    struct dnnmem_error err;
    struct dnnmem_result *r = NULL;
    enum dnnmem_status s = dnnmem_estimate(m, &cl->cfg, &r, &err);
    if (s != DNNMEM_OK)
        return fail(s, &err);
    bool does_not_fit = r->verdict == DNNMEM_VERDICT_DOES_NOT_FIT;
    /* a job that does not fit: the changes that would make it fit, printed
     * with it (before the tensors; JSON's advice[]; the page's) */
    if (does_not_fit && (s = dnnmem_result_advise(r, m, &cl->cfg, &err)) != DNNMEM_OK) {
        dnnmem_result_free(r);
        return fail(s, &err);
    }
    if (cl->gpu && !cl->json)
        printf("device       %s\n", cl->gpu);
    int rc = write_files(cl, r, m);
    if (cl->page_modules) { /* computed for the page, not asked for here */
        r->modules = NULL;
        r->n_modules = 0;
    }
    int wr = rc ? 0 : cl->json ? dnnmem_report_json(r, m, stdout) : dnnmem_report_text(r, m, stdout);
    dnnmem_result_free(r);
    if (rc)
        return rc;
    rc = write_done(wr);
    return rc ? rc : does_not_fit ? EXIT_DOES_NOT_FIT : EXIT_OK;
}

static int cmd_estimate(int argc, char **argv)
{
    struct cli cl;
    char *command = command_line(argc, argv); /* before getopt reorders argv */
    if (!command) {
        fprintf(stderr, "dnnmem: out of memory\n");
        return EXIT_INTERNAL;
    }
    int rc = parse_cli(argc, argv, &cl);
    cl.command = command;
    if (rc < 0) {
        struct dnnmem_error err;
        dnnmem_model *m = NULL;
        enum dnnmem_status s = dnnmem_model_load_opts(cl.model, &cl.load, &m, &err);
        rc = s != DNNMEM_OK ? fail(s, &err) : estimate(&cl, m);
        dnnmem_model_free(m);
    }
    dnnmem_options_free(cl.store);
    free(command);
    return rc;
}

/* max-batch / max-seq-len: the largest value that fits, with the estimates
 * at it and one above. */
static int max_dim(const struct cli *cl, const dnnmem_model *m, const char *cmd, bool seq)
{
    const char *dim = cl->search_dim;
    if (seq && !dim) { /* the model's sequence dim */
        struct dnnmem_model_info info;
        dnnmem_model_get_info(m, &info);
        for (size_t k = 0; k < info.n_symbols && !dim; k++) {
            const char *name = dnnmem_model_symbol(m, k);
            if (strstr(name, "seq") && !strstr(name, "past") && !strstr(name, "total"))
                dim = name;
        }
        if (!dim)
            return usage_error("%s: %s has no sequence dim; name one with --dim-name", cmd, cl->model);
    }
    int64_t limit = cl->limit ? cl->limit : (seq ? 1 << 20 : 1 << 16);
    int64_t value = 0;
    struct dnnmem_error err;
    struct dnnmem_result *at = NULL, *next = NULL;
    enum dnnmem_status s = dnnmem_max_dim(m, &cl->cfg, dim, limit, &value, &at, &next, &err);
    if (s != DNNMEM_OK)
        return fail(s, &err);
    const char *what = dim ? dim : "batch size";
    double headroom = cl->cfg.headroom > 0 ? cl->cfg.headroom : DNNMEM_HEADROOM_DEFAULT;
    if (cl->json) {
        printf("{\"schema\": \"dnnmem.max/1\", \"dim\": \"%s\", \"value\": %lld, \"limit\": %lld, "
               "\"capacity_bytes\": %lld, \"headroom\": %g, \"total_bytes_at_value\": %llu, "
               "\"margin_bytes_at_value\": %lld, \"total_bytes_at_next\": %llu}\n",
               what, (long long)value, (long long)limit, (long long)cl->cfg.capacity_bytes, headroom,
               at ? (unsigned long long)at->total_bytes : 0ULL,
               at ? (long long)at->margin_bytes : 0LL,
               next ? (unsigned long long)next->total_bytes : 0ULL);
    } else {
        printf("largest %s that fits %s with %g%% left free: %lld%s\n", what,
               cl->gpu ? cl->gpu : cl->memory, 100.0 * headroom, (long long)value,
               value == limit ? " (the search limit)" : "");
        const struct dnnmem_result *rs[2] = {at, next};
        for (int k = 0; k < 2; k++) {
            const struct dnnmem_result *x = rs[k];
            if (!x)
                continue;
            char b1[32], b2[32], b3[32], b4[32];
            uint64_t gap = x->margin_bytes < 0 ? (uint64_t)-x->margin_bytes : (uint64_t)x->margin_bytes;
            printf("  at %lld: %s MiB (allocated %s MiB), %s: %s %s MiB (%.1f%% of %s MiB)\n",
                   (long long)value + k, mib(x->total_bytes, b1), mib(x->peak_allocated, b2),
                   dnnmem_verdict_name(x->verdict), x->margin_bytes < 0 ? "short by" : "margin",
                   mib(gap, b3), 100.0 * (double)x->margin_bytes / (double)x->capacity_bytes,
                   mib(x->capacity_bytes, b4));
        }
    }
    dnnmem_result_free(at);
    dnnmem_result_free(next);
    int rc = write_done(0);
    return rc ? rc : value == 0 ? EXIT_DOES_NOT_FIT : EXIT_OK;
}

static int cmd_max(int argc, char **argv, bool seq)
{
    struct cli cl;
    int rc = parse_cli(argc, argv, &cl);
    if (rc < 0 && cl.cfg.capacity_bytes <= 0)
        rc = usage_error("%s: give the device with --gpu NAME or --memory SIZE", argv[0]);
    if (rc < 0) {
        struct dnnmem_error err;
        dnnmem_model *m = NULL;
        enum dnnmem_status s = dnnmem_model_load_opts(cl.model, &cl.load, &m, &err);
        rc = s != DNNMEM_OK ? fail(s, &err) : max_dim(&cl, m, argv[0], seq);
        dnnmem_model_free(m);
    }
    dnnmem_options_free(cl.store);
    return rc;
}

/* One side of compare: args[0..n) and the model (args has room for two
 * more); EXIT_OK with *out, or an exit code. */
static int compare_side(char **args, int n, const char *model, struct dnnmem_result **out)
{
    args[n] = (char *)model;
    args[n + 1] = NULL;
    struct cli cl;
    int rc = parse_cli(n + 1, args, &cl);
    if (rc < 0) {
        struct dnnmem_error err;
        dnnmem_model *m = NULL;
        enum dnnmem_status s = dnnmem_model_load_opts(cl.model, &cl.load, &m, &err);
        if (s == DNNMEM_OK)
            s = dnnmem_estimate(m, &cl.cfg, out, &err);
        dnnmem_model_free(m);
        rc = s != DNNMEM_OK ? fail(s, &err) : EXIT_OK;
    }
    dnnmem_options_free(cl.store);
    return rc;
}

/* compare: two models under the same options, or one model under two sets
 * of options (--with "OPTIONS" are added after the others for B). */
static int cmd_compare(int argc, char **argv)
{
    /* split out --with "..." and the second model */
    char *with = NULL;
    /* each side's arguments, and room for its model and the NULL
     * (compare_side) */
    enum { MAX_ARGS = 254, MAX_WITH = 254 };
    char *args_a[MAX_ARGS + 2], *args_b[MAX_ARGS + MAX_WITH + 2];
    int na = 0, nb = 0;
    const char *models[2] = {NULL, NULL};
    int n_models = 0;
    if (argc > MAX_ARGS)
        return usage_error("compare: %d arguments; at most %d", argc - 1, MAX_ARGS - 1);
    for (int k = 0; k < argc; k++) {
        if (strcmp(argv[k], "--with") == 0) {
            if (k + 1 >= argc)
                return usage_error("%s", "--with: this option needs a value");
            with = argv[++k];
            continue;
        }
        bool takes_value = k > 0 && argv[k][0] != '-' && argv[k - 1][0] == '-' &&
                           argv[k - 1][1] == '-' && !strchr(argv[k - 1], '=') &&
                           strcmp(argv[k - 1], "--json") != 0 && strcmp(argv[k - 1], "--csv") != 0;
        bool short_value = k > 0 && (strcmp(argv[k - 1], "-b") == 0 || strcmp(argv[k - 1], "-s") == 0);
        if (k > 0 && argv[k][0] != '-' && !takes_value && !short_value) {
            if (n_models == 2)
                return usage_error("%s", "compare: at most two models");
            models[n_models++] = argv[k];
            continue;
        }
        args_a[na++] = argv[k];
    }
    if (n_models == 0 || (n_models == 1 && !with) || (n_models == 2 && with))
        return usage_error("%s", "compare: give two models, or one model and --with \"OPTIONS\"");
    for (int k = 0; k < na; k++)
        args_b[nb++] = args_a[k];
    char withbuf[1024] = "";
    if (with) {
        if (strlen(with) >= sizeof withbuf)
            return usage_error("%s", "--with: too long");
        strcpy(withbuf, with);
        char *save = NULL;
        for (char *tok = strtok_r(withbuf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
            if (nb == na + MAX_WITH)
                return usage_error("--with: more than %d options", MAX_WITH);
            args_b[nb++] = tok;
        }
    }
    struct dnnmem_result *res[2] = {NULL, NULL};
    int rc = EXIT_OK;
    /* a side that ends without a result (-h: the help, EXIT_OK) ends compare */
    for (int side = 0; side < 2 && rc == EXIT_OK && (side == 0 || res[0]); side++)
        rc = compare_side(side ? args_b : args_a, side ? nb : na,
                          side && n_models == 2 ? models[1] : models[0], &res[side]);
    if (rc == EXIT_OK && res[0] && res[1]) {
        char la[1100], lb[1100];
        snprintf(la, sizeof la, "%s", models[0]);
        snprintf(lb, sizeof lb, "%s%s%s", n_models == 2 ? models[1] : models[0], with ? " with " : "",
                 with ? with : "");
        rc = write_done(dnnmem_report_compare(res[0], la, res[1], lb, stdout));
    }
    dnnmem_result_free(res[0]);
    dnnmem_result_free(res[1]);
    return rc;
}

/* plan: the configurations that fit, ranked; 1 when none does. */
static int cmd_plan(int argc, char **argv)
{
    struct cli cl;
    int rc = parse_cli(argc, argv, &cl);
    if (rc < 0 && cl.csv)
        rc = usage_error("%s", "plan: --csv: not a plan's output (--json is)");
    if (rc < 0 && cl.cfg.par.gpus < 1)
        rc = usage_error("%s", "plan: give the GPUs with --gpus N");
    if (rc < 0) {
        cl.plan.gpus = cl.cfg.par.gpus;
        struct dnnmem_error err;
        dnnmem_model *m = NULL;
        struct dnnmem_plan *p = NULL;
        enum dnnmem_status s = dnnmem_model_load_opts(cl.model, &cl.load, &m, &err);
        if (s == DNNMEM_OK)
            s = dnnmem_plan(m, &cl.cfg, &cl.plan, &p, &err);
        if (s == DNNMEM_E_USAGE)
            rc = usage_error("%s", err.message);
        else if (s != DNNMEM_OK)
            rc = fail(s, &err);
        else {
            rc = write_done(cl.json ? dnnmem_report_plan_json(p, m, stdout) : dnnmem_report_plan_text(p, m, stdout));
            if (rc == EXIT_OK && !p->n_rows)
                rc = EXIT_DOES_NOT_FIT;
        }
        dnnmem_plan_free(p);
        dnnmem_model_free(m);
    }
    dnnmem_options_free(cl.store);
    return rc;
}

/* The GPU catalogue. */
static int cmd_gpus(int argc, char **argv)
{
    (void)argv;
    if (argc > 1)
        return usage_error("%s", "gpus: no arguments expected");
    printf("%-22s %-30s %14s %8s  %s\n", "name", "device", "total MiB", "cc", "source");
    for (size_t k = 0; k < dnnmem_gpu_count(); k++) {
        const struct dnnmem_gpu *g = dnnmem_gpu_at(k);
        char b[32];
        printf("%-22s %-30s %14s %5d.%d  %s\n", g->name, g->device_name, mib((uint64_t)g->total_bytes, b),
               g->compute_capability / 10, g->compute_capability % 10, g->source);
    }
    return write_done(0);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage_error("%s", "no command given");
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0)
        return print_help();
    if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("dnnmem %s\n", DNNMEM_VERSION);
        return EXIT_OK;
    }
    if (strcmp(cmd, "estimate") == 0)
        return cmd_estimate(argc - 1, argv + 1);
    if (strcmp(cmd, "max-batch") == 0)
        return cmd_max(argc - 1, argv + 1, false);
    if (strcmp(cmd, "max-seq-len") == 0)
        return cmd_max(argc - 1, argv + 1, true);
    if (strcmp(cmd, "gpus") == 0)
        return cmd_gpus(argc - 1, argv + 1);
    if (strcmp(cmd, "compare") == 0)
        return cmd_compare(argc - 1, argv + 1);
    if (strcmp(cmd, "plan") == 0)
        return cmd_plan(argc - 1, argv + 1);
    return usage_error("%s: unknown command (try 'estimate', 'max-batch', 'max-seq-len', 'plan', 'gpus')",
                       cmd);
}
