# dnnmem: plain GNU Makefile.
#
#   make                 library (static + shared), CLI: build/dnnmem
#   make check           unit tests, ONNX conformance, CLI and fixture tests
#   make install PREFIX=/usr/local
#   make SAN=1 check     the same under AddressSanitizer + UBSan (build-san/)
#   make fuzz            libFuzzer target for the ONNX loader (clang)
#   make bench           speed benchmark (bench/)
#   make B=dir ...       build in another directory
#
# Variables: CC, CFLAGS, PREFIX, DESTDIR, ONNX_PROTO (the schema, by default
# the one Debian's libonnx-dev installs), PYTHON (Debian's python3 with
# python3-torch and python3-onnx).

VERSION    := 0.1.0
SOVERSION  := 0
PREFIX     ?= /usr/local
ONNX_PROTO ?= /usr/include/onnx/onnx.proto
PYTHON     ?= /usr/bin/python3
PROTOC_C   ?= protoc-c

ifeq ($(SAN),1)
B          ?= build-san
SANFLAGS   := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
OPT        := -O1
else
B          ?= build
SANFLAGS   :=
OPT        := -O2
endif

PKGS       := libprotobuf-c jansson libzip
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS   := $(shell pkg-config --libs $(PKGS))

WARN   := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wwrite-strings \
          -Wundef -Wvla -Wformat=2 -Werror
CFLAGS ?= $(OPT) -g
ALL_CFLAGS := -std=c11 -D_POSIX_C_SOURCE=200809L -fPIC $(WARN) $(SANFLAGS) $(CFLAGS) \
              -Iinclude -Isrc -I$(B)/gen $(PKG_CFLAGS)
LDLIBS := $(PKG_LIBS) -lm

# The pipeline, in order: util, graph, load, shape, schedule, alloc, report, api.
LIB_SRC := src/util/arena.c src/util/error.c \
           src/graph/dtype.c src/graph/ops.c src/graph/graph.c src/graph/lift.c \
           src/load/onnx.c src/load/hf.c src/load/keras.c src/load/safetensors.c \
           src/load/mxnet.c \
           src/shape/infer.c src/shape/elementwise.c src/shape/tensor.c src/shape/nn.c \
           src/shape/contrib.c \
           src/shape/mxnet.c \
           src/schedule/schedule.c src/schedule/generate.c src/schedule/mxplan.c src/schedule/xla.c src/train/train.c src/train/amp.c \
           src/schedule/builder.c src/schedule/workspace.c src/schedule/forward.c \
           src/train/keep.c src/train/tf.c src/train/mxnet.c src/train/checkpoint.c \
           src/train/save.c src/train/backward.c src/train/loss.c src/train/optimizer.c \
           src/alloc/rounding.c src/alloc/caching.c src/alloc/bfc.c src/alloc/pool.c \
           src/alloc/heap.c \
           src/report/result.c src/report/text.c src/report/json.c src/report/decide.c \
           src/report/gpus.c src/report/html.c \
           src/api.c
GEN_SRC := $(B)/gen/onnx.pb-c.c
LIB_OBJ := $(LIB_SRC:%.c=$(B)/%.o) $(B)/gen/onnx.pb-c.o
CLI_OBJ := $(B)/cli/main.o

UNIT_SRC := $(wildcard tests/unit/test-*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(B)/tests/%)

all: $(B)/libdnnmem.a $(B)/libdnnmem.so $(B)/dnnmem $(B)/dnnmem.pc

$(B)/gen/onnx.pb-c.c $(B)/gen/onnx.pb-c.h &: $(ONNX_PROTO)
	@mkdir -p $(B)/gen
	cp $(ONNX_PROTO) $(B)/gen/onnx.proto
	cd $(B)/gen && $(PROTOC_C) --c_out=. onnx.proto

$(B)/gen/onnx.pb-c.o: $(B)/gen/onnx.pb-c.c
	@echo "  CC      $<"
	@$(CC) -std=c11 -fPIC $(SANFLAGS) $(CFLAGS) $(PKG_CFLAGS) -w -c $< -o $@

$(B)/%.o: %.c include/dnnmem.h src/dnnmem-impl.h src/schedule/builder.h src/train/train.h src/graph/ops.def src/train/tf_tape.def src/report/gpus.def $(B)/gen/onnx.pb-c.h
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(ALL_CFLAGS) -c $< -o $@

$(B)/src/load/hf.o: src/load/hf_decoders.inc

$(B)/libdnnmem.a: $(LIB_OBJ)
	@echo "  AR      $@"
	@rm -f $@
	@ar rcs $@ $^

$(B)/libdnnmem.so: $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libdnnmem.so.$(SOVERSION) $(SANFLAGS) -o $(B)/libdnnmem.so.$(VERSION) $^ $(LDLIBS)
	ln -sf libdnnmem.so.$(VERSION) $(B)/libdnnmem.so.$(SOVERSION)
	ln -sf libdnnmem.so.$(VERSION) $@

$(B)/dnnmem: $(CLI_OBJ) $(B)/libdnnmem.a
	$(CC) $(SANFLAGS) -o $@ $(CLI_OBJ) $(B)/libdnnmem.a $(LDLIBS)

$(B)/dnnmem.pc: dnnmem.pc.in
	@mkdir -p $(B)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' $< > $@

# ---- tests -------------------------------------------------------------------

