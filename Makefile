# redlm: build, test and benchmark.
#
#   make deps        install the Debian packages the build and tests need
#   make             build/redlm (with the CUDA backend when nvcc is found) and
#                    build/models/ (the bundled model, unpacked)
#   make test        unit and integration tests (CPU; starts its own redis-server)
#   make test-asan   the same tests built with ASan + UBSan
#   make bench       CPU benchmarks
#   make test-gpu / bench-gpu   on a machine with an NVIDIA GPU
#
# Sources are found by folder, so adding a file needs no edit here:
# worker/ and its rooms, sched/, kernels/, kernels/cpu/ always; kernels/cuda/
# when CUDA is on.  Includes are spelled from the top ("kernels/batch.h").
# Every tests/test_*.c is a cmocka program linked against everything but main.

# The release; `redlm --version` prints it with the commit, the CUDA archs
# and the backends built (the generated $(BUILD)/gen/version.h).
VERSION  = 0.6.1
BUILD    ?= build
CC       ?= cc
CUDA_HOME ?= /usr/local/cuda
NVCC     ?= $(shell command -v nvcc 2>/dev/null || { test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc; })
CUDA     ?= $(if $(NVCC),1,0)
# GPU code: machine code for each compute capability in CUDA_ARCHS (A100;
# RTX 3090 / A10; RTX 4090 / L4; H100 / H200) and PTX for CUDA_PTX (default
# the newest), which the driver compiles for later GPUs.  Narrow it for a
# faster build: `make CUDA_ARCHS=90` (the GPU check: CUDA_ARCHS=90 CUDA_PTX=80).
CUDA_ARCHS ?= 80 86 89 90
CUDA_PTX  ?= $(lastword $(sort $(CUDA_ARCHS)))
SANITIZE ?= 0

DEPS_DEB = build-essential pkg-config xz-utils jq python3 libhiredis-dev libev-dev libmsgpack-dev \
           libopenblas-dev libpcre2-dev libutf8proc-dev libjansson-dev libmicrohttpd-dev \
           libcmocka-dev redis-server redis-tools clang libclang-rt-14-dev \
           python3-prometheus-client

CFLAGS   ?= -O2 -g
CFLAGS   += -std=c17 -Wall -Wextra -Werror -D_GNU_SOURCE -pthread -MMD -MP -I. -I$(BUILD)/gen \
            -I/usr/include/x86_64-linux-gnu/openblas-pthread
LDLIBS   = -lhiredis -lev -lmsgpackc -lopenblas -lpcre2-8 -lutf8proc -ljansson -lmicrohttpd \
           -lm -lpthread -ldl

ifeq ($(SANITIZE),1)
  BUILD  := build-asan
  CUDA   := 0
  CFLAGS += -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  LDFLAGS += -fsanitize=address,undefined
endif

