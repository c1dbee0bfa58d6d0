/*
 * builder.c: the schedule builder's buffers and events (builder.h), the
 * bottom layer: the forward pass (forward.c), generation (generate.c) and the
 * training step (src/train) record what they allocate and free through it.
 */
#include "schedule/builder.h"

#include <stdlib.h>

void dm_sb_step(struct dm_sb *b, enum dm_phase phase, int32_t node)
{
    struct dm_schedule *s = b->s;
    size_t cap = (size_t)s->cap_steps;
    if (!dm_grow((void **)&s->steps, sizeof *s->steps, (size_t)s->n_steps, &cap)) {
        b->oom = true;
        return;
    }
    s->cap_steps = (int32_t)cap;
    s->steps[s->n_steps++] =
        (struct dm_step){.phase = (uint8_t)phase, .iteration = (int16_t)b->iteration, .node = node};
}

static void event(struct dm_sb *b, enum dm_ev_kind kind, int32_t buf)
{
    struct dm_schedule *s = b->s;
    if (!dm_grow((void **)&s->ev, sizeof *s->ev, s->n_ev, &s->cap_ev)) {
        b->oom = true;
        return;
    }
    s->ev[s->n_ev++] = (struct dm_event){(uint8_t)kind, buf, s->n_steps - 1};
}

int32_t dm_sb_alloc(struct dm_sb *b, enum dnnmem_category cat, enum dm_dtype dtype,
                    uint64_t bytes, int32_t tensor, int32_t node, const char *what,
                    int32_t holders)
{
    struct dm_schedule *s = b->s;
    size_t cap = (size_t)s->cap_buf;
    if (b->oom || s->n_buf == INT32_MAX ||
        !dm_grow((void **)&s->buf, sizeof *s->buf, (size_t)s->n_buf, &cap)) {
        b->oom = true;
        return -1;
    }
    if ((int32_t)cap != s->cap_buf) {
        int32_t *r = realloc(b->refs, cap * sizeof *r);
        if (!r) {
            b->oom = true;
            return -1;
        }
        b->refs = r;
        s->cap_buf = (int32_t)cap;
    }
    int32_t id = s->n_buf++;
    s->buf[id] = (struct dm_buffer){bytes, tensor, node, (uint8_t)cat, (uint8_t)dtype, what};
    b->refs[id] = holders;
    event(b, DM_EV_ALLOC, id);
    if (holders <= 0)
        event(b, DM_EV_FREE, id);
    return id;
}

void dm_sb_ref(struct dm_sb *b, int32_t buf, int32_t n)
{
    if (buf >= 0)
        b->refs[buf] += n;
}

void dm_sb_unref(struct dm_sb *b, int32_t buf)
{
    if (buf < 0 || b->refs[buf] <= 0)
        return;
    if (--b->refs[buf] == 0)
        event(b, DM_EV_FREE, buf);
}

int32_t dm_sb_input(const struct dm_sb *b, const struct dm_node *n, int k)
{
    if (!dm_has_in(n, k))
        return -1;
    return b->in_buf[k] >= 0 ? b->in_buf[k] : b->cur[n->in[k]];
}

enum dnnmem_status dm_refuse(struct dm_schedule *s, enum dm_refusal_kind kind, const char *name,
                             const char *why, struct dnnmem_error *err)
{
    s->refusal = (struct dm_refusal){.kind = kind, .name = name, .why = why};
    return dm_fail(err, DNNMEM_E_INTERNAL, "refusal %d found building the schedule has no check row",
                   (int)kind);
}
