/*
 * bench.c: in-process speed of load + shape inference + estimate.
 *
 *   make bench      (runs build/bench/bench from the repository root, then
 *                   bench/cli.sh: the CLI's whole-process wall times of the
 *                   targets of issue 12, see its header)
 *
 * Prints, per model, the median and the 90th percentile over many runs. The
 * 100+ MB case is resnet50 with every initializer embedded as raw_data
 * (zeros), written to DIR/resnet50-embedded.onnx (argv[1], default ".").
 */
#include "dnnmem.h"
#include "onnx.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return p;
}

/* Write `out`: the model at `in` with every initializer's data embedded. */
static int embed_weights(const char *in, const char *out, size_t *bytes)
{
    size_t len;
    unsigned char *p = slurp(in, &len);
    if (!p)
        return -1;
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, p);
    free(p);
    if (!m)
        return -1;
    void **bufs = calloc(m->graph->n_initializer + 1, sizeof *bufs);
    for (size_t i = 0; i < m->graph->n_initializer; i++) {
        Onnx__TensorProto *t = m->graph->initializer[i];
        size_t n = 4; /* float32 */
        for (size_t k = 0; k < t->n_dims; k++)
            n *= (size_t)t->dims[k];
        bufs[i] = calloc(n ? n : 1, 1);
        t->has_raw_data = 1;
        t->raw_data.data = bufs[i];
        t->raw_data.len = n;
        t->has_data_location = 0;
        t->n_external_data = 0;
    }
    size_t n = onnx__model_proto__get_packed_size(m);
    unsigned char *q = malloc(n);
    onnx__model_proto__pack(m, q);
    FILE *f = fopen(out, "wb");
    int rc = f && fwrite(q, 1, n, f) == n ? 0 : -1;
    if (f)
        fclose(f);
    *bytes = n;
    free(q);
    for (size_t i = 0; i < m->graph->n_initializer; i++) {
        free(bufs[i]);
        m->graph->initializer[i]->raw_data.data = NULL;
        m->graph->initializer[i]->raw_data.len = 0;
        m->graph->initializer[i]->has_raw_data = 0;
    }
    free(bufs);
    onnx__model_proto__free_unpacked(m, NULL);
    return rc;
}

static void bench(const char *label, const char *path, int64_t batch, int64_t seq, int runs)
{
    double *t = malloc((size_t)runs * sizeof *t), *tl = malloc((size_t)runs * sizeof *tl);
    uint64_t total = 0;
    for (int i = 0; i < runs; i++) {
        double t0 = now_ms();
        dnnmem_model *m;
        struct dnnmem_error err;
        if (dnnmem_model_load(path, &m, &err) != DNNMEM_OK) {
            fprintf(stderr, "bench: %s\n", err.message);
            exit(1);
        }
        double t1 = now_ms();
        struct dnnmem_config cfg;
        dnnmem_config_init(&cfg);
        cfg.batch_size = batch;
        cfg.seq_len = seq;
        struct dnnmem_result *r;
        if (dnnmem_estimate(m, &cfg, &r, &err) != DNNMEM_OK) {
            fprintf(stderr, "bench: %s\n", err.message);
            exit(1);
        }
        total = r->total_bytes;
        dnnmem_result_free(r);
        dnnmem_model_free(m);
        t[i] = now_ms() - t0;
        tl[i] = t1 - t0;
    }
    qsort(t, (size_t)runs, sizeof *t, cmp_double);
    qsort(tl, (size_t)runs, sizeof *tl, cmp_double);
    printf("%-40s %5d runs  median %7.3f ms  p90 %7.3f ms  (load %7.3f ms)  peak %.1f MiB\n",
           label, runs, t[runs / 2], t[runs * 9 / 10], tl[runs / 2], (double)total / 1048576.0);
    free(t);
    free(tl);
}

/* A training estimate of a loaded model: schedule of two Adam steps and the
 * caching-allocator simulation (shape inference included). */