$(B)/tests/%: tests/unit/%.c tests/unit/util.h $(B)/libdnnmem.a
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(ALL_CFLAGS) -Itests/unit -o $@ $< $(B)/libdnnmem.a $(LDLIBS) -lcmocka

$(B)/tests/conformance: tests/conformance/conformance.c $(B)/libdnnmem.a
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(ALL_CFLAGS) -o $@ $< $(B)/libdnnmem.a $(LDLIBS)

$(B)/tests/validate: tests/validation/validate.c $(B)/libdnnmem.a
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(ALL_CFLAGS) -o $@ $< $(B)/libdnnmem.a $(LDLIBS)

$(B)/onnx-node-tests/MANIFEST.tsv: tools/gen_onnx_node_tests.py
	$(PYTHON) tools/gen_onnx_node_tests.py $(B)/onnx-node-tests

check: all $(UNIT_BIN) $(B)/tests/conformance $(B)/tests/validate $(B)/onnx-node-tests/MANIFEST.tsv
	@echo "== no two files of src/ call each other in a loop (but tools/callgraph-exceptions.txt)"
	@python3 tools/callgraph.py -x tools/callgraph-exceptions.txt $(B) $(LIB_SRC:%.c=$(B)/%.o)
	@set -e; for t in $(UNIT_BIN); do echo "== $$t"; $$t; done
	@echo "== ONNX backend node tests (shape conformance)"
	$(B)/tests/conformance $(B)/onnx-node-tests tests/conformance/expected-failures.txt
	@echo "== validation against PyTorch 1.13 (CPU)"
	$(B)/tests/validate tests/validation/pytorch-cpu-1.13.jsonl tests/validation/expected-misses.txt
	@echo "== published GPU measurements (BERT, DistilBERT; eager vs sdpa)"
	DNNMEM=$(B)/dnnmem sh tests/validation/published-gpu.sh
	@echo "== GPU measurements (H200, PyTorch 2.11, transformers 5.17: tools/gpu/results)"
	python3 tools/gpu/compare.py --dnnmem $(B)/dnnmem --check \
	    tools/gpu/results/open-encoders.jsonl tools/gpu/results/open-decoders.jsonl \
	    tools/gpu/results/hf-more.jsonl tools/gpu/results/hf-causal.jsonl
	@echo "== JAX measurements (H200, jax 0.11.2: tools/gpu/results/jax.jsonl; bars: peak 10%, temp 20%, args 2%)"
	python3 tools/gpu/jax_compare.py --dnnmem $(B)/dnnmem --check tools/gpu/results/jax.jsonl
	@echo "== the GPU kit's rows (tools/gpu/hf-more.jsonl): fields, and dnnmem's command for each"
	python3 tools/gpu/measure_hf.py --dry-run tools/gpu/hf-more.jsonl
	python3 tools/gpu/compare.py --dnnmem $(B)/dnnmem --commands-only tools/gpu/hf-more.jsonl
	python3 tools/gpu/jax_measure.py --dry-run tools/gpu/jax-configs.jsonl
	@echo "== published whole-process measurements (BERT-large, HF Trainer)"
	DNNMEM=$(B)/dnnmem sh tests/validation/published-trainer.sh
	@echo "== published TensorFlow measurements (printed, not failed: low confidence, inferred context)"
	DNNMEM=$(B)/dnnmem sh tests/validation/published-tf.sh
	@echo "== CLI tests"
	DNNMEM=$(B)/dnnmem sh tests/cli/run.sh
	@echo "== HTML report in headless Chromium"
	DNNMEM=$(B)/dnnmem OUT=$(B)/report-test sh tests/report/run.sh
ifneq ($(SAN),1)
	@echo "== install (pkg-config, shared and static)"
	B=$(B) sh tests/install.sh
endif

# ---- install -----------------------------------------------------------------

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin \
	           $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 $(B)/libdnnmem.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(B)/libdnnmem.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libdnnmem.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libdnnmem.so.$(SOVERSION)
	ln -sf libdnnmem.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libdnnmem.so
	install -m 644 include/dnnmem.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(B)/dnnmem $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(B)/dnnmem.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/

# ---- benchmark ------------------------------------------------------------------

$(B)/bench/bench: bench/bench.c $(B)/libdnnmem.a
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(ALL_CFLAGS) -o $@ $< $(B)/libdnnmem.a $(LDLIBS)

bench: $(B)/bench/bench
	$(B)/bench/bench $(B)/bench

# ---- fuzzing (clang, libFuzzer) ---------------------------------------------------

FUZZ_TIME ?= 60
build-fuzz/fuzz-onnx: fuzz/fuzz-onnx.c $(LIB_SRC) $(B)/gen/onnx.pb-c.c
	@mkdir -p build-fuzz
	clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=all \
	    -Iinclude -Isrc -I$(B)/gen $(PKG_CFLAGS) -o $@ fuzz/fuzz-onnx.c $(LIB_SRC) \
	    $(B)/gen/onnx.pb-c.c $(LDLIBS)

fuzz: build-fuzz/fuzz-onnx

fuzz-run: build-fuzz/fuzz-onnx
	@rm -rf build-fuzz/new && mkdir -p build-fuzz/new
	build-fuzz/fuzz-onnx -max_total_time=$(FUZZ_TIME) -timeout=10 -rss_limit_mb=2048 \
	    -artifact_prefix=build-fuzz/ \
	    build-fuzz/new fuzz/corpus

clean:
	rm -rf build build-san build-fuzz

.PHONY: all check install clean fuzz fuzz-run bench
