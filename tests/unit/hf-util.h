/* The HuggingFace front end's tests' helpers (test-hf.c, test-hfrel.c):
 * a config's graph built by dm_load_hf for a config's options. Include after
 * util.h and the cmocka headers. */
#ifndef DNNMEM_TEST_HF_UTIL_H
#define DNNMEM_TEST_HF_UTIL_H

#include <jansson.h>

/* The run dm_load_hf builds for under cfg (NULL: none, the graph as
 * loaded), as the defaults table resolves it for these configs (none is an
 * fp8 checkpoint, whose compute capability would be 8.9): the options'
 * releases, GPU and lora_alpha, else PyTorch 2.6, transformers 4.51, sm80,
 * PEFT's 8. */
static inline const struct dm_hf_env *env_of(const struct dnnmem_config *cfg, struct dm_hf_env *env)
{
    if (!cfg)
        return NULL;
    env->torch = cfg->torch_version ? cfg->torch_version : 206;
    env->transformers = cfg->transformers_version ? cfg->transformers_version : 451;
    env->cc = cfg->compute_capability ? cfg->compute_capability : 80;
    env->lora_alpha = cfg->lora.alpha > 0 ? cfg->lora.alpha : 8;
    return env;
}

#define ENV(cfg) env_of(cfg, &(struct dm_hf_env){0})

/* dm_load_hf of a config's text: parsed here, as dnnmem_model_load parses
 * a file once and hands the root to the front end. */
static inline enum dnnmem_status hf_text(struct dm_graph *g, const uint8_t *data, size_t size, bool sdpa,
                                  const struct dnnmem_config *cfg, const struct dm_hf_env *env,
                                  struct dnnmem_error *err)
{
    json_t *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (!root)
        return dm_fail(err, DNNMEM_E_PARSE, "config: not valid JSON");
    enum dnnmem_status s = dm_load_hf(g, root, sdpa, cfg, env, err);
    json_decref(root);
    return s;
}

/* dm_load_hf of tests/models/hf/NAME (a config under 4 KiB), which must load. */
static inline void load_hf_graph(struct dm_graph *g, const char *name, bool sdpa,
                          const struct dnnmem_config *cfg)
{
    char path[256], json[4096];
    snprintf(path, sizeof path, "tests/models/hf/%s", name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t size = fread(json, 1, sizeof json, f);
    fclose(f);
    dm_graph_init(g);
    g->path = name;
    struct dnnmem_error err;
    if (hf_text(g, (const uint8_t *)json, size, sdpa, cfg, ENV(cfg), &err) != DNNMEM_OK)
        fail_msg("load %s: %s", name, err.message);
}

#endif