static void bench_train(const char *label, const char *path, int64_t batch, int64_t seq, int runs)
{
    dnnmem_model *m;
    struct dnnmem_error err;
    if (dnnmem_model_load(path, &m, &err) != DNNMEM_OK) {
        printf("%-40s skipped: %s\n", label, err.message);
        return;
    }
    double *t = malloc((size_t)runs * sizeof *t);
    uint64_t total = 0;
    for (int i = 0; i < runs; i++) {
        struct dnnmem_config cfg;
        dnnmem_config_init(&cfg);
        cfg.mode = DNNMEM_MODE_TRAIN;
        cfg.optimizer = DNNMEM_OPT_ADAM;
        cfg.loss = seq ? DNNMEM_LOSS_SUM : DNNMEM_LOSS_CE;
        cfg.batch_size = batch;
        cfg.seq_len = seq;
        double t0 = now_ms();
        struct dnnmem_result *r;
        if (dnnmem_estimate(m, &cfg, &r, &err) != DNNMEM_OK) {
            fprintf(stderr, "bench: %s\n", err.message);
            exit(1);
        }
        t[i] = now_ms() - t0;
        total = r->total_bytes;
        dnnmem_result_free(r);
    }
    dnnmem_model_free(m);
    qsort(t, (size_t)runs, sizeof *t, cmp_double);
    printf("%-40s %5d runs  median %7.3f ms  p90 %7.3f ms  peak %.1f MiB\n", label, runs,
           t[runs / 2], t[runs * 9 / 10], (double)total / 1048576.0);
    free(t);
}

/* Issue 19's speed target: an 8-GPU FSDP full (and ZeRO-3, DDP) training
 * estimate of the 70B config, the model loaded and its graph built by a
 * first estimate (docs/parallel.md). */
static void bench_hf_par(const char *path, int runs)
{
    dnnmem_model *m;
    struct dnnmem_error err;
    if (dnnmem_model_load(path, &m, &err) != DNNMEM_OK) {
        printf("%-40s skipped: %s\n", path, err.message);
        exit(1);
    }
    static const char *const names[] = {"one GPU", "8 GPUs, DDP", "8 GPUs, ZeRO-3", "8 GPUs, FSDP full"};
    double *t = malloc((size_t)runs * sizeof *t);
    for (int v = 0; v < 4; v++) {
        struct dnnmem_config cfg;
        dnnmem_config_init(&cfg);
        cfg.mode = DNNMEM_MODE_TRAIN;
        cfg.optimizer = DNNMEM_OPT_ADAMW;
        cfg.precision = DNNMEM_PRECISION_BF16;
        cfg.batch_size = 1;
        cfg.seq_len = 4096;
        cfg.par.gpus = v ? 8 : 0;
        cfg.par.zero = v == 2 ? 3 : 0;
        cfg.par.fsdp = v == 3 ? DNNMEM_FSDP_FULL : DNNMEM_FSDP_NONE;
        uint64_t total = 0;
        for (int i = -1; i < runs; i++) { /* run -1 builds the graph */
            struct dnnmem_result *r;
            double t0 = now_ms();
            if (dnnmem_estimate(m, &cfg, &r, &err) != DNNMEM_OK) {
                fprintf(stderr, "bench: %s\n", err.message);
                exit(1);
            }
            if (i >= 0)
                t[i] = now_ms() - t0;
            total = r->total_bytes;
            dnnmem_result_free(r);
        }
        qsort(t, (size_t)runs, sizeof *t, cmp_double);
        printf("  %-38s %5d runs  median %7.3f ms  p90 %7.3f ms  rank peak %.1f GiB\n", names[v],
               runs, t[runs / 2], t[runs * 9 / 10], (double)total / 1073741824.0);
    }
    free(t);
    dnnmem_model_free(m);
}

/* A 70B-parameter, 80-layer HuggingFace config: load (an outline of the graph
 * from config.json), a bf16 AdamW training estimate (the first one builds its
 * graph, src/estimate/variant.c), and the largest-batch search
 * for a hypothetical 2 TiB device (so the search has room to bisect). */
