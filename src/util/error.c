/* error.c: status names and the one-line error record. */
#include "dnnmem-impl.h"

#include <stdio.h>
#include <string.h>

const char *dnnmem_status_name(enum dnnmem_status s)
{
    switch (s) {
    case DNNMEM_OK: return "ok";
    case DNNMEM_E_USAGE: return "usage error";
    case DNNMEM_E_CONSTRAINT: return "impossible constraints";
    case DNNMEM_E_IO: return "I/O error";
    case DNNMEM_E_PARSE: return "parse error";
    case DNNMEM_E_MODEL: return "invalid model";
    case DNNMEM_E_SHAPE: return "shape error";
    case DNNMEM_E_UNBOUND: return "unbound dimension";
    case DNNMEM_E_UNSUPPORTED: return "unsupported";
    case DNNMEM_E_NOMEM: return "out of memory";
    case DNNMEM_E_DEVICE_OOM: return "does not fit the device";
    case DNNMEM_E_LIMIT: return "beyond a resource budget";
    case DNNMEM_E_INTERNAL: return "internal error";
    }
    return "unknown status";
}

enum dnnmem_status dm_fail(struct dnnmem_error *err, enum dnnmem_status s, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
        /* one line: fold any newline a model-provided name may carry */
        for (char *p = err->message; *p; p++)
            if (*p == '\n' || *p == '\r')
                *p = ' ';
        err->status = s;
    }
    return s;
}
