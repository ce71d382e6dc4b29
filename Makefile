# Kowloon — one Makefile for the daemons, the kernel library, the CUDA plugin
# and the tests. `make V=1` shows the commands.

CC      ?= cc
CXX     ?= c++
NVCC    ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
SAN     ?=
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fPIC -MMD -MP -pthread $(SAN)
# Each layer compiles with its own include folders (DESIGN.md "Layout"):
# kernels/ sees kernels/ only, service/ sees itself and kernels/, each daemon
# sees itself, service/ and kernels/ — never the other daemon. A source's
# first folder picks its set (INC_<folder>); scripts/check-layers.sh holds
# the objects' .d files to it. A folder's rooms (its sub-folders: gateway/api,
# gateway/sched, ...) are part of its layer and share its flags.
rooms = $(patsubst %/,-I%,$(sort $(dir $(wildcard $(1)/*/*.[ch] $(1)/*/*.cc))))
INC_kernels := -Ikernels -Ikernels/dist
INC_service := -Iservice $(call rooms,service) $(INC_kernels)
INC_gateway := -Igateway $(call rooms,gateway) $(INC_service) $(shell pkg-config --cflags-only-I libpq 2>/dev/null) -I/usr/include/postgresql
INC_compute := -Icompute $(call rooms,compute) $(INC_service)
INC_bench   := $(INC_kernels)
INC = $(INC_$(firstword $(subst /, ,$<)))
# C++ only for service/data/svc_dtoa.cc, the C face of double-conversion.
CXXFLAGS ?= -O2 -g
CXXFLAGS += -std=c++17 -Wall -Wextra -Werror -fPIC -fno-exceptions -fno-rtti -MMD -MP $(SAN)
LDFLAGS += -pthread $(SAN)
NVFLAGS ?= -O3 -std=c++17 --compiler-options -fPIC,-Wall,-Wextra -Werror all-warnings \
           -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
           -gencode arch=compute_90,code=compute_90 $(INC_kernels)

Q = $(if $(V),,@)
# A sanitizer build (SAN=-fsanitize=...) keeps its objects and binaries apart.
B   = build$(if $(SAN),-san,)
BIN = bin$(if $(SAN),-san,)

SVC_SRC  := $(wildcard service/*.c service/*/*.c)
SVC_CXX  := $(wildcard service/*.cc service/*/*.cc)
# Gloo (libgloo-dev) carries the CPU collectives of multi-node runs; without
# it kernels/dist/comm_none.c stands in and such runs say they cannot run.
GLOO    ?= $(wildcard /usr/include/gloo/config.h)
KL_SRC   := $(wildcard kernels/*.c kernels/cpu/*.c) $(if $(GLOO),,kernels/dist/comm_none.c)
KL_CXX   := $(if $(GLOO),kernels/dist/gloo.cc,)
GW_SRC   := $(wildcard gateway/*.c gateway/*/*.c)
CN_SRC   := $(wildcard compute/*.c compute/*/*.c)
CU_SRC   := $(wildcard kernels/cuda/*.cu)
UT_SRC   := $(wildcard tests/unit/*/test_*.c)

SVC_OBJ  := $(SVC_SRC:%.c=$(B)/%.o) $(SVC_CXX:%.cc=$(B)/%.o)
KL_OBJ   := $(KL_SRC:%.c=$(B)/%.o) $(KL_CXX:%.cc=$(B)/%.o)
GW_OBJ   := $(GW_SRC:%.c=$(B)/%.o)
CN_OBJ   := $(CN_SRC:%.c=$(B)/%.o)
CU_OBJ   := $(CU_SRC:%.cu=$(B)/%.o)
# tests/unit has a room per layer (kernels/, service/, gateway/, compute/,
# bench/); each binary lands at its source's place under $(B)/
# (build/tests/unit/kernels/test_kl_args). Not build/tests/ flat, as before
# the rooms: the .d files a build tree of then still holds name the sources'
# old paths, and make would stop on a target they name.
UT_BIN   := $(UT_SRC:%.c=$(B)/%)
# Stand-ins for the CUDA plugin (tests/plugins/fake_cuda.c): the node's
# tests load them with --plugin on machines without a GPU.
FAKE_PLUGINS := $(B)/tests/kl_fake_cuda.so $(B)/tests/kl_fake_cuda_abi4.so $(B)/tests/kl_fake_cuda_noabi.so

