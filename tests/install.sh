#!/bin/sh
# make install under a temporary PREFIX, after a plain `make` has built
# everything (so the .pc must come from the install's PREFIX, not the
# build's), then build examples/peak.c against the installed header and
# library through pkg-config: shared, found at run time through the rpath
# pkg-config's libdir gives (no LD_LIBRARY_PATH), and static.
set -eu
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
P=$T/prefix
make -s install PREFIX="$P" B="${B:-build}" >/dev/null
export PKG_CONFIG_PATH="$P/lib/pkgconfig"
test -x "$P/bin/dnnmem"
test "$(pkg-config --variable=prefix dnnmem)" = "$P"
test -f "$(pkg-config --variable=includedir dnnmem)/dnnmem.h"
libdir=$(pkg-config --variable=libdir dnnmem)
cc -std=c11 -Wall -Werror examples/peak.c $(pkg-config --cflags --libs dnnmem) \
    -Wl,-rpath,"$libdir" -o "$T/peak"
env -u LD_LIBRARY_PATH "$T/peak" tests/models/fixtures/resnet50.onnx 4 >"$T/out"
grep -q "bytes at node" "$T/out"
ldd "$T/peak" | grep -q "$libdir/libdnnmem.so"
cc -std=c11 -Wall -Werror examples/peak.c $(pkg-config --static --cflags dnnmem) \
    "$libdir/libdnnmem.a" $(pkg-config --static --libs-only-l dnnmem | sed 's/-ldnnmem//') \
    -o "$T/peak-static"
"$T/peak-static" tests/models/fixtures/resnet50.onnx 4 | cmp - "$T/out"
"$P/bin/dnnmem" --version | grep -q "^dnnmem "
echo "install: 1 passed, 0 failed"
