# dnnmem: plain GNU Makefile.
#
#   make                 library (static + shared), CLI: build/dnnmem
#   make check           unit tests, ONNX conformance, CLI and fixture tests
#   make install PREFIX=/usr/local
#   make SAN=1 check     the same under AddressSanitizer + UBSan (build-san/)
#   make fuzz            libFuzzer targets, one per parser (clang)
#   make bench           speed benchmark (bench/; BENCH_BASE=dnnmem: against a baseline)
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
LDLIBS := $(PKG_LIBS) -lm -pthread

# The Keras front end (src/load/keras/keras.h).
KERAS_SRC := src/load/keras/build.c src/load/keras/layers.c src/load/keras/spatial.c \
             src/load/keras/sequence.c src/load/keras/model.c \
             src/load/keras/archive.c src/load/keras/apps.c
# The pipeline, in order: util, graph, load, shape, schedule, alloc, report, api.
LIB_SRC := src/util/arena.c src/util/error.c src/util/json.c \
           src/graph/dtype.c src/graph/ops.c src/graph/graph.c src/graph/lift.c src/graph/tp.c \
           src/load/onnx.c $(KERAS_SRC) src/load/safetensors.c \
           src/load/mxnet.c \
           src/shape/context.c src/shape/rules.c src/shape/infer.c src/shape/elementwise.c src/shape/tensor.c src/shape/nn.c \
           src/shape/contrib.c \
           src/shape/mxnet.c \
           src/schedule/schedule.c src/schedule/generate.c src/schedule/mxplan.c src/schedule/xla.c src/train/train.c src/train/amp.c \
           src/schedule/builder.c src/schedule/workspace.c src/schedule/cpuconv.c src/schedule/layout.c src/schedule/forward.c \
           src/schedule/fixpoint.c src/schedule/tfbuild.c \
           src/train/keep.c src/train/tf.c src/train/mxnet.c src/train/checkpoint.c src/train/parallel.c \
           src/train/save.c src/train/backward.c src/train/loss.c src/train/optimizer.c src/train/tf_fit.c \
           src/alloc/rounding.c src/alloc/caching.c src/alloc/bfc.c src/alloc/pool.c \
           src/alloc/heap.c \
           src/report/result.c src/report/text.c src/report/json.c src/report/decide.c \
           src/report/gpus.c src/report/html.c src/report/modules.c src/report/advise.c \
           src/report/blocks.c src/report/plan.c \
           src/api.c
LIB_SRC += src/options.c
# dnnmem_estimate's stages (src/estimate/estimate.h), in order
LIB_SRC += src/estimate/assume.c src/estimate/check.c src/estimate/variant.c src/estimate/defaults.c \
           src/estimate/shapes.c src/estimate/pipeline.c src/estimate/schedule.c src/estimate/replay.c src/estimate/warn.c
# captured steps (docs/capture-format.md): the loader and their estimate
LIB_SRC += src/load/capture.c src/estimate/captured.c
# the HuggingFace front end (src/load/hf/hf.h: its internal header)
HF_SRC  := src/load/hf/builder.c src/load/hf/frame.c src/load/hf/attention.c src/load/hf/linear.c src/load/hf/quant.c \
           src/load/hf/kbit.c src/load/hf/llama.c src/load/hf/moe.c src/load/hf/moe_config.c src/load/hf/deepseek.c \
           src/load/hf/gpt2.c src/load/hf/bert.c src/load/hf/t5.c src/load/hf/vit.c \
           src/load/hf/decoder.c src/load/hf/opt.c src/load/hf/neox.c src/load/hf/gemma.c src/load/hf/gptoss.c src/load/hf/mamba.c src/load/hf/whisper.c \
           src/load/hf/hf.c
LIB_SRC += $(HF_SRC)
GEN_SRC := $(B)/gen/onnx.pb-c.c
LIB_OBJ := $(LIB_SRC:%.c=$(B)/%.o) $(B)/gen/onnx.pb-c.o
CLI_OBJ := $(B)/cli/main.o

UNIT_SRC := $(wildcard tests/unit/test-*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(B)/tests/%)

