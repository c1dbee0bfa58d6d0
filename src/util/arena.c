/* arena.c: a chunked bump allocator; everything is freed at once. */
#include "dnnmem-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dm_arena_chunk {
    struct dm_arena_chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

#define DM_ARENA_CHUNK 65536u

void dm_arena_init(struct dm_arena *a)
{
    a->head = NULL;
    a->used = 0;
}

void dm_arena_free(struct dm_arena *a)
{
    struct dm_arena_chunk *c = a->head;
    while (c) {
        struct dm_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->used = 0;
}

void *dm_arena_alloc(struct dm_arena *a, size_t size)
{
    if (size > SIZE_MAX / 2)
        return NULL;
    size_t need = (size + 15u) & ~(size_t)15u;
    struct dm_arena_chunk *c = a->head;
    if (!c || c->size - c->used < need) {
        size_t cap = need > DM_ARENA_CHUNK / 4 ? need : DM_ARENA_CHUNK;
        struct dm_arena_chunk *n = malloc(sizeof *n + cap);
        if (!n)
            return NULL;
        n->size = cap;
        n->used = 0;
        if (c && need > DM_ARENA_CHUNK / 4) {
            /* a big block gets a chunk of its own behind the current one, so
             * the current chunk's free tail stays usable */
            n->next = c->next;
            c->next = n;
        } else {
            n->next = c;
            a->head = n;
        }
        c = n;
    }
    void *p = c->data + c->used;
    c->used += need;
    a->used += need;
    memset(p, 0, need);
    return p;
}

void *dm_arena_array(struct dm_arena *a, size_t n, size_t elem)
{
    if (elem && n > SIZE_MAX / 2 / elem)
        return NULL;
    size_t bytes = n * elem;
    return dm_arena_alloc(a, bytes ? bytes : 1);
}

bool dm_grow(void **p, size_t elem, size_t n, size_t *cap)
{
    if (n < *cap)
        return true;
    size_t c = *cap ? *cap * 2 : 256;
    if (!elem || c < *cap || c > SIZE_MAX / elem)
        return false;
    void *q = realloc(*p, c * elem);
    if (!q)
        return false;
    *p = q;
    *cap = c;
    return true;
}

char *dm_arena_strndup(struct dm_arena *a, const char *s, size_t n)
{
    char *d = dm_arena_alloc(a, n + 1);
    if (d) {
        if (n)
            memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

char *dm_arena_strdup(struct dm_arena *a, const char *s)
{
    return dm_arena_strndup(a, s ? s : "", s ? strlen(s) : 0);
}

char *dm_arena_printf(struct dm_arena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *d = dm_arena_alloc(a, (size_t)n + 1);
    if (d) {
        va_start(ap, fmt);
        vsnprintf(d, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    return d;
}
