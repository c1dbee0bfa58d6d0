/*
 * trace_replay.c: replays a request sequence through dnnmem's simulation of
 * PyTorch's caching allocator (src/alloc/caching.c, default options), for
 * tools/gpu/trace_summary.py --replay: given a real allocator trace's own
 * requests and frees, does the simulation make the segments PyTorch made?
 * When it does, a reserved figure that differs comes from the schedule (the
 * requests and their order), not from the allocator's rules.
 *
 * Build (after make):
 *   cc -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -Wall -Wextra -Werror -Iinclude -Isrc \
 *      -o build/trace_replay tools/gpu/trace_replay.c build/libdnnmem.a \
 *      $(pkg-config --libs libprotobuf-c jansson libzip) -lm
 *
 * Input, one per line: "A KEY BYTES" (allocate BYTES as request KEY, keys
 * 1, 2, ... in order) or "F KEY" (free it). Output, one line per A: "KEY
 * GRANTED NEW_SEGMENT_BYTES RESERVED".
 */
#include "dnnmem-impl.h"

#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    struct dm_caching_opts o;
    dm_caching_opts_init(&o);
    struct dm_allocator a;
    if (dm_alloc_caching_new(&o, &a) != DNNMEM_OK)
        return 1;
    size_t cap = 1024;
    uint64_t *h = calloc(cap, sizeof *h);
    if (!h)
        return 1;
    char c;
    long key;
    while (scanf(" %c %ld", &c, &key) == 2) {
        if (key < 0)
            return 2;
        while ((size_t)key >= cap) {
            uint64_t *nh = realloc(h, 2 * cap * sizeof *nh);
            if (!nh)
                return 1;
            for (size_t i = cap; i < 2 * cap; i++)
                nh[i] = 0;
            h = nh;
            cap *= 2;
        }
        if (c == 'A') {
            unsigned long long n;
            if (scanf(" %llu", &n) != 1)
                return 2;
            struct dm_alloc_stats s0, s1;
            a.stats(a.self, &s0);
            uint64_t granted;
            if (a.alloc(a.self, n, &h[key], &granted) != DNNMEM_OK)
                return 3;
            a.stats(a.self, &s1);
            printf("%ld %llu %llu %llu\n", key, (unsigned long long)granted,
                   (unsigned long long)(s1.reserved - s0.reserved),
                   (unsigned long long)s1.reserved);
        } else if (c == 'F') {
            a.free(a.self, h[key]);
            h[key] = 0;
        } else {
            return 2;
        }
    }
    a.destroy(a.self);
    free(h);
    return 0;
}
