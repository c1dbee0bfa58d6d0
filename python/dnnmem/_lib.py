"""ctypes over libdnnmem (include/dnnmem.h). The library is the one bundled into the package
at install time, or the one $DNNMEM_LIBRARY names (a build tree's build/libdnnmem.so).

Only these layouts are mirrored: struct dnnmem_error, dnnmem_advice, dnnmem_gpu and the handles
(opaque pointers). A config is made by the library (dnnmem_config_new) and set by option name
(dnnmem_config_set, the CLI's table and messages); a result is read through its JSON report
(schema dnnmem.estimate/1) and its timeline CSV, so no field offset of the large structs is
hard-coded here.
"""
import ctypes
import ctypes.util
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


class Error(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("message", ctypes.c_char * 512)]


class Advice(ctypes.Structure):
    _fields_ = [("change", ctypes.c_char_p), ("total_bytes", ctypes.c_uint64),
                ("verdict", ctypes.c_int), ("margin_bytes", ctypes.c_int64),
                ("cost_rank", ctypes.c_int), ("cost", ctypes.c_char_p)]


class Gpu(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("device_name", ctypes.c_char_p),
                ("total_bytes", ctypes.c_int64), ("compute_capability", ctypes.c_int),
                ("reserved_bytes", ctypes.c_int64), ("source", ctypes.c_char_p)]


P = ctypes.c_void_p
PP = ctypes.POINTER(ctypes.c_void_p)
ERR = ctypes.POINTER(Error)

# name: (restype, argtypes), as include/dnnmem.h declares them
_SIGNATURES = {
    "dnnmem_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "dnnmem_model_load": (ctypes.c_int, [ctypes.c_char_p, PP, ERR]),
    "dnnmem_model_load_buffer": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, PP, ERR]),
    "dnnmem_model_free": (None, [P]),
    "dnnmem_config_new": (P, []),
    "dnnmem_config_free": (None, [P]),
    "dnnmem_config_set_timeline": (None, [P, ctypes.c_bool]),
    "dnnmem_options_new": (P, []),
    "dnnmem_options_free": (None, [P]),
    "dnnmem_config_set": (ctypes.c_int, [P, P, ctypes.c_char_p, ctypes.c_char_p, ERR]),
    "dnnmem_config_check": (ctypes.c_int, [P, P, ERR]),
    "dnnmem_option_find": (P, [ctypes.c_char_p]),
    "dnnmem_estimate": (ctypes.c_int, [P, P, PP, ERR]),
    "dnnmem_result_free": (None, [P]),
    "dnnmem_advise": (ctypes.c_int, [P, P, ctypes.POINTER(ctypes.POINTER(Advice)),
                                     ctypes.POINTER(ctypes.c_size_t), ERR]),
    "dnnmem_advice_free": (None, [ctypes.POINTER(Advice), ctypes.c_size_t]),
    "dnnmem_max_dim": (ctypes.c_int, [P, P, ctypes.c_char_p, ctypes.c_int64,
                                      ctypes.POINTER(ctypes.c_int64), PP, PP, ERR]),
    "dnnmem_report_json": (ctypes.c_int, [P, P, P]),
    "dnnmem_report_text": (ctypes.c_int, [P, P, P]),
    "dnnmem_report_html": (ctypes.c_int, [P, P, P]),
    "dnnmem_report_timeline_csv": (ctypes.c_int, [P, P]),
    "dnnmem_verdict_name": (ctypes.c_char_p, [ctypes.c_int]),
    "dnnmem_model_symbol": (ctypes.c_char_p, [P, ctypes.c_size_t]),
    "dnnmem_gpu_count": (ctypes.c_size_t, []),
    "dnnmem_gpu_at": (ctypes.POINTER(Gpu), [ctypes.c_size_t]),
    "dnnmem_report_compare": (ctypes.c_int, [P, ctypes.c_char_p, P, ctypes.c_char_p, P]),
}


def _find():
    env = os.environ.get("DNNMEM_LIBRARY")
    if env:
        return env
    bundled = os.path.join(_HERE, "libdnnmem.so")
    if os.path.exists(bundled):
        return bundled
    found = ctypes.util.find_library("dnnmem")  # an installed library (make install)
    if found:
        return found
    raise ImportError("dnnmem: libdnnmem.so not found: install the package with "
                      "`pip install ./python`, or set DNNMEM_LIBRARY to a built build/libdnnmem.so")


def _load():
    lib = ctypes.CDLL(_find())
    for name, (res, args) in _SIGNATURES.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


lib = _load()
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.open_memstream.restype = P
_libc.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t)]
_libc.fclose.argtypes = [P]
_libc.free.argtypes = [P]


def to_string(write, *args):
    """What a dnnmem_report_* function writes to a FILE *, as a str (open_memstream)."""
    buf, size = ctypes.c_char_p(), ctypes.c_size_t()
    f = _libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    if not f:
        raise MemoryError("open_memstream failed")
    rc = write(*args, f)
    _libc.fclose(f)
    text = ctypes.string_at(buf, size.value).decode("utf-8", "replace")
    _libc.free(ctypes.cast(buf, P))
    if rc != 0:
        raise OSError("dnnmem: writing the report failed")
    return text