static void bench_hf(const char *path, int runs)
{
    dnnmem_model *m;
    struct dnnmem_error err;
    double *t = malloc((size_t)runs * sizeof *t), *ts = malloc((size_t)runs * sizeof *ts);
    double *tl = malloc((size_t)runs * sizeof *tl), *tq = malloc((size_t)runs * sizeof *tq);
    uint64_t total = 0;
    int64_t best = 0, best_q = 0;
    for (int i = 0; i < runs; i++) {
        double t0 = now_ms();
        if (dnnmem_model_load(path, &m, &err) != DNNMEM_OK) {
            printf("%-40s skipped: %s\n", path, err.message);
            exit(1);
        }
        double t1 = now_ms();
        struct dnnmem_config cfg;
        dnnmem_config_init(&cfg);
        cfg.mode = DNNMEM_MODE_TRAIN;
        cfg.optimizer = DNNMEM_OPT_ADAMW;
        cfg.precision = DNNMEM_PRECISION_BF16;
        cfg.batch_size = 1;
        cfg.seq_len = 4096;
        struct dnnmem_result *r, *at = NULL, *next = NULL;
        if (dnnmem_estimate(m, &cfg, &r, &err) != DNNMEM_OK) {
            fprintf(stderr, "bench: %s\n", err.message);
            exit(1);
        }
        double t2 = now_ms();
        total = r->total_bytes;
        dnnmem_result_free(r);
        cfg.capacity_bytes = INT64_C(2) << 40;
        if (dnnmem_max_dim(m, &cfg, NULL, 4096, &best, &at, &next, &err) != DNNMEM_OK) {
            fprintf(stderr, "bench: %s\n", err.message);
            exit(1);
        }
        ts[i] = now_ms() - t2;
        t[i] = t2 - t1;
        tl[i] = t1 - t0;
        dnnmem_result_free(at);
        dnnmem_result_free(next);
        /* QLoRA: the graph rebuilt with adapters and 4-bit weights, once per search */
        cfg.lora.r = 16;
        cfg.quant = DNNMEM_QUANT_NF4;
        double t3 = now_ms();
        if (dnnmem_max_dim(m, &cfg, NULL, 4096, &best_q, &at, &next, &err) != DNNMEM_OK) {
            fprintf(stderr, "bench: %s\n", err.message);
            exit(1);
        }
        tq[i] = now_ms() - t3;
        dnnmem_result_free(at);
        dnnmem_result_free(next);
        dnnmem_model_free(m);
    }
    qsort(t, (size_t)runs, sizeof *t, cmp_double);
    qsort(ts, (size_t)runs, sizeof *ts, cmp_double);
    qsort(tl, (size_t)runs, sizeof *tl, cmp_double);
    printf("%-40s %5d runs  load %7.3f ms  train estimate %7.3f ms  peak %.1f GiB\n",
           "Llama-3.1-70B (bf16 adamw, b 1, s 4096)", runs, tl[runs / 2], t[runs / 2],
           (double)total / 1073741824.0);
    printf("%-40s %5d runs  median %7.3f ms  p90 %7.3f ms  largest batch %lld\n",
           "  largest-batch search (2 TiB)", runs, ts[runs / 2], ts[runs * 9 / 10],
           (long long)best);
    qsort(tq, (size_t)runs, sizeof *tq, cmp_double);
    printf("%-40s %5d runs  median %7.3f ms  p90 %7.3f ms  largest batch %lld\n",
           "  the same, QLoRA (nf4, r 16)", runs, tq[runs / 2], tq[runs * 9 / 10],
           (long long)best_q);
    free(t);
    free(ts);
    free(tl);
    free(tq);
}

/* A large mixture-of-experts config (DeepSeek-V3: 58 MoE layers of 256
 * experts, about 220,000 nodes per graph): load, and a bf16 AdamW training
 * estimate; no search (each estimate takes seconds). */