all: $(B)/libdnnmem.a $(B)/libdnnmem.so $(B)/dnnmem

$(B)/gen/onnx.pb-c.c $(B)/gen/onnx.pb-c.h &: $(ONNX_PROTO)
	@mkdir -p $(B)/gen
	cp $(ONNX_PROTO) $(B)/gen/onnx.proto
	cd $(B)/gen && $(PROTOC_C) --c_out=. onnx.proto

$(B)/gen/onnx.pb-c.o: $(B)/gen/onnx.pb-c.c
	@echo "  CC      $<"
	@$(CC) -std=c11 -fPIC $(SANFLAGS) $(CFLAGS) $(PKG_CFLAGS) -w -c $< -o $@

$(B)/%.o: %.c include/dnnmem.h src/dnnmem-impl.h src/schedule/builder.h src/schedule/cpuconv.h src/train/train.h src/graph/ops.def src/train/tf_tape.def src/train/tf_eager.def src/report/gpus.def $(B)/gen/onnx.pb-c.h
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(ALL_CFLAGS) -c $< -o $@

# the report's script, as a C string (src/report/html.c includes it)
$(B)/gen/report_js.h: src/report/report.js
	@mkdir -p $(B)/gen
	sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $< > $@
$(B)/src/report/html.o build-fuzz/src/report/html.o: $(B)/gen/report_js.h

$(KERAS_SRC:%.c=$(B)/%.o): src/load/keras/keras.h
$(B)/src/options.o: src/options.def
$(B)/cli/main.o: cli/cli_options.def
$(B)/src/api.o $(patsubst %.c,$(B)/%.o,$(filter src/estimate/%,$(LIB_SRC))): src/estimate/estimate.h
$(HF_SRC:%.c=$(B)/%.o): src/load/hf/hf.h

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

# ---- tests -------------------------------------------------------------------

$(B)/tests/%: tests/unit/%.c tests/unit/util.h tests/unit/hf-util.h $(B)/libdnnmem.a
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(ALL_CFLAGS) -Itests/unit -o $@ $< $(B)/libdnnmem.a $(LDLIBS) -lcmocka

# counts the library's JSON parses (tests/unit/test-readonce.c)
$(B)/tests/test-readonce: tests/unit/test-readonce.c tests/unit/util.h $(B)/libdnnmem.a
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(ALL_CFLAGS) -Itests/unit -o $@ $< $(B)/libdnnmem.a -Wl,--wrap=json_loadb,--wrap=dm_json_parse $(LDLIBS) -lcmocka

$(B)/tests/conformance: tests/conformance/conformance.c $(B)/libdnnmem.a
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(ALL_CFLAGS) -o $@ $< $(B)/libdnnmem.a $(LDLIBS)

$(B)/tests/validate: tests/validation/validate.c $(B)/libdnnmem.a
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(ALL_CFLAGS) -o $@ $< $(B)/libdnnmem.a $(LDLIBS)

$(B)/tests/rlimit: tests/resource/rlimit.c
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(ALL_CFLAGS) -o $@ $<

$(B)/onnx-node-tests/MANIFEST.tsv: tools/gen_onnx_node_tests.py
	$(PYTHON) tools/gen_onnx_node_tests.py $(B)/onnx-node-tests

