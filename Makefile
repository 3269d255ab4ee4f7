# gemmad — one top-level Makefile, building into build/.
#
#   make            build build/gemmad and build/gemmad-cli
#   make run        install what is missing, fetch the model, build, serve on 127.0.0.1:8080
#   make test       install what is missing, fetch the model, build (-Werror), run every test
#   make bench      benchmarks against llama.cpp (see docs/BENCHMARKS.md)
#   make CUDA=1 gpu-check-bins   what deploy/gpu-check.sh runs, linked against the engine only
#
# Switches: V=1 (full commands), NATIVE=0 (portable binary; SIMD kernels still chosen at run
# time), SAN=address,undefined | SAN=thread (sanitizer build under build/san-*), CUDA=1
# (CUDA backend; CUDA_HOME, CUDA_ARCH), WERROR=1 (warnings are errors; make test sets it).

BUILD_ROOT := build
comma := ,
ifneq ($(SAN),)
BUILD ?= $(BUILD_ROOT)/san-$(subst $(comma),-,$(SAN))
else
BUILD ?= $(BUILD_ROOT)
endif

CC := gcc
NATIVE ?= 1
CUDA ?= 0
WERROR ?= 0
PYTHON ?= python3
MODEL ?= models/gemma-3-270m-q4_k_m.gguf
HOST ?= 127.0.0.1
PORT ?= 8080

ifeq ($(V),1)
Q :=
else
Q := @
endif

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 -Wvla
CFLAGS := -std=gnu11 -O2 -g -pthread -fno-strict-aliasing -I. \
          -I/usr/include/x86_64-linux-gnu $(WARN) -MMD -MP
ifeq ($(WERROR),1)
CFLAGS += -Werror
endif
ifeq ($(NATIVE),1)
CFLAGS += -march=native
endif
ifneq ($(SAN),)
CFLAGS += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SAN)
endif
LDLIBS := -lmicrohttpd -ljansson -luv -lm -lpthread

# OpenBLAS for batches against F32 / F16 / BF16 weights (engine/kernels/kern_blas.c), when
# pkg-config finds it (deploy/setup-deps.sh installs libopenblas-dev); BLAS=0 builds without
# (the half-precision kernels then take every batch).
BLAS ?= $(shell pkg-config --exists openblas 2>/dev/null && echo 1 || echo 0)
ifeq ($(BLAS),1)
BLAS_CFLAGS := $(shell pkg-config --cflags openblas) -DGEMMAD_BLAS=1
BLAS_LIBS := $(shell pkg-config --libs openblas)
LDLIBS += $(BLAS_LIBS)
endif

# Per-instruction-set kernel files get their own flags; dispatch happens at run time.
ISA_AVX2 := -mavx2 -mfma -mf16c
ISA_AVX512 := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c
ISA_AMX := $(ISA_AVX512) -mamx-tile -mamx-int8

