/* memhook: the bytes c10's CPU allocator holds, across every thread of a process.
 *
 * LD_PRELOAD'ed by tools/oracle/dist_measure.py into each rank.  c10's DefaultCPUAllocator
 * allocates with posix_memalign and frees with free (c10/core/impl/alloc_cpu.cpp: alloc_cpu,
 * free_cpu), so interposing those two counts the requested bytes of every c10 CPU tensor,
 * (the calls from libc10.so with c10's alignment, 64), whichever thread allocates or frees it: the profiler's memory events miss a free that
 * happens on a thread without the profiler's thread-local state (gloo's worker thread
 * dropping a finished work's tensors), and then over-count.  dist_measure.py's rows keep
 * the profiler's figures beside these: on runs with no collective they agree to the byte.  A measurement tool, not part of libdnnmem: it has process-wide state by
 * necessity (an allocator hook), a fixed-size table (MEMHOOK_SLOTS; beyond it, allocations
 * go uncounted and memhook_overflow() says so) and one mutex.
 *
 *   cc -O2 -shared -fPIC -o memhook.so memhook.c -ldl -lpthread
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MEMHOOK_SLOTS (1u << 21)

extern void __libc_free(void *);

static int (*real_memalign)(void **, size_t, size_t);
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t keys[MEMHOOK_SLOTS];   /* 0 empty, 1 tombstone */
static size_t sizes[MEMHOOK_SLOTS];
static long long cur, peak, overflow, enabled;

/* An event log (allocation: +size, free: -size, with the address), in the one order the
 * mutex gives, for the live set at the peak; beyond MEMHOOK_LOG events the log stops (the
 * counts go on) and memhook_log_len() stays at the cap. */
#define MEMHOOK_LOG (1u << 20)
struct memhook_event { long long bytes; uintptr_t ptr; };
static struct memhook_event evlog[MEMHOOK_LOG];
static size_t nlog;

static void log_event(uintptr_t p, long long b)
{
    if (nlog < MEMHOOK_LOG) {
        evlog[nlog].bytes = b;
        evlog[nlog].ptr = p;
        nlog++;
    }
}

static size_t slot_of(uintptr_t p) { return (size_t)((p >> 6) * 0x9E3779B97F4A7C15ull) & (MEMHOOK_SLOTS - 1); }

static void put(uintptr_t p, size_t n)
{
    size_t i = slot_of(p);
    for (size_t k = 0; k < MEMHOOK_SLOTS; k++, i = (i + 1) & (MEMHOOK_SLOTS - 1))
        if (keys[i] <= 1) {
            keys[i] = p;
            sizes[i] = n;
            cur += (long long)n;
            log_event(p, (long long)n);
            if (cur > peak)
                peak = cur;
            return;
        }
    overflow++;
}

static void take(uintptr_t p)
{
    size_t i = slot_of(p);
    for (size_t k = 0; k < MEMHOOK_SLOTS; k++, i = (i + 1) & (MEMHOOK_SLOTS - 1)) {
        if (keys[i] == 0)
            return;
        if (keys[i] == p) {
            keys[i] = 1;
            cur -= (long long)sizes[i];
            log_event(p, -(long long)sizes[i]);
            return;
        }
    }
}

static const void *c10_base;

static int from_c10(const void *ret)
{
    Dl_info info;
    if (!dladdr(ret, &info) || !info.dli_fname)
        return 0;
    if (c10_base)
        return info.dli_fbase == c10_base;
    const char *f = strstr(info.dli_fname, "libc10.so");
    if (f)
        c10_base = info.dli_fbase;
    return f != NULL;
}

int posix_memalign(void **out, size_t align, size_t n)
{
    if (!real_memalign)
        real_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
    int rc = real_memalign(out, align, n);
    /* only c10's own calls (alloc_cpu in libc10.so, with c10/core/alignment.h's gAlignment
     * 64): oneDNN's scratchpads and weight caches (statically linked into libtorch_cpu.so)
     * call posix_memalign too, and are not c10 tensors */
    if (rc == 0 && *out && n && align == 64 && from_c10(__builtin_return_address(0))) {
        pthread_mutex_lock(&lock);
        if (enabled)
            put((uintptr_t)*out, n);
        pthread_mutex_unlock(&lock);
    }
    return rc;
}

void free(void *p)
{
    if (p) {
        pthread_mutex_lock(&lock);
        take((uintptr_t)p);
        pthread_mutex_unlock(&lock);
    }
    __libc_free(p);
}

/* The API dist_measure.py calls through ctypes. */
void memhook_enable(int on) { pthread_mutex_lock(&lock); enabled = on; pthread_mutex_unlock(&lock); }
long long memhook_current(void) { pthread_mutex_lock(&lock); long long v = cur; pthread_mutex_unlock(&lock); return v; }
long long memhook_peak(void) { pthread_mutex_lock(&lock); long long v = peak; pthread_mutex_unlock(&lock); return v; }
long long memhook_overflow(void) { return overflow; }
size_t memhook_log_len(void) { return nlog; }
/* Copies events [from, from + n) into out (bytes, ptr pairs); returns how many. */
size_t memhook_log_copy(size_t from, size_t n, long long *out)
{
    pthread_mutex_lock(&lock);
    size_t k = 0;
    for (; k < n && from + k < nlog; k++) {
        out[2 * k] = evlog[from + k].bytes;
        out[2 * k + 1] = (long long)evlog[from + k].ptr;
    }
    pthread_mutex_unlock(&lock);
    return k;
}
void memhook_reset_peak(void) { pthread_mutex_lock(&lock); peak = cur; pthread_mutex_unlock(&lock); }