check: all $(UNIT_BIN) $(B)/tests/conformance $(B)/tests/validate $(B)/tests/rlimit \
       $(B)/onnx-node-tests/MANIFEST.tsv
	@echo "== no two files of src/ call each other in a loop (but tools/callgraph-exceptions.txt)"
	@python3 tools/callgraph.py -x tools/callgraph-exceptions.txt $(B) $(LIB_SRC:%.c=$(B)/%.o)
	@set -e; for t in $(UNIT_BIN); do echo "== $$t"; $$t; done
	@echo "== ONNX backend node tests (shape conformance)"
	$(B)/tests/conformance $(B)/onnx-node-tests tests/conformance/expected-failures.txt
	@echo "== validation against PyTorch 1.13 (CPU)"
	$(B)/tests/validate tests/validation/pytorch-cpu-1.13.jsonl tests/validation/expected-misses.txt
	@echo "== the PyTorch 2.x CPU zoo (docs/validation-zoo.md; rows whose graph is absent are skipped)"
	python3 tools/oracle/zoo.py compare --dnnmem $(B)/dnnmem --brief --skip-missing \
	    --misses tests/validation/zoo-expected-misses.txt
	@echo "== the same zoo measured with PyTorch 1.13 and torchvision 0.14 (docs/validation-zoo.md \"PyTorch 1.13\"; estimated with pytorch@1.13)"
	python3 tools/oracle/zoo.py compare --dnnmem $(B)/dnnmem --brief --skip-missing \
	    --ref tests/validation/pytorch-cpu-1.13-zoo.jsonl --misses tests/validation/zoo113-expected-misses.txt
	@echo "== a subset of the zoo measured with PyTorch 2.15.0 and torchvision 0.29.2 (docs/validation-zoo.md \"PyTorch 2.15\"; estimated with pytorch@2.15)"
	python3 tools/oracle/zoo.py compare --dnnmem $(B)/dnnmem --brief --skip-missing \
	    --ref tests/validation/pytorch-cpu-2.15-zoo.jsonl --misses tests/validation/zoo215-expected-misses.txt
	@echo "== multi-process training per rank on the CPU (torch 2.13 gloo, DeepSpeed 0.19.8: docs/parallel-measured.md; rows whose options dnnmem refuses are skipped)"
	python3 tools/oracle/dist_measure.py compare --dnnmem $(B)/dnnmem --brief --check \
	    --misses tests/validation/dist-expected-misses.txt
	@echo "== the zoo again, each model exported with its activation modules as functions (docs/inplace.md)"
	python3 tools/oracle/zoo.py compare --dnnmem $(B)/dnnmem --brief --skip-missing --variant modules \
	    --misses tests/validation/zoo-modules-expected-misses.txt
	@echo "== real transformers on the CPU (torch 2.13; transformers 4.42 to 5.24, each row's release: tools/hf_oracle)"
	python3 tools/hf_oracle/compare.py tests/validation/hf-real-cpu.jsonl --dnnmem $(B)/dnnmem --check
	@echo "== real transformers on the CPU: the encoder heads (QA, token classification, multiple choice, sequence classification; 4.51, 4.56, 5.24)"
	python3 tools/hf_oracle/compare.py tests/validation/hf-real-heads-cpu.jsonl --dnnmem $(B)/dnnmem --check
	@echo "== real transformers on the CPU: the decoders' task heads (gpt2, opt, gpt_neox, falcon, phi, phi3, gemma, gemma2, mistral, qwen2, starcoder2, mixtral, qwen2_moe, qwen3_moe; 5.24)"
	python3 tools/hf_oracle/compare.py tests/validation/hf-real-decoder-heads-cpu.jsonl --dnnmem $(B)/dnnmem --check
	@echo "== real transformers on the CPU: granite, olmo2, starcoder2 (4.51, 4.56, 5.24), gpt_oss (4.56, 5.24)"
	python3 tools/hf_oracle/compare.py tests/validation/hf-real-archs-cpu.jsonl --dnnmem $(B)/dnnmem --check
	@echo "== real transformers on the CPU: mamba, the torch slow path (4.56, 5.24)"
	python3 tools/hf_oracle/compare.py tests/validation/hf-real-mamba-cpu.jsonl --dnnmem $(B)/dnnmem --check
	@echo "== real transformers on the CPU: DeepSeek-V2/V3 of other dims (q_lora_rank or not, v above or below qk_nope), decode-heavy generation (4.56, 5.24)"
	python3 tools/hf_oracle/compare.py tests/validation/hf-real-deepseek-cpu.jsonl --dnnmem $(B)/dnnmem --check
	@echo "== real transformers on the CPU: 5.25.0, every kind of row above remeasured (Falcon's attention on the shared interface: docs/modelling.md \"tf525\")"
	python3 tools/hf_oracle/compare.py tests/validation/hf-real-5.25-cpu.jsonl --dnnmem $(B)/dnnmem --check
	@echo "== published GPU measurements (BERT, DistilBERT; eager vs sdpa)"
	DNNMEM=$(B)/dnnmem sh tests/validation/published-gpu.sh
	@echo "== published SDPA tables (Pythia-410m with transformers 4.42, OPT-350m with 4.46; --keep-outputs)"
	DNNMEM=$(B)/dnnmem sh tests/validation/published-sdpa-tables.sh
	@echo "== GPU measurements (H200, PyTorch 2.11, transformers 5.17: tools/gpu/results)"
	python3 tools/gpu/compare.py --dnnmem $(B)/dnnmem --check \
	    tools/gpu/results/open-encoders.jsonl tools/gpu/results/open-decoders.jsonl \
	    tools/gpu/results/hf-more.jsonl tools/gpu/results/hf-causal.jsonl
	@echo "== JAX measurements (H200, jax 0.11.2: tools/gpu/results/jax.jsonl; bars: peak 10%, temp 20%, args 2%)"
	python3 tools/gpu/jax_compare.py --dnnmem $(B)/dnnmem --check tools/gpu/results/jax.jsonl
	@echo "== JAX on the CPU: XLA's memory_analysis (jax 0.10.2: tests/validation/jax-cpu.jsonl; rows off 3% listed with their mechanism; fails unless issue 18's bars hold)"
	python3 tools/oracle/jax_cpu_compare.py tests/validation/jax-cpu.jsonl --dnnmem $(B)/dnnmem \
	    --brief --check --bars --misses tests/validation/jax-cpu-expected-misses.txt
	@echo "== the GPU kit's rows (tools/gpu/hf-more.jsonl): fields, and dnnmem's command for each"
	python3 tools/gpu/measure_hf.py --dry-run tools/gpu/hf-more.jsonl
	python3 tools/gpu/compare.py --dnnmem $(B)/dnnmem --commands-only tools/gpu/hf-more.jsonl
	python3 tools/gpu/jax_measure.py --dry-run tools/gpu/jax-configs.jsonl
	@echo "== published whole-process measurements (BERT-large, HF Trainer)"
	DNNMEM=$(B)/dnnmem sh tests/validation/published-trainer.sh
	@echo "== MXNet 1.9.1 on the CPU, its own kernels (tests/validation/mxnet-cpu-1.9.jsonl: tools/oracle/mxnet_measure.py)"
	python3 tools/oracle/mxnet_compare.py tests/validation/mxnet-cpu-1.9.jsonl --dnnmem $(B)/dnnmem --check \
	    --misses tests/validation/mxnet-expected-misses.txt
	@echo "== TensorFlow 2.21 / Keras 3.15 on the CPU (tools/oracle/tf_measure.py; docs/validation-tf.md)"
	python3 tools/oracle/tf_measure.py compare --dnnmem $(B)/dnnmem --brief --check
	@echo "== published TensorFlow measurements (printed, not failed: low confidence, inferred context)"
	DNNMEM=$(B)/dnnmem sh tests/validation/published-tf.sh
	@echo "== docs/options.md against --help"
	sh tools/options-doc.sh $(B)/dnnmem --check
	@echo "== CLI tests"
	DNNMEM=$(B)/dnnmem sh tests/cli/run.sh
	@echo "== HTML report in headless Chromium"
	DNNMEM=$(B)/dnnmem OUT=$(B)/report-test sh tests/report/run.sh