static void bench_hf_moe(const char *path, const char *label, int runs)
{
    double *tl = malloc((size_t)runs * sizeof *tl), *ti = malloc((size_t)runs * sizeof *ti);
    double *tt = malloc((size_t)runs * sizeof *tt);
    uint64_t total = 0;
    for (int i = 0; i < runs; i++) {
        dnnmem_model *m;
        struct dnnmem_error err;
        double t0 = now_ms();
        if (dnnmem_model_load(path, &m, &err) != DNNMEM_OK) {
            printf("%-40s skipped: %s\n", path, err.message);
            exit(1);
        }
        double t1 = now_ms();
        struct dnnmem_config cfg;
        dnnmem_config_init(&cfg);
        cfg.precision = DNNMEM_PRECISION_BF16;
        cfg.batch_size = 1;
        cfg.seq_len = 4096;
        struct dnnmem_result *r;
        for (int train = 0; train < 2; train++) {
            cfg.mode = train ? DNNMEM_MODE_TRAIN : DNNMEM_MODE_INFER;
            cfg.optimizer = DNNMEM_OPT_ADAMW;
            double t2 = now_ms();
            if (dnnmem_estimate(m, &cfg, &r, &err) != DNNMEM_OK) {
                fprintf(stderr, "bench: %s\n", err.message);
                exit(1);
            }
            (train ? tt : ti)[i] = now_ms() - t2;
            total = r->total_bytes;
            dnnmem_result_free(r);
        }
        tl[i] = t1 - t0;
        dnnmem_model_free(m);
    }
    qsort(tl, (size_t)runs, sizeof *tl, cmp_double);
    qsort(ti, (size_t)runs, sizeof *ti, cmp_double);
    qsort(tt, (size_t)runs, sizeof *tt, cmp_double);
    printf("%-40s %5d runs  load %7.1f ms  infer %7.1f ms  train %7.1f ms  peak %.1f GiB\n", label,
           runs, tl[runs / 2], ti[runs / 2], tt[runs / 2], (double)total / 1073741824.0);
    free(tl);
    free(ti);
    free(tt);
}

int main(int argc, char **argv)
{
    size_t big = 0;
    char embedded[512];
    snprintf(embedded, sizeof embedded, "%s/resnet50-embedded.onnx", argc > 1 ? argv[1] : ".");
    if (embed_weights("tests/models/fixtures/resnet50.onnx", embedded, &big) != 0) {
        fprintf(stderr, "bench: cannot write %s\n", embedded);
        return 1;
    }
    printf("load + shape inference + inference estimate, in process\n");
    bench("resnet50 (batch 32)", "tests/models/fixtures/resnet50.onnx", 32, 0, 500);
    bench("vgg16 (batch 32)", "tests/models/fixtures/vgg16.onnx", 32, 0, 500);
    bench("inception_v3 (batch 32)", "tests/models/fixtures/inception_v3.onnx", 32, 0, 300);
    bench("lstm_lm (batch 20, seq 35)", "tests/models/fixtures/lstm_lm.onnx", 20, 35, 300);
    bench("bert_encoder (batch 8, seq 512)", "tests/models/fixtures/bert_encoder.onnx", 8, 512, 200);
    char label[64];
    snprintf(label, sizeof label, "resnet50, %.0f MB embedded weights", (double)big / 1e6);
    bench(label, embedded, 32, 0, 100);
    printf("\ntraining estimate (2 Adam steps: shapes, schedule, caching allocator), model loaded\n");
    bench_train("resnet50 (batch 32)", "tests/models/fixtures/resnet50.onnx", 32, 0, 300);
    bench_train("bert_encoder, 12 layers (batch 8, seq 512)",
                "tests/models/fixtures/bert_encoder.onnx", 8, 512, 100);
    bench_train("bert_large_encoder, 24 layers (b 8, seq 512)",
                "tests/models/fixtures/bert_large_encoder.onnx", 8, 512, 100);
    printf("\nHuggingFace config.json, 80 layers\n");
    bench_hf("tests/models/hf/Llama-3.1-70B-Instruct.json", 20);
    printf("\nLlama-3.1-70B training estimate per rank (bf16 adamw, b 1, s 4096; target 50 ms)\n");
    bench_hf_par("tests/models/hf/Llama-3.1-70B-Instruct.json", 20);
    printf("\nHuggingFace mixture of experts (bf16, b 1, s 4096: infer, adamw train)\n");
    bench_hf_moe("tests/models/hf/Mixtral-8x7B-v0.1.json", "Mixtral-8x7B (32 layers, 8 experts)", 5);
    bench_hf_moe("tests/models/hf/DeepSeek-V3-bf16.json", "DeepSeek-V3 (61 layers, 256 experts)", 3);
    return 0;
}
