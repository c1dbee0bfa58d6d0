/* gpus.c: the GPU catalogue (the facts, with sources, are in gpus.def). */
#include "dnnmem-impl.h"

#include <string.h>
#include <strings.h>

static const struct dnnmem_gpu gpus[] = {
#define DM_GPU(name, device, total, cc, reserved, source) {name, device, total, cc, reserved, source},
#include "report/gpus.def"
#undef DM_GPU
};

size_t dnnmem_gpu_count(void) { return sizeof gpus / sizeof gpus[0]; }

const struct dnnmem_gpu *dnnmem_gpu_at(size_t i)
{
    return i < dnnmem_gpu_count() ? &gpus[i] : NULL;
}

const struct dnnmem_gpu *dnnmem_gpu_find(const char *name)
{
    for (size_t i = 0; name && i < dnnmem_gpu_count(); i++)
        if (strcasecmp(gpus[i].name, name) == 0)
            return &gpus[i];
    return NULL;
}

void dnnmem_config_use_gpu(struct dnnmem_config *cfg, const struct dnnmem_gpu *gpu)
{
    if (!cfg || !gpu)
        return;
    cfg->capacity_bytes = gpu->total_bytes - gpu->reserved_bytes;
    if (!cfg->compute_capability && gpu->compute_capability)
        cfg->compute_capability = gpu->compute_capability;
    cfg->device_label = gpu->name;
}

/* name lowercased, without '-', '_' and spaces, into out (n bytes). */
static void squeeze(const char *name, char *out, size_t n)
{
    size_t o = 0;
    for (const char *p = name; *p && o + 1 < n; p++)
        if (*p != '-' && *p != '_' && *p != ' ')
            out[o++] = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
    out[o] = '\0';
}

/* Levenshtein distance of two short strings (at most 63 characters). */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64];
    if (la > 63 || lb > 63)
        return 64;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            if (up + 1 < best)
                best = up + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

size_t dm_gpu_suggest(const char *name, char *buf, size_t n)
{
    enum { MAX_SUGGESTIONS = 6 };
    char want[64], have[64];
    squeeze(name ? name : "", want, sizeof want);
    /* two edits in a long name ("h1oo80gb"), one in a short one ("a1o" but
     * not "z80" for "a10") */
    size_t max_distance = strlen(want) >= 6 ? 2 : 1;
    bool mig = name && strchr(name, ':');
    size_t found = 0, o = 0;
    buf[0] = '\0';
    /* the names that hold what was typed (dashes and case aside), else those
     * within a few edits of it; MIG slices only when a slice was asked for */
    for (int pass = 0; pass < 2 && !found && want[0]; pass++)
        for (size_t i = 0; i < dnnmem_gpu_count() && found < MAX_SUGGESTIONS; i++) {
            if (!mig && strchr(gpus[i].name, ':'))
                continue;
            squeeze(gpus[i].name, have, sizeof have);
            if (pass == 0 ? !strstr(have, want) : distance(want, have) > max_distance)
                continue;
            int w = snprintf(buf + o, n - o, "%s%s", found ? ", " : "", gpus[i].name);
            if (w < 0 || (size_t)w >= n - o)
                break;
            o += (size_t)w;
            found++;
        }
    return found;
}