ifneq ($(SAN),1)
	@echo "== adversarial files under 2 s of CPU and 500 MB (not under SAN: its shadow memory)"
	B=$(B) sh tests/resource/run.sh
	@echo "== install (pkg-config, shared and static)"
	B=$(B) sh tests/install.sh
	@echo "== the Python package (python/tests; PYTEST_PYTHON=$(PYTEST_PYTHON); not under SAN=1: ctypes loads the library into an uninstrumented Python)"
	sh tests/python.sh $(B) $(PYTEST_PYTHON)
endif

# The Python package's tests alone (tests/python.sh: skipped when PYTEST_PYTHON has no
# pytest; the capture tests need torch >= 2.1 there).
PYTEST_PYTHON ?= python3
check-python: $(B)/libdnnmem.so $(B)/dnnmem
	sh tests/python.sh $(B) $(PYTEST_PYTHON)

# ---- install -----------------------------------------------------------------
# dnnmem.pc is written at install time, with this install's PREFIX (not the
# one an earlier `make` saw).

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin \
	           $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 $(B)/libdnnmem.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(B)/libdnnmem.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libdnnmem.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libdnnmem.so.$(SOVERSION)
	ln -sf libdnnmem.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libdnnmem.so
	install -m 644 include/dnnmem.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(B)/dnnmem $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' dnnmem.pc.in \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/dnnmem.pc

