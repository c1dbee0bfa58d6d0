#!/bin/sh
# make install into a staging root, then build examples/peak.c against the
# installed header and library through pkg-config, shared and static.
set -eu
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
make -s install DESTDIR="$T" PREFIX=/usr/local >/dev/null
export PKG_CONFIG_PATH="$T/usr/local/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$T"
test -x "$T/usr/local/bin/dnnmem"
test -f "$T/usr/local/include/dnnmem.h"
cc -std=c11 -Wall -Werror examples/peak.c $(pkg-config --cflags --libs dnnmem) -o "$T/peak"
LD_LIBRARY_PATH="$T/usr/local/lib" "$T/peak" tests/models/fixtures/resnet50.onnx 4 >"$T/out"
grep -q "bytes at node" "$T/out"
cc -std=c11 -Wall -Werror examples/peak.c $(pkg-config --static --cflags dnnmem) \
    "$T/usr/local/lib/libdnnmem.a" $(pkg-config --static --libs-only-l dnnmem | sed 's/-ldnnmem//') \
    -o "$T/peak-static"
"$T/peak-static" tests/models/fixtures/resnet50.onnx 4 | cmp - "$T/out"
echo "install: 1 passed, 0 failed"