SRC      = $(filter-out kernels/nocuda.c,$(wildcard worker/*.c worker/*/*.c sched/*.c kernels/*.c kernels/cpu/*.c))
ifeq ($(CUDA),1)
  SRC    += $(wildcard kernels/cuda/*.c)
  CU     = $(wildcard kernels/cuda/*.cu)
  CFLAGS += -DRL_HAVE_CUDA -I$(CUDA_HOME)/include
  CUDA_GENCODE = $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
                 -gencode arch=compute_$(CUDA_PTX),code=compute_$(CUDA_PTX)
  NVFLAGS = -O3 -std=c++17 $(CUDA_GENCODE) -lineinfo -DRL_HAVE_CUDA -I. \
            -DRL_CUDA_ARCHS='"$(CUDA_ARCHS)"' \
            -Xcompiler -Wall,-Wextra,-Werror,-fPIC --expt-relaxed-constexpr
  CUDA_LIBDIRS = $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib
  LDLIBS += $(addprefix -L,$(CUDA_LIBDIRS)) $(addprefix -Wl$(comma)-rpath$(comma),$(CUDA_LIBDIRS)) \
            -lcublasLt -lcublas -lcudart -lnccl -lstdc++
else
  SRC    += kernels/nocuda.c
endif
comma := ,

OBJ      = $(patsubst %.c,$(BUILD)/%.o,$(SRC)) $(patsubst %.cu,$(BUILD)/%.o,$(CU))
LIBOBJ   = $(filter-out $(BUILD)/worker/main.o,$(OBJ))
TESTS    = $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_*.c))

.PHONY: all deps test-build test test-asan bench test-gpu bench-gpu gemm-sm90-check demo fuzz clean fixtures models FORCE
all: $(BUILD)/redlm models

# What this build is: rewritten only when it changes, so main.o (its only
# reader) is rebuilt after a commit but nothing else is.
GIT_COMMIT := $(shell c=$$(git rev-parse --short=12 HEAD 2>/dev/null) && \
                { git diff --quiet HEAD 2>/dev/null || c=$$c-dirty; echo $$c; } || echo unknown)
VERSION_H = $(BUILD)/gen/version.h
$(VERSION_H): FORCE
	@mkdir -p $(dir $@)
	@printf '#define RL_VERSION "%s"\n#define RL_GIT_COMMIT "%s"\n#define RL_CUDA_ARCHS "%s"\n#define RL_BACKENDS "%s"\n' \
	    '$(VERSION)' '$(GIT_COMMIT)' '$(if $(filter 1,$(CUDA)),$(foreach a,$(CUDA_ARCHS),sm_$(a))$(comma) compute_$(CUDA_PTX),none)' \
	    'cpu$(if $(filter 1,$(CUDA)), cuda)' > $@.tmp
	@if cmp -s $@.tmp $@; then rm $@.tmp; else mv $@.tmp $@; fi
$(BUILD)/worker/main.o: $(VERSION_H)

$(BUILD)/redlm: $(OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

# The .cu objects are rebuilt when the GPU targets change.
CUDA_STAMP = $(BUILD)/cuda-archs
$(CUDA_STAMP): FORCE
	@mkdir -p $(dir $@)
	@echo '$(CUDA_GENCODE)' | cmp -s - $@ || echo '$(CUDA_GENCODE)' > $@

$(BUILD)/%.o: %.cu $(CUDA_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/lib.a: $(LIBOBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/tests/%: tests/%.c $(BUILD)/lib.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/lib.a $(LDLIBS) -lcmocka

# The tests read tests/fixtures through a copy in $(BUILD)/fixtures ($FIXTURES),
# where large files kept compressed (model.safetensors.xz, reference.json.xz)
# are unpacked next to the plain ones, so a model folder is whole there.
FIXTURE_FILES = $(filter-out tests/fixtures/bundled/%,$(shell find tests/fixtures/ -type f))
fixtures: $(patsubst tests/fixtures/%,$(BUILD)/fixtures/%,$(patsubst %.xz,%,$(FIXTURE_FILES)))
$(BUILD)/fixtures/%: tests/fixtures/%.xz
	@mkdir -p $(dir $@)
	xz -dc $< > $@
$(BUILD)/fixtures/%: tests/fixtures/%
	@mkdir -p $(dir $@)
	cp $< $@

# The bundled model: tests/fixtures/bundled/NAME/ becomes the model directory
# $(BUILD)/models/NAME/ (plain files copied, *.xz unpacked).
BUNDLED = tests/fixtures/bundled
MODEL_FILES = $(patsubst $(BUNDLED)/%,$(BUILD)/models/%,$(patsubst %.xz,%,$(wildcard $(BUNDLED)/*/*)))
models: $(MODEL_FILES)
$(BUILD)/models/%: $(BUNDLED)/%.xz
	@mkdir -p $(dir $@)
	xz -dc $< > $@
$(BUILD)/models/%: $(BUNDLED)/%
	@mkdir -p $(dir $@)
	cp $< $@

# What any test run needs built: test, test-gpu and the GPU machine's scripts.
test-build: $(BUILD)/redlm $(TESTS) fixtures models

