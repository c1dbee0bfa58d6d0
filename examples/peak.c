/* peak.c: the smallest use of libdnnmem: print the peak for a model and batch.
 *
 *   cc peak.c $(pkg-config --cflags --libs dnnmem) -o peak
 *   ./peak model.onnx 32
 */
#include <dnnmem.h>

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: peak MODEL BATCH\n");
        return 2;
    }
    struct dnnmem_error err;
    dnnmem_model *m;
    if (dnnmem_model_load(argv[1], &m, &err) != DNNMEM_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 3;
    }
    struct dnnmem_config cfg;
    dnnmem_config_init(&cfg);
    cfg.batch_size = atoll(argv[2]);
    struct dnnmem_result *r;
    if (dnnmem_estimate(m, &cfg, &r, &err) != DNNMEM_OK) {
        fprintf(stderr, "%s\n", err.message);
        dnnmem_model_free(m);
        return 3;
    }
    printf("%llu bytes at node '%s' (%s)\n", (unsigned long long)r->total_bytes, r->peak_node,
           r->peak_op);
    dnnmem_result_free(r);
    dnnmem_model_free(m);
    return 0;
}
