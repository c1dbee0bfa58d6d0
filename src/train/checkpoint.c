/*
 * checkpoint.c: activation checkpointing (torch.utils.checkpoint, --checkpoint):
 * the segments, and in the forward the grad mode of each node and the
 * inputs a segment keeps. The recomputation in the backward is train.c's.
 */
#include "train/train.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

/* The first k '/'-separated components of a node name ("/layer1/layer1.0"). */
static size_t name_prefix(const char *name, int k)
{
    size_t len = 0;
    int seen = 0;
    while (name[len]) {
        if (name[len] == '/' && len > 0 && ++seen == k)
            return len;
        len++;
    }
    return seen + 1 == k ? len : 0;
}

/* torch.utils.checkpoint segments, from the specs (include/dnnmem.h); a
 * spec they cannot take is refused (dm_refuse: the check table's
 * DM_CHECK_BUILT rows give the error). */
enum dnnmem_status dm_checkpoint_segments(struct dm_sb *b, struct dnnmem_error *err)
{
    struct dm_train *tr = b->train;
    const struct dm_graph *g = b->g;
    int32_t nn = g->n_nodes;
    tr->seg = malloc(((size_t)nn + 1) * sizeof *tr->seg);
    tr->seg_first = malloc(((size_t)nn + 1) * sizeof *tr->seg_first);
    tr->seg_last = malloc(((size_t)nn + 1) * sizeof *tr->seg_last);
    tr->seg_kept = calloc((size_t)nn + 1, sizeof *tr->seg_kept);
    tr->n_seg_kept = calloc((size_t)nn + 1, sizeof *tr->n_seg_kept);
    tr->local_uses = calloc((size_t)g->n_tensors + 1, sizeof *tr->local_uses);
    if (!tr->seg || !tr->seg_first || !tr->seg_last || !tr->seg_kept || !tr->n_seg_kept ||
        !tr->local_uses)
        return dm_fail(err, DNNMEM_E_NOMEM, "out of memory");
    for (int32_t i = 0; i < nn; i++)
        tr->seg[i] = -1;
    for (size_t c = 0; c < b->run->n_checkpoint; c++) {
        const char *spec = b->run->checkpoint[c];
        const char *dots = strstr(spec, "..");
        int32_t before = tr->n_seg;
        if (dots) { /* A..B */
            char a[256];
            size_t la = (size_t)(dots - spec);
            if (la >= sizeof a)
                return dm_refuse(b->s, DM_REFUSE_CKPT_LONG, spec, NULL, err);
            memcpy(a, spec, la);
            a[la] = '\0';
            int32_t first = -1, last = -1;
            for (int32_t i = 0; i < nn; i++) {
                if (first < 0 && fnmatch(a, g->nodes[i].name, 0) == 0)
                    first = i;
                if (fnmatch(dots + 2, g->nodes[i].name, 0) == 0)
                    last = i;
            }
            if (first >= 0 && last >= first) {
                for (int32_t i = first; i <= last; i++)
                    if (tr->seg[i] >= 0)
                        return dm_refuse(b->s, DM_REFUSE_CKPT_OVERLAP, spec, g->nodes[i].name,
                                         err);
                for (int32_t i = first; i <= last; i++)
                    tr->seg[i] = tr->n_seg;
                tr->seg_first[tr->n_seg] = first;
                tr->seg_last[tr->n_seg++] = last;
            }
        } else { /* prefix glob, optionally ":K" to group K consecutive segments */
            char glob[256];
            const char *colon = strrchr(spec, ':');
            long every = 1;
            size_t gl = strlen(spec);
            if (colon && colon[1]) {
                char *end;
                every = strtol(colon + 1, &end, 10);
                if (*end || every < 1 || every > 100000)
                    return dm_refuse(b->s, DM_REFUSE_CKPT_EVERY, spec, NULL, err);
                gl = (size_t)(colon - spec);
            }
            if (gl >= sizeof glob)
                return dm_refuse(b->s, DM_REFUSE_CKPT_LONG, spec, NULL, err);
            memcpy(glob, spec, gl);
            glob[gl] = '\0';
            int depth = 1;
            for (const char *p = glob + 1; *p; p++)
                depth += *p == '/';
            size_t prev_len = 0;
            const char *prev = NULL; /* last node of the open segment, NULL: none open */
            long run = 0;            /* prefixes in the open segment, minus one */
            for (int32_t i = 0; i < nn; i++) {
                const char *name = g->nodes[i].name;
                size_t len = name_prefix(name, depth);
                char key[512];
                bool match = len && len < sizeof key && tr->seg[i] < 0;
                if (match) {
                    memcpy(key, name, len);
                    key[len] = '\0';
                    match = fnmatch(glob, key, 0) == 0;
                }
                if (!match) {
                    /* host-side nodes (constants, shape arithmetic) interleaved
                     * with a module's nodes do not end its segment */
                    const struct dm_node *nd = &g->nodes[i];
                    bool host = nd->n_out > 0 && nd->out[0] >= 0 && b->t[nd->out[0]].is_const;
                    if (!host)
                        prev = NULL;
                    continue;
                }
                bool same = prev && prev_len == len && strncmp(prev, name, len) == 0;
                if (!prev || (!same && ++run % every == 0)) {
                    if (!prev)
                        run = 0;
                    tr->seg_first[tr->n_seg] = tr->seg_last[tr->n_seg] = i;
                    tr->n_seg++;
                } else {
                    for (int32_t j = tr->seg_last[tr->n_seg - 1] + 1; j < i; j++)
                        tr->seg[j] = tr->n_seg - 1; /* the host-side nodes in between */
                }
                tr->seg[i] = tr->n_seg - 1;
                tr->seg_last[tr->n_seg - 1] = i;
                prev = name;
                prev_len = len;
            }
        }
        if (tr->n_seg == before) /* the check table's row says so */
            return dm_refuse(b->s, DM_REFUSE_CKPT_UNMATCHED, spec, nn ? g->nodes[nn / 2].name : "",
                             err);
    }
    return DNNMEM_OK;
}

bool dm_train_checkpoint_enter(struct dm_sb *b, int32_t i)
{
    struct dm_train *tr = b->train;
    int32_t sg = tr->seg[i];
    if (sg < 0)
        return true;
    if (i != tr->seg_first[sg])
        return false;
    /* CheckpointFunction.save_for_backward(*inputs): the segment's inputs */
    const struct dm_graph *g = b->g;
    int32_t first = tr->seg_first[sg], last = tr->seg_last[sg], n = 0;
    free(tr->seg_kept[sg]);
    tr->seg_kept[sg] = malloc(64 * sizeof(int32_t));
    for (int32_t j = first; j <= last && tr->seg_kept[sg]; j++) {
        const struct dm_node *nd = &g->nodes[j];
        for (int k = 0; k < nd->n_in; k++) {
            int32_t x = nd->in[k];
            if (x < 0 || dm_meta_slot(nd, k) || b->resident[x] >= 0 || b->cur[x] < 0)
                continue;
            int32_t p = g->tensors[x].producer;
            if (p >= first && p <= last)
                continue;
            bool dup = false;
            for (int32_t q = 0; q < n; q++)
                dup |= tr->seg_kept[sg][q] == b->cur[x];
            if (!dup && n < 64) {
                dm_sb_ref(b, b->cur[x], 1);
                tr->seg_kept[sg][n++] = b->cur[x];
            }
        }
    }
    tr->n_seg_kept[sg] = n;
    return false;
}