test: test-build
	BUILD=$(BUILD) CUDA=$(CUDA) CUDA_ARCHS='$(CUDA_ARCHS)' CUDA_PTX=$(CUDA_PTX) tests/run

test-asan:
	$(MAKE) SANITIZE=1 test

bench: $(BUILD)/redlm fixtures
	BUILD=$(BUILD) scripts/bench-cpu

test-gpu: test-build
	BUILD=$(BUILD) RL_REQUIRE_GPU=1 tests/run gpu

bench-gpu: $(BUILD)/redlm fixtures
	BUILD=$(BUILD) scripts/bench-gpu

# A kernel in development (kernels/cuda/proto/README.md), built on request only.
gemm-sm90-check: $(BUILD)/proto/gemm_sm90_check
$(BUILD)/proto/gemm_sm90_check: kernels/cuda/proto/gemm_sm90_check.cu kernels/cuda/proto/gemm_sm90.cuh
	@mkdir -p $(dir $@)
	$(NVCC) -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o $@ $< \
	    $(addprefix -L,$(CUDA_LIBDIRS)) $(addprefix -Xlinker -rpath$(comma),$(CUDA_LIBDIRS)) -lcublas

demo: $(BUILD)/redlm models
	BUILD=$(BUILD) scripts/demo

# The OpenAI output check (tests/test_openai_batch.sh) types each answer
# with the openai package's TypeScript declarations; without npm it is skipped.
NODE_DIR = build/node
NODE_PKGS = openai typescript

deps:
	@if dpkg -s $(DEPS_DEB) >/dev/null 2>&1; then echo "deps: all installed"; \
	else apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(DEPS_DEB); fi
	@if [ -x $(NODE_DIR)/node_modules/.bin/tsc ] && [ -d $(NODE_DIR)/node_modules/openai ]; then \
	    echo "deps: npm packages installed"; \
	elif command -v npm >/dev/null 2>&1; then \
	    mkdir -p $(NODE_DIR) && npm install --prefix $(NODE_DIR) --no-audit --no-fund $(NODE_PKGS) || \
	    echo "deps: npm install $(NODE_PKGS) failed: the OpenAI type check will be skipped"; \
	else echo "deps: no npm: the OpenAI type check will be skipped"; fi

# libFuzzer (clang): every tests/fuzz_*.c over the rooms that read outside
# input (tokenizer.json and text, job payloads, safetensors headers, chat
# templates) and the libraries they stand on.  `make fuzz` gives each its
# share of FUZZ_SECONDS.
FUZZ_SECONDS ?= 60
FUZZ_SRC = $(wildcard worker/lib/*.c worker/tokenizer/*.c worker/request/*.c worker/chat/*.c) \
           worker/model/safetensors.c \
           kernels/error.c kernels/config.c
FUZZERS  = $(patsubst tests/%.c,build-fuzz/%,$(wildcard tests/fuzz_*.c))
build-fuzz/fuzz_%: tests/fuzz_%.c $(FUZZ_SRC)
	@mkdir -p $(dir $@)
	clang -std=c17 -g -O1 -Wall -Wextra -Werror -D_GNU_SOURCE -pthread -I. \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -o $@ $^ \
	    -lpcre2-8 -lutf8proc -ljansson -lmsgpackc -lhiredis -lm
fuzz: $(FUZZERS)
	@for f in $(FUZZERS); do n=$$(basename $$f); mkdir -p build-fuzz/corpus-$$n; \
	    echo "== $$n ($$(( $(FUZZ_SECONDS) / $(words $(FUZZERS)) )) s)"; \
	    $$f -max_total_time=$$(( $(FUZZ_SECONDS) / $(words $(FUZZERS)) )) -max_len=4096 -rss_limit_mb=2048 \
	        -artifact_prefix=build-fuzz/$$n- build-fuzz/corpus-$$n tests/$${n}_seeds || exit 1; done

clean:
	rm -rf build build-asan build-fuzz

-include $(OBJ:.o=.d) $(TESTS:=.d)