SVC_LIBS := -lmicrohttpd -lgnutls -ljansson -lcurl -lcrypto -ldouble-conversion -lstdc++
# The kernels refer to OpenBLAS weakly (kernels/cpu/kl_cpu.h, "BLAS"), and
# Debian's linker is --as-needed: a gcc link that runs kernels asks for it
# outright. The gateway (no kernel runs) leaves it out; nvcc links (the
# plugin, loaded by the node) find it in the node.
KL_LINK  := -lm $(if $(GLOO),-lgloo -lstdc++,)
KL_LIBS  := -Wl,--push-state,--no-as-needed -lopenblas -Wl,--pop-state $(KL_LINK)
KL_LIBS_NOBLAS := -Wl,--push-state,--as-needed -lopenblas -Wl,--pop-state $(KL_LINK)
GW_LIBS  := -lpq -lhiredis -lcares
CN_LIBS  := -ldl
CU_LIBS  := -L$(CUDA_HOME)/lib64 -lcublas -lcublasLt -lnccl -lcudart

PLUGIN   := $(if $(NVCC),lib/kowloon-cuda.so,)

.DELETE_ON_ERROR:
.PHONY: all clean deps run stop test test-unit check-layers lint schema sdk-sync test-integration bench bench-kernels bench-gloo chaos fuzz fuzz-api test-asan
all: $(BIN)/kowloon-gateway $(BIN)/kowloon-compute $(PLUGIN) $(UT_BIN) $(FAKE_PLUGINS) $(BIN)/kl-scalesim
	@echo "✓ $(BIN)/kowloon-gateway  ✓ $(BIN)/kowloon-compute  $(if $(NVCC),✓ lib/kowloon-cuda.so ($(NVCC)),✗ CUDA plugin (no nvcc))  $(if $(GLOO),✓ Gloo (multi-node CPU runs),✗ Gloo (no libgloo-dev: multi-node CPU runs refused))"

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(INC) $(CFLAGS) -c $< -o $@

$(B)/%.o: %.cc
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CXX     $<")
	$(Q)$(CXX) $(CPPFLAGS) $(INC) $(CXXFLAGS) -c $< -o $@

# Gloo reports failures by exception: its one file is built with them (and
# RTTI, which they need); none crosses into C (see the file).
$(B)/kernels/dist/gloo.o: CXXFLAGS += -fexceptions -frtti

$(B)/%.o: %.cu
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC    $<")
	$(Q)$(NVCC) $(NVFLAGS) -MMD -MP -c $< -o $@

$(B)/libsvc.a: $(SVC_OBJ)
	$(Q)rm -f $@ && ar rcs $@ $^
$(B)/libkl.a: $(KL_OBJ)
	$(Q)rm -f $@ && ar rcs $@ $^

# The gateway runs no kernel: OpenBLAS, which the kernels refer to weakly,
# is left out of it (kernels/cpu/kl_cpu.h, "BLAS").
$(BIN)/kowloon-gateway: $(GW_OBJ) $(B)/libsvc.a $(B)/libkl.a
	@mkdir -p $(BIN)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(GW_OBJ) $(B)/libsvc.a $(B)/libkl.a $(GW_LIBS) $(SVC_LIBS) $(KL_LIBS_NOBLAS)

$(BIN)/kowloon-compute: $(CN_OBJ) $(B)/libsvc.a $(B)/libkl.a
	@mkdir -p $(BIN)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -rdynamic -o $@ $(CN_OBJ) $(B)/libsvc.a $(B)/libkl.a $(SVC_LIBS) $(KL_LIBS) $(CN_LIBS)

# The plugin carries its own copy of the kernel library (CPU references are
# used for the parts CUDA does not cover), so it needs nothing from the node.
lib/kowloon-cuda.so: $(CU_OBJ) $(B)/libkl.a
	@mkdir -p lib
	@$(if $(Q),echo "  NVLD    $@")
	$(Q)$(NVCC) -shared -o $@ $(CU_OBJ) $(B)/libkl.a $(CU_LIBS) -lopenblas $(KL_LINK)