ENGINE_SRC := $(wildcard engine/*.c) $(wildcard engine/kernels/*.c)
SCHED_SRC := $(wildcard scheduler/*.c)
CONFIG_SRC := $(wildcard config/*.c)
BASE_SRC := $(wildcard base/*.c)
SERVER_SRC := $(filter-out %_main.c,$(wildcard server/*.c))
LIB_SRC := $(BASE_SRC) $(ENGINE_SRC) $(SCHED_SRC) $(CONFIG_SRC) $(SERVER_SRC)
# The engine alone (base/ + engine/ + kernels, + CUDA): what the GPU check and the tools that
# never serve link, so a GPU machine needs no libmicrohttpd, jansson or libuv.
ENGINE_LIB_SRC := $(BASE_SRC) $(ENGINE_SRC)
ENGINE_LDLIBS := -lm -lpthread $(BLAS_LIBS)

# CUDA: host glue (engine/cuda/*.c) and kernels (*.cu) only with CUDA=1.
CUDA_HOME ?= /usr/local/cuda
CUDA_ARCH ?= 90
NVCC ?= $(CUDA_HOME)/bin/nvcc
NVCCFLAGS := -O3 -std=c++17 -I. -Xcompiler -fPIC,-Wall -lineinfo \
             $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a))
ifeq ($(CUDA),1)
LIB_SRC += $(wildcard engine/cuda/*.c)
ENGINE_LIB_SRC += $(wildcard engine/cuda/*.c)
CU_SRC := $(wildcard engine/cuda/*.cu)
CFLAGS += -DGEMMAD_CUDA=1 -I$(CUDA_HOME)/include
# rpath: the toolkit's libraries are found without LD_LIBRARY_PATH on a machine that has it
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas -lstdc++
LDLIBS += $(CUDA_LIBS)
ENGINE_LDLIBS += $(CUDA_LIBS)
endif

LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(CU_SRC:%.cu=$(BUILD)/obj/%.cu.o)
LIB := $(BUILD)/libgemmad.a
ENGINE_LIB_OBJ := $(ENGINE_LIB_SRC:%.c=$(BUILD)/obj/%.o) $(CU_SRC:%.cu=$(BUILD)/obj/%.cu.o)
ENGINE_LIB := $(BUILD)/libgemmad-engine.a

UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

BINS := $(BUILD)/gemmad $(BUILD)/gemmad-cli $(BUILD)/gen-gguf
# The CUDA micro-benchmark (tools/cuda-bench/) links against the library, never into it.
ifeq ($(CUDA),1)
BINS += $(BUILD)/cuda-bench
endif
CUDA_BENCH_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tools/cuda-bench/*.c))
GEN_GGUF_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tools/gen-gguf/*.c))

# deploy/gpu-check.sh's programs, under $(BUILD)/engine-only/, linked with the engine only.
GPU_CHECK_TESTS := test_cuda test_cuda_head test_cuda_topk test_cuda_qkv test_cuda_mmvq test_cuda_fwd \
                   test_cuda_host
GPU_CHECK_BINS := $(GPU_CHECK_TESTS:%=$(BUILD)/engine-only/tests/%) $(BUILD)/gen-gguf
ifeq ($(CUDA),1)
GPU_CHECK_BINS += $(BUILD)/engine-only/cuda-bench
endif

.PHONY: all tests gpu-check-bins run test check-layers test-unit test-san test-tsan test-py test-cuda-compile test-native0 deps model \
        bench bench-engine fuzz-api clean format check-cuda
.DEFAULT_GOAL := all
.SECONDARY:

all: $(BINS)
tests: $(UNIT_BIN)
gpu-check-bins: $(GPU_CHECK_BINS)

# Before the generic include path, so that OpenBLAS's cblas.h is the one found.
$(BUILD)/obj/engine/kernels/kern_blas.o: CFLAGS := $(BLAS_CFLAGS) $(CFLAGS)
# vdpbf16ps (kern_bf16p_avx512.c; run only where the CPU has AVX512_BF16)
$(BUILD)/obj/engine/kernels/kern_bf16p_avx512.o: ISA_AVX512 += -mavx512bf16

$(BUILD)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) $(ISA_AVX2) -c $< -o $@

$(BUILD)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) $(ISA_AVX512) -c $< -o $@

$(BUILD)/obj/%_amx.o: %_amx.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) $(ISA_AMX) -c $< -o $@

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC    $<")
	$(Q)$(NVCC) $(NVCCFLAGS) -c $< -o $@

# gemmad_build_info's version label: the commit when server/metrics_gw.o was last compiled
# (a container build without .git passes GEMMAD_VERSION=...).
GEMMAD_VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo unknown)
$(BUILD)/obj/server/metrics_gw.o: CFLAGS += -DGEMMAD_VERSION='"$(GEMMAD_VERSION)"'

# The chat page is embedded by server/ui.c (.incbin), which -MMD cannot see.
$(BUILD)/obj/server/ui.o: server/ui/index.html

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(ENGINE_LIB): $(ENGINE_LIB_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/gemmad: $(BUILD)/obj/server/gemmad_main.o $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# tools/: programs built on the library, never linked into it. gemmad-cli is every .c in
# tools/gemmad-cli/ (one file per subcommand).
CLI_SRC := $(wildcard tools/gemmad-cli/*.c)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)

$(BUILD)/gemmad-cli: $(CLI_OBJ) $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/cuda-bench: $(CUDA_BENCH_OBJ) $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/gen-gguf: $(GEN_GGUF_OBJ) $(ENGINE_LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(ENGINE_LDLIBS)

$(BUILD)/engine-only/cuda-bench: $(CUDA_BENCH_OBJ) $(ENGINE_LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(ENGINE_LDLIBS)

$(BUILD)/engine-only/tests/%: $(BUILD)/obj/tests/unit/%.o $(ENGINE_LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(ENGINE_LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# ---- set-up ---------------------------------------------------------------------------------
deps:
	$(Q)bash deploy/setup-deps.sh

model: $(MODEL)
$(MODEL):
	$(Q)bash deploy/fetch-model.sh $(MODEL)

# ---- run ------------------------------------------------------------------------------------
run: deps model
	$(Q)$(MAKE) --no-print-directory all
	$(Q)./$(BUILD)/gemmad --model $(MODEL) --host $(HOST) --port $(PORT)

# ---- tests ----------------------------------------------------------------------------------
test: deps model
	$(Q)$(MAKE) --no-print-directory WERROR=1 all tests
	$(Q)$(MAKE) --no-print-directory check-layers
	$(Q)$(MAKE) --no-print-directory test-unit
	$(Q)$(MAKE) --no-print-directory test-san
	$(Q)$(MAKE) --no-print-directory test-tsan
	$(Q)$(MAKE) --no-print-directory test-cuda-compile
	$(Q)$(MAKE) --no-print-directory test-native0
	$(Q)$(MAKE) --no-print-directory test-py

# Includes and symbol uses point down the layers; no two modules depend on each other.
check-layers: all
	$(Q)$(PYTHON) tests/check-layers.py --objects $(BUILD)/obj

test-unit: tests
	$(Q)bash tests/run-unit.sh $(BUILD)/tests

# ASan+UBSan over the unit tests (model-heavy cases honour GEMMAD_TEST_QUICK).
test-san:
	$(Q)$(MAKE) --no-print-directory SAN=address,undefined WERROR=1 tests
	$(Q)GEMMAD_TEST_QUICK=1 T_TIMEOUT=900 ASAN_OPTIONS=detect_leaks=1 \
	    bash tests/run-unit.sh $(BUILD_ROOT)/san-address-undefined/tests

# ThreadSanitizer over the tests that start threads.
test-tsan:
	$(Q)$(MAKE) --no-print-directory SAN=thread WERROR=1 tests
	$(Q)GEMMAD_TEST_QUICK=1 T_TIMEOUT=900 TSAN_OPTIONS=halt_on_error=1 \
	    bash tests/run-unit.sh $(BUILD_ROOT)/san-thread/tests --threaded

# The CUDA sources must compile wherever nvcc exists, GPU or not.
test-cuda-compile:
	$(Q)bash tests/cuda-compile.sh

# A NATIVE=0 build runs the same kernels (chosen at run time): byte-identical logits.
test-native0: all
	$(Q)bash tests/native0-parity.sh $(BUILD) $(MODEL)

test-py: all
	$(Q)bash tests/run-py.sh

# ---- benchmarks -----------------------------------------------------------------------------
bench-engine: deps model all
	$(Q)bash deploy/setup-bench.sh
	$(Q)$(PYTHON) tests/bench/bench_engine.py --model $(MODEL)

bench: deps model all
	$(Q)bash deploy/setup-bench.sh
	$(Q)$(PYTHON) tests/bench/bench_engine.py --model $(MODEL)
	$(Q)$(PYTHON) tests/bench/bench_server.py --model $(MODEL)
	$(Q)$(PYTHON) tests/bench/bench_grammar.py --model $(MODEL)

fuzz-api: deps model all
	$(Q)$(PYTHON) -m pytest -q tests/integration/test_schema.py --fuzz-long

format:
	$(Q)clang-format -i $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD_ROOT)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
