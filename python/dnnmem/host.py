"""Facts about the machine this runs on, for a --device cpu estimate of a job that runs here.
Imports nothing of the package (tools/oracle/zoo.py loads this file by its path)."""


def host_cpu_isa(cpuinfo="/proc/cpuinfo"):
    """This machine's vector ISA as --cpu-isa names it, for a --device cpu estimate of a job
    that runs here: "avx512" when the CPU has AVX-512F, "avx2" when it has AVX2 only (the
    flags of Linux's /proc/cpuinfo), None elsewhere (oneDNN's x64 layouts are not modelled
    for other CPUs). dnnmem's own default stays avx512 whatever the host has."""
    try:
        with open(cpuinfo) as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return None
    return "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else None