# Unit tests link what their prefix names, and live in the room of tests/unit
# it names: test_kl_* (kernels/) the kernel library, test_svc_* (service/)
# the service runtime, test_gw_* (gateway/) / test_cn_* (compute/) a daemon's
# objects, test_bench_* (bench/) the scale simulator's core.
# Each sees the include folders of the layer it tests.
UT_CC = $(CC) $(CPPFLAGS) $(CFLAGS) -Wno-unused-parameter $(LDFLAGS) -o $@ $< $(filter %.o %.a,$^) -lcmocka
$(B)/tests/unit/kernels/test_kl_%: tests/unit/kernels/test_kl_%.c $(B)/libkl.a
	@mkdir -p $(dir $@)
	$(Q)$(UT_CC) $(INC_kernels) $(KL_LIBS)
$(B)/tests/unit/service/test_svc_%: tests/unit/service/test_svc_%.c $(B)/libsvc.a $(B)/libkl.a
	@mkdir -p $(dir $@)
	$(Q)$(UT_CC) $(INC_service) $(SVC_LIBS) $(KL_LIBS)
$(B)/tests/unit/gateway/test_gw_%: tests/unit/gateway/test_gw_%.c $(filter-out %/main.o,$(GW_OBJ)) $(B)/libsvc.a $(B)/libkl.a
	@mkdir -p $(dir $@)
	$(Q)$(UT_CC) $(INC_gateway) $(GW_LIBS) $(SVC_LIBS) $(KL_LIBS)
$(B)/tests/unit/bench/test_bench_%: tests/unit/bench/test_bench_%.c $(B)/bench/scalesim_core.o
	@mkdir -p $(dir $@)
	$(Q)$(UT_CC) -Ibench -ljansson
$(B)/tests/unit/compute/test_cn_%: tests/unit/compute/test_cn_%.c $(filter-out %/main.o,$(CN_OBJ)) $(B)/libsvc.a $(B)/libkl.a
	@mkdir -p $(dir $@)
	$(Q)$(UT_CC) $(INC_compute) $(SVC_LIBS) $(KL_LIBS) $(CN_LIBS)

# The fake plugins carry the kernel library, as the real one does.
FAKE_CC = $(CC) $(CPPFLAGS) $(INC_kernels) $(CFLAGS) -shared $(LDFLAGS) -o $@ $< $(B)/libkl.a $(KL_LIBS)
$(B)/tests/kl_fake_cuda.so: tests/plugins/fake_cuda.c $(B)/libkl.a
	@mkdir -p $(dir $@)
	$(Q)$(FAKE_CC)
$(B)/tests/kl_fake_cuda_abi4.so: tests/plugins/fake_cuda.c $(B)/libkl.a
	@mkdir -p $(dir $@)
	$(Q)$(FAKE_CC) -DFAKE_ABI=4
$(B)/tests/kl_fake_cuda_noabi.so: tests/plugins/fake_cuda.c $(B)/libkl.a
	@mkdir -p $(dir $@)
	$(Q)$(FAKE_CC) -DFAKE_NO_ABI_SYMBOL
# test_cn_backend and test_cn_runs load them.
$(B)/tests/unit/compute/test_cn_backend $(B)/tests/unit/compute/test_cn_runs: $(FAKE_PLUGINS)
$(B)/tests/unit/compute/test_cn_backend $(B)/tests/unit/compute/test_cn_runs: CPPFLAGS += -DKL_FAKE_PLUGIN_DIR='"$(B)/tests"'

-include $(shell find $(B) -name '*.d' 2>/dev/null)

# Functions of a screen or two: none past 100 lines or complexity 30
# (lizard, from tests/requirements.txt; scripts/lint-pending.txt lists the
# ones still to split).
lint:
	@python3 scripts/lint.py
# sql/schema.sql: the schema the migrations produce, written anew from a
# throwaway PostgreSQL (tests/integration/ops/test_schema.py checks it).
schema: $(BIN)/kowloon-gateway
	@python3 scripts/schema.py
# The layers the build promises (DESIGN.md), read from the objects' .d files.
check-layers: all
	@scripts/check-layers.sh $(B)
# One target per unit test binary, so that `make -j -O test-unit` (what
# make test runs) runs them side by side and prints each one's output whole.
UT_RUN := $(UT_BIN:%=%.run) $(B)/tests/unit/bench/test_bench_philly.py.run \
          $(B)/tests/unit/bench/test_bench_fairshare.py.run $(B)/tests/unit/bench/test_bench_scale_report.py.run \
          $(B)/tests/unit/sdk/test_unasync.py.run