# ---- benchmark ------------------------------------------------------------------

$(B)/bench/bench: bench/bench.c $(B)/libdnnmem.a
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(ALL_CFLAGS) -o $@ $< $(B)/libdnnmem.a $(LDLIBS)

bench: $(B)/bench/bench $(B)/dnnmem
	$(B)/bench/bench $(B)/bench
	sh bench/cli.sh $(BENCH_BASE) $(B)/dnnmem

# ---- fuzzing (clang, libFuzzer) ---------------------------------------------------
# One target per parser (fuzz/fuzz-NAME.c, seeds in fuzz/corpus/NAME/), each
# also running the estimate; the library is built once with the fuzzer's
# instrumentation. fuzz-run runs each target for FUZZ_TIME seconds.

FUZZ_TIME    ?= 20
FUZZ_TARGETS := onnx hf keras keras-zip mxnet safetensors options capture cli
FUZZ_FLAGS   := -g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
FUZZ_OBJ     := $(LIB_SRC:%.c=build-fuzz/%.o) build-fuzz/gen/onnx.pb-c.o

build-fuzz/%.o: %.c include/dnnmem.h src/dnnmem-impl.h $(B)/gen/onnx.pb-c.h
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@clang -std=c11 -D_POSIX_C_SOURCE=200809L $(FUZZ_FLAGS) -MMD -MP -Iinclude -Isrc -I$(B)/gen \
	    $(PKG_CFLAGS) -c $< -o $@

-include $(FUZZ_OBJ:%.o=%.d)
.SECONDARY: $(FUZZ_OBJ)

build-fuzz/gen/onnx.pb-c.o: $(B)/gen/onnx.pb-c.c
	@mkdir -p $(dir $@)
	@clang -std=c11 $(FUZZ_FLAGS) $(PKG_CFLAGS) -w -c $< -o $@

build-fuzz/fuzz-%: fuzz/fuzz-%.c fuzz/fuzz.h $(FUZZ_OBJ)
	@echo "  CCLD    $@"
	@clang -std=c11 -D_POSIX_C_SOURCE=200809L $(FUZZ_FLAGS) -fsanitize=fuzzer -Iinclude -Isrc \
	    -I$(B)/gen $(PKG_CFLAGS) -o $@ $< $(FUZZ_OBJ) $(LDLIBS)

build-fuzz/fuzz-cli: cli/main.c cli/cli_options.def # compiled into the target

fuzz: $(FUZZ_TARGETS:%=build-fuzz/fuzz-%)

fuzz-run: fuzz
	@set -e; for t in $(FUZZ_TARGETS); do \
	    rm -rf build-fuzz/new-$$t && mkdir -p build-fuzz/new-$$t; \
	    build-fuzz/fuzz-$$t -max_total_time=$(FUZZ_TIME) -timeout=10 -rss_limit_mb=2048 \
	        -artifact_prefix=build-fuzz/$$t- build-fuzz/new-$$t fuzz/corpus/$$t \
	        >build-fuzz/$$t.log 2>&1 || { tail -40 build-fuzz/$$t.log; echo "fuzz-$$t: FAILED"; exit 1; }; \
	    echo "fuzz-$$t: $$(grep -o 'Done [0-9]* runs in [0-9]* second(s)' build-fuzz/$$t.log)"; \
	done

clean:
	rm -rf build build-san build-fuzz

.PHONY: all check check-python install clean fuzz fuzz-run bench