.PHONY: $(UT_RUN)
test-unit: $(UT_RUN) check-layers
$(filter-out %.py.run,$(UT_RUN)): %.run: %
	@echo "== $<"; $<
$(B)/tests/unit/bench/test_bench_philly.py.run:
	@echo "== tests/unit/bench/test_bench_philly.py (the scale workload and packer)"
	@python3 -m pytest -q -p no:cacheprovider tests/unit/bench/test_bench_philly.py
$(B)/tests/unit/bench/test_bench_fairshare.py.run:
	@echo "== tests/unit/bench/test_bench_fairshare.py (the offline fair-share model)"
	@python3 -m pytest -q -p no:cacheprovider tests/unit/bench/test_bench_fairshare.py
$(B)/tests/unit/bench/test_bench_scale_report.py.run:
	@echo "== tests/unit/bench/test_bench_scale_report.py (the fairness figure and its slices)"
	@python3 -m pytest -q -p no:cacheprovider tests/unit/bench/test_bench_scale_report.py
$(B)/tests/unit/sdk/test_unasync.py.run:
	@echo "== tests/unit/sdk/test_unasync.py (client.py is written from aio.py)"
	@python3 -m pytest -q -p no:cacheprovider tests/unit/sdk/test_unasync.py
# The Python SDK's synchronous client, written from the asyncio one.
sdk-sync:
	@python3 sdk/python/tools/unasync.py

# The commands of the README, and the rest of the tooling, live in scripts/.
# deps, run, test and test-asan all check the Debian and Python packages
# first (under a second) and install only what is missing: a machine that
# has them runs no apt-get, and a fresh clone needs nothing before make test.
deps:
	@scripts/install-deps.sh
run:
	@scripts/install-deps.sh
	@$(MAKE) --no-print-directory all
	@scripts/run.sh
stop:
	@scripts/stop.sh
# test prints its wall time, the build's included (scripts/test.sh: each part's).
test:
	@scripts/install-deps.sh
	@t0=$$(date +%s); $(MAKE) --no-print-directory -j$$(nproc) all && scripts/test.sh; rc=$$?; \
	  echo "make test: $$(( $$(date +%s) - t0 )) s wall"; exit $$rc
bench: all $(if $(GLOO),$(B)/bench/gloo_allreduce,)
	@bench/run.sh
bench-kernels: all
	@bench/kernels.sh
# Fault injection, fuzzing and sanitizers (issue 4); each script says what it runs.
chaos: all
	@tests/chaos/run.sh --full
fuzz:
	@tests/fuzz/run.sh
fuzz-api: all
	@tests/api_fuzz/run.sh --full
test-asan:
	@scripts/install-deps.sh
	@scripts/test-asan.sh

clean:
	rm -rf build build-san bin bin-san lib

# Gloo's all-reduce driven directly, no Kowloon in between (the reference
# for the multi-node allreduce figures of make bench); built only with Gloo.
$(B)/bench/gloo_allreduce: bench/gloo_allreduce.cc
	@mkdir -p $(dir $@)
	$(Q)$(CXX) $(CPPFLAGS) $(INC_kernels) $(CXXFLAGS) -fexceptions -frtti $(LDFLAGS) -o $@ $< -lgloo
bench-gloo: $(if $(GLOO),$(B)/bench/gloo_allreduce,)
	@$(if $(GLOO),$(B)/bench/gloo_allreduce,echo "✗ Gloo (no libgloo-dev): no gloo_allreduce bench")

# CPU kernel figures, one program per bench/bench_*.c; bench/kernels.sh
# builds and runs them.
$(B)/bench/bench_%: bench/bench_%.c $(B)/libkl.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CPPFLAGS) $(INC_kernels) $(CFLAGS) $(LDFLAGS) -o $@ $< $(B)/libkl.a $(KL_LIBS)

# The cluster-scale bench's node simulator (bench/scalesim.c, issue 20):
# many simulated nodes in one process, and a fast submitter; bench/scale.sh
# runs it.
$(B)/bench/scalesim.o $(B)/bench/scalesim_core.o: CPPFLAGS += -Ibench
$(BIN)/kl-scalesim: $(B)/bench/scalesim.o $(B)/bench/scalesim_core.o
	@mkdir -p $(BIN)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ -ljansson -lcurl
