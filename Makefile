# wdrift: build, test, benchmark and install.
#
#   make deps      install the Debian packages the build, tests and demo need
#   make           build build/wdrift and build/libwdrift.so (CUDA when nvcc exists)
#   make check     build and run every test that needs no GPU
#   make check-asan  the same tests against a build under ASan + UBSan (clang)
#   make check-valgrind  the C unit tests under valgrind memcheck
#   make demo      start wdriftd, train four small GPTs publishing to it, write report.html
#   make demo-compare  build and compare generated checkpoints, no daemon
#   make bench     CPU engine benchmark against scipy and numpy (not a test)
#   make bench-ingest  wdriftd ingest against raw ZeroMQ and the engine
#   make bench-ckpt    checkpoint reading in a resource-limited child against in-process
#   make bench-snapshot a Llama-shaped snapshot (291 tensors) against a prepared baseline, beside memcpy
#   make bench-compare the whole wdrift compare process against scipy and the engine alone
#   make bench-step    one step of a Llama-shaped study (large tensors) through wdriftd, 1 thread against all
#   make bench-publish how long publish() blocks a training step, against a clone / .cpu()
#   make bench-drift-query  a drift query against the study's tensor count; status meanwhile
#   make fuzz      the parsers under libFuzzer + ASan/UBSan, FUZZ_RUNS each
#   make check-gpu tests/gpu: the CUDA engine against the CPU one (SKIP: no device)
#   make bench-gpu the CUDA engine against CUB, copy bandwidth and torch
#   make install   PREFIX=/usr/local DESTDIR=: the programs, the library, its
#                  header, the config, and the Python package in PYTHONDIR
#   make install-system   the above, plus the systemd unit, the config as
#                  /etc/wdrift/wdrift.yaml instead (no study: config/wdrift.system.yaml)
#   make uninstall the inverse of both; a config edited since is kept
#
# Knobs: CUDA=0 builds without nvcc; HDF5_STATIC=0 links the shared libhdf5
# into the programs; PYTHON is the interpreter that has
# Debian's numpy, scipy and h5py; PYTHONDIR is where make install puts the
# Python package (default: where PYTHON looks under PREFIX).

PREFIX  ?= /usr/local
DESTDIR ?=
PYTHON  ?= /usr/bin/python3
CC      ?= cc
OPT     ?= -O3
BUILD   ?= build

NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
# Where the toolkit lives is asked of nvcc itself (its TOP): the nvcc on PATH
# may be a wrapper script in /usr/local/bin, so its directory says nothing.
# CUDA is on only when the static runtime we link is really there.
ifeq ($(origin CUDA_HOME),undefined)
CUDA_HOME := $(if $(NVCC),$(shell $(NVCC) -dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^\#\$$ TOP=//p' | head -n 1))
endif
CUDA_LIBDIR := $(patsubst %/,%,$(dir $(firstword $(wildcard \
	$(CUDA_HOME)/lib64/libcudart_static.a $(CUDA_HOME)/targets/*/lib/libcudart_static.a))))
CUDA_INCDIR := $(patsubst %/,%,$(dir $(firstword $(wildcard \
	$(CUDA_HOME)/include/cuda_runtime_api.h $(CUDA_HOME)/targets/*/include/cuda_runtime_api.h))))
ifeq ($(CUDA_LIBDIR),)
CUDA ?= 0
else
CUDA ?= 1
endif

DEB_PKGS := gcc make libc6-dev pkg-config clang \
	libzmq3-dev libhdf5-dev hdf5-tools hdf5-filter-plugin libyaml-dev libsystemd-dev libjansson-dev zlib1g-dev \
	python3 python3-numpy python3-scipy python3-h5py python3-zmq \
	python3-venv python3-pip python3-setuptools python3-wheel \
	python3-torch libopenblas0-pthread chromium fonts-dejavu-core python3-pil valgrind \
	libmicrohttpd-dev prometheus libhwy-dev curl

# pkg-config knows these once `make deps` has run; until then the flags are
# empty and only the deps target is usable.
PKGS       := hdf5 jansson zlib yaml-0.1 libzmq
PKG_CFLAGS  = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
# libwdrift.so, which a training job loads, links no HDF5: Debian's shared
# libhdf5 brings 26 more libraries (libcurl, TLS, Kerberos, LDAP) that cost
# every process that loads them 4 ms. The programs, which read and write
# HDF5, link libhdf5.a (libhdf5-dev's; HDF5_STATIC=0 links the shared one,
# as sanitizer builds do, whose suppressions name libhdf5_serial.so). Its
# static link needs libsz and zlib, not libcurl: nothing references the
# read-only S3 driver, which wants libcurl (docs/performance.md, "libwdrift.so
# without HDF5"). Filter plugins link the shared libhdf5, which then loads
# beside it in the reader child: Debian's lz4 and bz2 read right (t102).
LIB_PKGS   := jansson zlib libzmq
LIB_LIBS    = $(shell pkg-config --libs $(LIB_PKGS) 2>/dev/null)
HDF5_A      = $(patsubst -L%,%,$(filter -L%,$(shell pkg-config --libs-only-L hdf5 2>/dev/null)))/libhdf5.a
HDF5_STATIC ?= $(if $(findstring -fsanitize=,$(CFLAGS)),0,$(if $(wildcard $(HDF5_A)),1,0))
HDF5_LIBS   = $(if $(filter 1,$(HDF5_STATIC)),$(HDF5_A) -lsz -lz -ldl -lm,$(shell pkg-config --libs hdf5 2>/dev/null))
PKG_LIBS    = $(HDF5_LIBS) $(shell pkg-config --libs $(filter-out hdf5,$(PKGS)) 2>/dev/null)
# A plain `make` before `make deps` says so, rather than failing on a missing
# header (make check and make demo run deps first, then make all).
ifeq ($(filter-out all,$(MAKECMDGOALS)),)
ifneq ($(shell pkg-config --exists $(PKGS) 2>/dev/null && echo yes),yes)
$(error pkg-config does not find all of $(PKGS): run `make deps` first, which installs them)
endif
endif

WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CFLAGS   ?= -g $(OPT)
# No FMA contraction, whatever -march CFLAGS gives: the engine's sums must
# round as written (GCC's -std=c11 implies it; clang's default fuses a * b + c
# in one expression, so its scalar lanes would part from the SSE2 ones).
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE -fPIC -MMD -MP -ffp-contract=off $(WARN) -Ilib $(PKG_CFLAGS) $(CFLAGS)
RPATH    := -Wl,-rpath,'$$ORIGIN:$$ORIGIN/../lib'

# The engine alone (no HDF5, ZeroMQ or YAML): what tests/gpu and bench-gpu
# link, so that they build on a bare GPU machine with only nvcc.
ENGINE_SRCS := lib/log.c lib/error.c lib/dtype.c lib/radix_sort.c lib/engine.c lib/prepare_cpu.c lib/spares.c lib/w1.c lib/stats.c lib/drift.c lib/cpu_par.c lib/pool.c
# Without CUDA, backend_cuda.h is answered by a stub: no device.
ifneq ($(CUDA),1)
ENGINE_SRCS += lib/backend_cuda_none.c
endif
# The CPU engine's sort of fp32 and fp64: Highway's vqsort, compiled for
# AVX2 and AVX-512 by clang++ (lib/sort_vq.cc; GCC 12 makes it 7x slower),
# on x86-64 with libhwy-dev's headers; nothing of libhwy is linked (its
# constructor cost every process about 4 ms). VQSORT=0, or elsewhere, the radix
# sort alone.
VQ_CXX ?= clang++
VQSORT ?= $(if $(and $(filter x86_64,$(shell uname -m)),$(wildcard /usr/include/hwy/contrib/sort/vqsort-inl.h),$(shell command -v $(VQ_CXX))),1,0)
ifeq ($(VQSORT),1)
VQ_OBJS := $(BUILD)/lib/sort_vq.o
else
ENGINE_SRCS += lib/sort_vq_none.c
endif
# Checkpoints (HDF5): the programs' own, in libwdrift-ckpt.a, not in libwdrift.so.
CKPT_SRCS := lib/checkpoint.c lib/checkpoint_write.c lib/ckpt_sandbox.c lib/ckpt_sandbox_child.c lib/mapguard.c
LIB_SRCS := $(ENGINE_SRCS) lib/near_name.c lib/crc32.c lib/wire.c lib/publisher.c lib/publisher_snapshot.c lib/publisher_send.c lib/publisher_peer.c lib/handshake.c lib/zmtp_probe.c lib/keys.c lib/units.c lib/utf8.c lib/zctx.c
CLI_SRCS := client/wdrift.c client/cli.c client/table.c client/daemon_client.c \
	client/cmd_compare.c client/compare_out.c client/cmd_status.c client/cmd_runs.c \
	client/cmd_studies.c client/cmd_drift.c client/cmd_alerts.c client/cmd_watch.c client/cmd_send.c \
	client/study_data.c client/png.c client/chart.c client/cmd_report.c client/report_data.c \
	client/report_charts.c client/cmd_export.c \
	client/cmd_keygen.c client/cmd_reload.c client/other_daemons.c
DAEMON_SRCS := daemon/main.c daemon/alerts.c daemon/commit_ranks.c daemon/alert_instances.c daemon/auth.c daemon/log_limit.c daemon/socket_file.c daemon/compare.c daemon/compute.c daemon/config_file.c daemon/control.c daemon/control_drift.c daemon/identity.c daemon/ingest.c daemon/ingest_reply.c daemon/ingest_room.c daemon/ingest_shard.c daemon/kept_bufs.c daemon/name_match.c daemon/names.c daemon/peers.c daemon/rm_wait.c daemon/fdlimit.c daemon/pieces.c \
	daemon/dirs.c daemon/logging.c daemon/notify.c daemon/query.c daemon/spool.c daemon/state.c daemon/wal.c \
	daemon/events.c daemon/reconfigure.c daemon/records.c daemon/recover.c daemon/result_batch.c daemon/result_cover.c daemon/spool_index.c daemon/study_waiting.c daemon/workq.c \
	daemon/metrics.c daemon/metrics_http.c
# What the CLI and the daemon share, apart from libwdrift (which a training
# job loads): the drift log's format, its writer and its reader; the
# configuration (the CLI reads its endpoints).
CONFIG_SRCS := common/arena.c common/yaml_doc.c common/config.c common/config_load.c \
	common/config_check.c common/config_suggest.c common/config_print.c common/config_find.c \
	common/config_diff.c
COMMON_SRCS := common/driftlog_write.c common/driftlog_read.c $(CONFIG_SRCS)
DAEMON_PKGS := libzmq libsystemd yaml-0.1 libmicrohttpd
DAEMON_LIBS  = $(shell pkg-config --libs $(DAEMON_PKGS) 2>/dev/null) -lpthread
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
FUZZ_TARGETS := wire control config checkpoint
FUZZ_REPLAY_BINS = $(FUZZ_TARGETS:%=$(BUILD)/tests/test_fuzz_%)
# The CUDA backend (cuda/*.cu, docs/gpu.md), compiled when nvcc exists.
CUDA_SRCS := $(wildcard cuda/*.cu)

LIB_OBJS    := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(VQ_OBJS)
CKPT_OBJS   := $(CKPT_SRCS:%.c=$(BUILD)/%.o)
CKPT_A      := $(BUILD)/libwdrift-ckpt.a
ENGINE_OBJS := $(ENGINE_SRCS:%.c=$(BUILD)/%.o) $(VQ_OBJS)
ifeq ($(CUDA),1)
# sm_90 code plus PTX, so that newer GPUs JIT it; cudart is linked statically
# so that the programs still start, and fall back to the CPU, with no driver.
NVCCFLAGS ?= -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 \
	-gencode arch=compute_90,code=compute_90
CUDA_OBJS := $(CUDA_SRCS:%.cu=$(BUILD)/%.o)
CUDA_LIBS := -L$(CUDA_LIBDIR) -lcudart_static -ldl -lrt -lpthread -lstdc++
LIB_OBJS    += $(CUDA_OBJS)
ENGINE_OBJS += $(CUDA_OBJS)
LAB_BINS := $(patsubst cuda/lab/%.cu,$(BUILD)/lab/%,$(wildcard cuda/lab/*.cu))
GPU_BINS := $(BUILD)/tests/test_gpu $(BUILD)/bench-gpu $(LAB_BINS)
endif
CLI_OBJS  := $(CLI_SRCS:%.c=$(BUILD)/%.o)
# config/wdrift.yaml, compiled in as wd_config_default_yaml: one source of truth.
# CONFIG_OBJS: the configuration alone, a part of COMMON_OBJS (test_config).
CONFIG_OBJS := $(CONFIG_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/common/default_yaml.o
COMMON_OBJS := $(COMMON_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/common/default_yaml.o
DAEMON_OBJS := $(DAEMON_SRCS:%.c=$(BUILD)/%.o) $(COMMON_OBJS)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
# tests/kernels: defined before `all`, whose prerequisites are expanded as read.
KERNEL_CXX  := $(if $(findstring clang,$(CC)),clang++,g++)
KERNEL_TEST := $(BUILD)/tests/test_kernels

# Keep intermediate objects: make would delete them after linking tests.
.SECONDARY:

.PHONY: all deps check check-asan check-valgrind check-gpu check-gpu-publish test demo demo-compare fuzz bench bench-ckpt bench-publish bench-gpu bench-ingest install install-system uninstall clean FORCE
all: $(BUILD)/libwdrift.so $(BUILD)/wdrift $(BUILD)/wdriftd $(BUILD)/wdrift-bench $(BUILD)/wdrift-bench-snapshot \
	$(BUILD)/wdrift-bench-ingest $(BUILD)/wdrift-bench-ckpt $(UNIT_BINS) $(KERNEL_TEST) $(FUZZ_REPLAY_BINS) $(GPU_BINS)

deps:
	@sh scripts/deps.sh $(DEB_PKGS)

# Objects depend on the flags they were built with: switching CUDA=0/1 or
# CFLAGS in one build directory rebuilds instead of mixing. Expanded now, so
# that the target-specific additions below (-Idaemon, CUDA's include
# directory), which make passes on to a target's prerequisites, do not
# change the stamp with the order targets are visited in: that rebuilt
# everything on every make.
FLAGS_STAMP := $(BUILD)/.flags
FLAGS_NOW   := $(CC) $(ALL_CFLAGS) CUDA=$(CUDA) $(NVCCFLAGS) VQSORT=$(VQSORT) $(VQ_CXX)
$(FLAGS_STAMP): FORCE
	@mkdir -p $(BUILD)
	@echo '$(FLAGS_NOW)' | cmp -s - $@ || echo '$(FLAGS_NOW)' > $@
FORCE:

# The same for how the programs link HDF5: a switch of HDF5_STATIC relinks
# them, and so does an upgraded libhdf5.a (a Debian security update of
# libhdf5 reaches the programs only through a rebuild; HDF5_STATIC=0 where
# that does not suit).
LINK_STAMP := $(BUILD)/.link
LINK_NOW   := HDF5_STATIC=$(HDF5_STATIC) $(HDF5_LIBS)
$(LINK_STAMP): FORCE
	@mkdir -p $(BUILD)
	@if [ '$(HDF5_STATIC)' = 1 ] && [ ! -f '$(HDF5_A)' ]; then \
		echo "HDF5_STATIC=1, but there is no $(HDF5_A): make deps installs libhdf5-dev, or build with HDF5_STATIC=0" >&2; \
		exit 1; fi
	@if ! echo '$(LINK_NOW)' | cmp -s - $@; then \
		if [ '$(HDF5_STATIC)' = 0 ] && [ ! -f '$(HDF5_A)' ]; then \
			echo "note: no $(HDF5_A): the programs link the shared libhdf5 (HDF5_STATIC=0)"; fi; \
		echo '$(LINK_NOW)' > $@; fi
HDF5_DEPS := $(LINK_STAMP) $(if $(filter 1,$(HDF5_STATIC)),$(wildcard $(HDF5_A)))

$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

# vqsort's AVX2, AVX3 and AVX3_DL code, one of which sort_vq.cc calls
# (sort_vq.h says which, and why not Highway's dispatch); Highway also
# compiles its baseline, which it requires. Hidden: nothing of Highway's
# templates is exported from libwdrift.so, to clash with another copy.
# DWARF 4: valgrind 3.19 gives up on clang 14's DWARF 5 (check-valgrind).
# Under UBSan, no pointer-overflow check here: Highway 1.0.3's AVX-512
# partition (vqsort-inl.h:455) moves a load address back by a size_t that
# wrapped, to a place inside the caller's array, which UBSan calls an
# overflow; ASan checks the loads themselves (make check-asan). Nor the
# function-type check of calls through pointers, which is C++'s and needs
# UBSan's C++ runtime, which the C link of libwdrift.so does not bring.
VQ_SAN := $(if $(findstring -fsanitize=,$(CFLAGS)),-fno-sanitize=pointer-overflow -fno-sanitize=function)
$(BUILD)/lib/sort_vq.o: lib/sort_vq.cc $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(VQ_CXX) -std=c++17 -fPIC -MMD -MP -fno-exceptions -fno-rtti -fvisibility=hidden \
		-fvisibility-inlines-hidden '-DHWY_DISABLED_TARGETS=(HWY_SSSE3|HWY_SSE4)' -DHWY_WANT_AVX3_DL \
		-Wall -Wextra -I. -Ilib $(CFLAGS) $(VQ_SAN) -gdwarf-4 -c -o $@ $<

$(BUILD)/cuda/%.o: cuda/%.cu $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Xcompiler -fPIC,-Wall,-Wextra -Ilib -Icuda -MMD -MP -c -o $@ $<

$(BUILD)/libwdrift-engine.a: $(ENGINE_OBJS)
	rm -f $@
	ar rcs $@ $^

# tests/gpu: the CUDA engine against the CPU engine; exits 77 with no device.
# Plain C against CUDA's C runtime API header.
$(BUILD)/tests/gpu/test_gpu.o: ALL_CFLAGS += -I$(CUDA_INCDIR)
$(BUILD)/tests/test_gpu: $(BUILD)/tests/gpu/test_gpu.o $(BUILD)/libwdrift-engine.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(CUDA_LIBS) -lm

# tests/kernels: the CUDA kernels' bodies (cuda/kernel_bodies.h) run on the
# CPU by a SIMT emulator, against the CPU engine; plain C++17, no CUDA, so
# that make check runs it on every machine. clang++ beside clang (check-asan).
$(BUILD)/tests/kernels/test_kernels.o: tests/kernels/test_kernels.cc $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(KERNEL_CXX) -std=c++17 $(CFLAGS) -MMD -MP -Wall -Wextra -Ilib -Icuda -c -o $@ $<
$(KERNEL_TEST): $(BUILD)/tests/kernels/test_kernels.o $(BUILD)/libwdrift.so
	$(KERNEL_CXX) $(CFLAGS) $(LDFLAGS) -o $@ $< -L$(BUILD) -lwdrift -lm -Wl,-rpath,'$$ORIGIN/..'

# Kernel lab (cuda/lab/): variants of a kernel, checked, then timed.
$(BUILD)/lab/%: cuda/lab/%.cu cuda/kernels.cuh
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Icuda -o $@ $<

$(BUILD)/bench-gpu: bench/bench_gpu.cu $(BUILD)/libwdrift-engine.a
	$(NVCC) $(NVCCFLAGS) -Ilib -Icuda -o $@ $^ -lcudart_static

# -z defs: a symbol the library needs and no library it links defines (one
# of libhwy's, from a Highway newer than sort_vq.cc knows) fails here, not
# at a user's `import wdrift`. Not under a sanitizer, whose runtime the
# program brings, not the library.
LIB_ZDEFS := $(if $(findstring -fsanitize=,$(CFLAGS)),,-Wl,-z,defs)
$(BUILD)/libwdrift.so: $(LIB_OBJS)
	$(CC) $(CFLAGS) $(LDFLAGS) -shared -Wl,-soname,libwdrift.so $(LIB_ZDEFS) -o $@ $^ $(LIB_LIBS) $(CUDA_LIBS) -lm -lpthread

$(CKPT_A): $(CKPT_OBJS)
	rm -f $@
	ar rcs $@ $^

# The CLI includes no daemon header: what it shares with wdriftd is in common/.
$(BUILD)/client/%.o: ALL_CFLAGS += -Icommon
$(BUILD)/common/%.o: ALL_CFLAGS += -Icommon

$(BUILD)/common/default_yaml.c: config/wdrift.yaml
	@mkdir -p $(dir $@)
	{ echo '/* Generated from config/wdrift.yaml by the Makefile. */'; \
	  echo 'const char wd_config_default_yaml[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/\t"/' -e 's/$$/\\n"/' $<; echo ';'; } >$@.tmp
	mv $@.tmp $@

$(BUILD)/common/default_yaml.o: $(BUILD)/common/default_yaml.c $(FLAGS_STAMP)
	$(CC) $(ALL_CFLAGS) -include common/config.h -c -o $@ $<

# The CLI reads the daemon's config for its endpoints, and the drift log in its format.
$(BUILD)/wdrift: $(CLI_OBJS) $(COMMON_OBJS) $(CKPT_A) $(BUILD)/libwdrift.so $(HDF5_DEPS)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(CLI_OBJS) $(COMMON_OBJS) $(CKPT_A) -L$(BUILD) -lwdrift \
		$(PKG_LIBS) $(DAEMON_LIBS) -lm $(RPATH)

$(BUILD)/daemon/%.o: ALL_CFLAGS += -Idaemon -Icommon
$(BUILD)/wdriftd: $(DAEMON_OBJS) $(CKPT_A) $(BUILD)/libwdrift.so $(HDF5_DEPS)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(DAEMON_OBJS) $(CKPT_A) -L$(BUILD) -lwdrift $(PKG_LIBS) $(DAEMON_LIBS) -lm $(RPATH)

$(BUILD)/wdrift-bench-ingest: $(BUILD)/bench/bench_ingest.o $(BUILD)/libwdrift.so
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< -L$(BUILD) -lwdrift $(PKG_LIBS) $(DAEMON_LIBS) -lm $(RPATH)

$(BUILD)/wdrift-bench: $(BUILD)/bench/bench_engine.o $(BUILD)/libwdrift.so
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< -L$(BUILD) -lwdrift -lm $(RPATH)

# The same with Highway's vqsort as a peer (bench/vqsort_peer.cc): built by
# `make bench` only, so that nothing else needs libhwy_contrib or C++.
$(BUILD)/bench/bench_engine_vq.o: bench/bench_engine.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -DWD_VQSORT_PEER -c -o $@ $<
$(BUILD)/bench/vqsort_peer.o: bench/vqsort_peer.cc
	@mkdir -p $(dir $@)
	$(KERNEL_CXX) -O3 -g -std=c++17 -pthread -c -o $@ $<
$(BUILD)/wdrift-bench-vqsort: $(BUILD)/bench/bench_engine_vq.o $(BUILD)/bench/vqsort_peer.o $(BUILD)/libwdrift.so
	$(KERNEL_CXX) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(BUILD) -lwdrift -lhwy_contrib -lhwy -lm -pthread $(RPATH)

# A Llama-shaped snapshot (291 tensors) against a prepared baseline, beside memcpy (issue 16).
$(BUILD)/wdrift-bench-snapshot: $(BUILD)/bench/bench_snapshot.o $(BUILD)/libwdrift.so
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< -L$(BUILD) -lwdrift -lm $(RPATH)

# The checkpoint reader in resource-limited children against the in-process one (docs/performance.md).
$(BUILD)/wdrift-bench-ckpt: $(BUILD)/bench/bench_ckpt.o $(CKPT_A) $(BUILD)/libwdrift.so $(HDF5_DEPS)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(CKPT_A) -L$(BUILD) -lwdrift $(PKG_LIBS) -lm $(RPATH)

# test_threads asserts that a build with vqsort has it on a CPU with AVX2.
$(BUILD)/tests/unit/test_threads.o: ALL_CFLAGS += -DWD_VQSORT=$(VQSORT)
$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(CKPT_A) $(BUILD)/libwdrift.so $(HDF5_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CKPT_A) -L$(BUILD) -lwdrift $(PKG_LIBS) -lm -Wl,-rpath,'$$ORIGIN/..'

# Unit tests of daemon modules link those modules too.
$(BUILD)/tests/test_wal: $(BUILD)/daemon/wal.o $(BUILD)/daemon/logging.o
$(BUILD)/tests/unit/test_wal.o: ALL_CFLAGS += -Idaemon
$(BUILD)/tests/test_kept_bufs: $(BUILD)/daemon/kept_bufs.o
$(BUILD)/tests/unit/test_kept_bufs.o: ALL_CFLAGS += -Idaemon
$(BUILD)/tests/test_name_match: $(BUILD)/daemon/name_match.o
$(BUILD)/tests/unit/test_name_match.o: ALL_CFLAGS += -Idaemon
$(BUILD)/tests/test_commit_ranks: $(BUILD)/daemon/commit_ranks.o
$(BUILD)/tests/unit/test_commit_ranks.o: ALL_CFLAGS += -Idaemon -Icommon
RECORD_OBJS := $(BUILD)/daemon/records.o $(BUILD)/daemon/identity.o $(BUILD)/daemon/result_batch.o
$(BUILD)/tests/test_records: $(RECORD_OBJS)
$(BUILD)/tests/test_spool_index: $(BUILD)/daemon/spool_index.o $(RECORD_OBJS) $(BUILD)/daemon/wal.o \
	$(BUILD)/daemon/logging.o
$(BUILD)/tests/test_workq: $(BUILD)/daemon/workq.o $(BUILD)/daemon/logging.o
$(BUILD)/tests/unit/test_records.o $(BUILD)/tests/unit/test_spool_index.o \
	$(BUILD)/tests/unit/test_workq.o: ALL_CFLAGS += -Idaemon -Icommon
$(BUILD)/tests/test_driftlog: $(COMMON_OBJS)
$(BUILD)/tests/unit/test_driftlog.o: ALL_CFLAGS += -Icommon
$(BUILD)/tests/test_run_reruns: $(BUILD)/daemon/state.o $(BUILD)/daemon/identity.o $(BUILD)/daemon/commit_ranks.o \
	$(BUILD)/daemon/kept_bufs.o $(BUILD)/daemon/names.o \
	$(BUILD)/daemon/logging.o
$(BUILD)/tests/unit/test_run_reruns.o: ALL_CFLAGS += -Idaemon -Icommon
$(BUILD)/tests/test_names: $(BUILD)/daemon/names.o
$(BUILD)/tests/unit/test_names.o: ALL_CFLAGS += -Idaemon
$(BUILD)/tests/test_alerts: $(BUILD)/daemon/alerts.o $(BUILD)/daemon/alert_instances.o $(BUILD)/daemon/logging.o $(CONFIG_OBJS) $(RECORD_OBJS)
$(BUILD)/tests/unit/test_alerts.o: ALL_CFLAGS += -Idaemon -Icommon
$(BUILD)/tests/test_config: $(CONFIG_OBJS)
$(BUILD)/tests/unit/test_config.o: ALL_CFLAGS += -Icommon
-include $(BUILD)/tests/unit/test_config.d

# Fuzz targets (fuzz/, docs/reliability.md), one per parser. `make check`
# replays the checked-in corpus through each (test_fuzz_*, any compiler);
# `make fuzz` runs them under libFuzzer with ASan and UBSan (clang).
DAEMON_LIB_OBJS = $(filter-out $(BUILD)/daemon/main.o,$(DAEMON_OBJS))
$(BUILD)/fuzz/%.o: ALL_CFLAGS += -Idaemon -Icommon -Ifuzz
$(BUILD)/fuzz/replay_%.o: fuzz/replay.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -DFUZZ_CORPUS='"fuzz/corpus/$*"' -c -o $@ $<
$(FUZZ_REPLAY_BINS): $(BUILD)/tests/test_fuzz_%: $(BUILD)/fuzz/fuzz_%.o $(BUILD)/fuzz/replay_%.o \
		$(DAEMON_LIB_OBJS) $(CKPT_A) $(BUILD)/libwdrift.so $(HDF5_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CKPT_A) -L$(BUILD) -lwdrift $(PKG_LIBS) $(DAEMON_LIBS) \
		-lm -Wl,-rpath,'$$ORIGIN/..'
-include $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%.d)

# make fuzz: every target for FUZZ_RUNS executions (or FUZZ_SECONDS each),
# from a copy of its corpus, so that what it finds does not pollute fuzz/corpus.
# checkpoint is left out by default: libhdf5 itself crashes or hangs on an
# input in every few thousand (fuzz/hdf5-crashes/, fuzz/hdf5-hangs/), so it
# runs in fork mode, at hundreds of inputs a second; FUZZ_RUN=checkpoint runs it.
FUZZ_RUN ?= wire control config
FUZZ_RUNS ?= 10000000
FUZZ_SECONDS ?= 0
FUZZ_BUILD := $(BUILD)/fuzz-asan
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# The environment and flags of a target's run. checkpoint runs in fork mode,
# so that it goes on past the inputs on which libhdf5 itself hangs or crashes;
# fuzz/triage.sh then replays each one it kept, moves those whose fault is
# inside libhdf5 to hdf5-checkpoint/, and fails the run on any other
# (docs/reliability.md); libhdf5's own leaks are suppressed
# (fuzz/lsan-hdf5.supp); an allocation over 1 GiB fails, as under the
# sandbox's memory limit, instead of aborting; a smaller quarantine makes the
# leak checks that libhdf5's leaks trigger cheaper.
FUZZ_ENV := ASAN_OPTIONS=detect_leaks=1
FUZZ_FLAGS := -timeout=10
FUZZ_ENV_checkpoint := LSAN_OPTIONS=suppressions=$(CURDIR)/fuzz/lsan-hdf5.supp \
	ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:max_allocation_size_mb=1024:malloc_context_size=2:quarantine_size_mb=32
FUZZ_FLAGS_checkpoint := -timeout=2 -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1
fuzz: deps
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=clang CUDA=0 \
		CFLAGS="-g -O1 $(FUZZ_SAN) -fsanitize=fuzzer-no-link" $(FUZZ_RUN:%=$(FUZZ_BUILD)/fuzz-%)
	@for t in $(FUZZ_RUN); do \
		rm -rf $(FUZZ_BUILD)/corpus-$$t $(FUZZ_BUILD)/crash-$$t $(FUZZ_BUILD)/hdf5-$$t; \
		mkdir -p $(FUZZ_BUILD)/corpus-$$t $(FUZZ_BUILD)/crash-$$t || exit 1; \
		cp fuzz/corpus/$$t/* $(FUZZ_BUILD)/corpus-$$t/ || exit 1; \
		echo "fuzz: $$t: $(FUZZ_RUNS) runs"; \
		case $$t in checkpoint) env="$(FUZZ_ENV_checkpoint)" flags="$(FUZZ_FLAGS_checkpoint)" ;; \
			*) env="$(FUZZ_ENV)" flags="$(FUZZ_FLAGS)" ;; esac; \
		env $$env $(FUZZ_BUILD)/fuzz-$$t -runs=$(FUZZ_RUNS) -max_total_time=$(FUZZ_SECONDS) \
			$$flags -rss_limit_mb=2048 -print_final_stats=1 \
			-artifact_prefix=$(FUZZ_BUILD)/crash-$$t/ $(FUZZ_BUILD)/corpus-$$t >$(FUZZ_BUILD)/fuzz-$$t.log 2>&1; \
		rc=$$?; grep -E '^(#[0-9]+ +DONE|stat::|==[0-9]+==ERROR|SUMMARY)' $(FUZZ_BUILD)/fuzz-$$t.log; \
		grep -E '^#[0-9]+: cov' $(FUZZ_BUILD)/fuzz-$$t.log | tail -n 1; \
		if [ $$t = checkpoint ]; then \
			env $$env sh fuzz/triage.sh $(FUZZ_BUILD)/fuzz-$$t $(FUZZ_BUILD)/crash-$$t \
				$(FUZZ_BUILD)/hdf5-$$t || exit 1; \
		elif [ $$rc -ne 0 ] || [ -n "$$(ls $(FUZZ_BUILD)/crash-$$t)" ]; then \
			echo "fuzz: $$t: failed (exit $$rc): $(FUZZ_BUILD)/fuzz-$$t.log, $(FUZZ_BUILD)/crash-$$t/"; exit 1; fi; \
	done
$(BUILD)/fuzz-%: $(BUILD)/fuzz/fuzz_%.o $(DAEMON_LIB_OBJS) $(LIB_OBJS) $(CKPT_OBJS)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -o $@ $(sort $(filter %.o,$^)) $(PKG_LIBS) $(DAEMON_LIBS) -lm

# Every test that needs no GPU: unit tests, CLI tests, the scipy cross-check.
check: deps
	@$(MAKE) --no-print-directory all
	@PYTHON=$(PYTHON) BUILD=$(BUILD) sh tests/run.sh

# The same tests against a build under ASan and UBSan (clang, CPU only), in
# its own directory. The tests run from the sub-make, so that the makes they
# start themselves (t30, t55) see its CC and CFLAGS and do not rebuild it
# with others. tests/run.sh sees the sanitizer in $(ASAN_BUILD)/.flags, fails
# a test after which a report appears, and preloads the ASan runtime into
# Python only (tests/asan/sitecustomize.py).
ASAN_BUILD := $(BUILD)/asan
check-asan: deps
	@$(MAKE) --no-print-directory BUILD=$(ASAN_BUILD) CC=clang CUDA=0 \
		CFLAGS="-g -O1 $(FUZZ_SAN)" LDFLAGS= test

# The C unit tests and the corpus replays (test_*, test_gpu aside), each under
# valgrind memcheck, built in their own directory with no CUDA (memcheck does
# not know CUDA's driver). vqsort runs there on AVX2: valgrind's CPUID
# announces no AVX-512, and sort_vq.cc asks CPUID itself. (Linked with
# libhwy, whose constructor runs rdtscp, every test died of SIGILL at load
# on a VM whose CPU does not announce it, 2026-11-28.) tests/run.sh turns each log's
# error summary into a TAP line, so an error or a definite leak fails the test.
# Leaks that are only possible or reachable are not counted. Forked children
# run silent: those that exec (system()'s sh) are not followed anyway, and the
# rest are test_ckpt_sandbox's reader children, which it kills on purpose
# (deadlines, signals), whose reads test_checkpoint checks in-process, and
# whose RLIMIT_FSIZE = 0 valgrind's own log writes would trip. Suppressions,
# if ever needed, go in tests/valgrind.supp, each saying why it is not ours.
VALGRIND ?= valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite \
	--errors-for-leak-kinds=definite --track-origins=yes --error-exitcode=99 \
	--child-silent-after-fork=yes
VALGRIND_BUILD := $(BUILD)/memcheck
.PHONY: unit-bins
unit-bins: $(UNIT_BINS) $(KERNEL_TEST) $(FUZZ_REPLAY_BINS)
check-valgrind: deps
	@$(MAKE) --no-print-directory BUILD=$(VALGRIND_BUILD) CUDA=0 unit-bins
	@WDRIFT_VALGRIND="$(VALGRIND)" BUILD=$(VALGRIND_BUILD) sh tests/run.sh

# No deps: the GPU machines have nvcc but no apt; these need only CUDA.
check-gpu:
	@$(MAKE) --no-print-directory CUDA=1 $(BUILD)/tests/test_gpu
	@$(BUILD)/tests/test_gpu; rc=$$?; \
	if [ $$rc -eq 77 ]; then echo "check-gpu: SKIP: no usable CUDA device (see above)"; exit 0; fi; exit $$rc

# publish() of CUDA tensors through a real wdriftd: values bit for bit, the
# copies ordered before the next step's kernels (exits 77 with no CUDA torch).
check-gpu-publish: all
	@BUILD=$(BUILD) $(PYTHON) tests/gpu/t_publish_cuda.py; rc=$$?; \
	if [ $$rc -eq 77 ]; then echo "check-gpu-publish: SKIP: torch sees no CUDA device"; exit 0; fi; exit $$rc

bench-gpu:
	@$(MAKE) --no-print-directory CUDA=1 $(BUILD)/bench-gpu
	@$(BUILD)/bench-gpu $(BENCH_GPU_ARGS)
	@if $(PYTHON) -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; \
	then $(PYTHON) bench/bench_gpu_torch.py; else echo "bench-gpu: no torch with CUDA: torch rows skipped"; fi

test: all
	@PYTHON=$(PYTHON) BUILD=$(BUILD) sh tests/run.sh

demo: deps
	@$(MAKE) --no-print-directory all
	@PYTHON=$(PYTHON) BUILD=$(BUILD) sh scripts/demo.sh

demo-compare: deps
	@$(MAKE) --no-print-directory all
	@PYTHON=$(PYTHON) BUILD=$(BUILD) sh scripts/demo_compare.sh

bench-ingest: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) PYTHON=$(PYTHON) sh bench/bench_ingest.sh

bench-ckpt: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) PYTHON=$(PYTHON) sh bench/bench_ckpt.sh

# The whole `wdrift compare` process against scipy and the engine alone (issue 16)
.PHONY: bench-compare
bench-compare: deps
	@$(MAKE) --no-print-directory all
	@$(PYTHON) bench/bench_compare.py --build $(BUILD)

# One step of a Llama-shaped study (7B / 4, large tensors) through a real
# wdriftd, compute.threads 1 against every core (issue 16); BENCH_LAYERS,
# BENCH_STEPS, BENCH_DTYPE=bf16, BUILD another build ("before")
.PHONY: bench-step
bench-step: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) $(PYTHON) bench/bench_step.py

# BENCH_TENSORS=2500,5000 picks the sizes, BUILD another build ("before")
.PHONY: bench-drift-query
bench-drift-query: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) $(PYTHON) bench/bench_drift_query.py

# A good publisher's ack wait and status latency under each attack of issue 11
.PHONY: bench-attack
bench-attack: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) PYTHON=$(PYTHON) $(PYTHON) bench/bench_attack.py

# One thread, then the cores available (0), for bf16 and fp32: one JSON line each.
.PHONY: bench-snapshot
bench-snapshot: deps
	@$(MAKE) --no-print-directory all
	@for dt in bf16 f32; do for t in 1 0; do $(BUILD)/wdrift-bench-snapshot $$dt $$t 5 || exit 1; done; done

bench: deps
	@$(MAKE) --no-print-directory all $(BUILD)/wdrift-bench-vqsort
	@$(PYTHON) bench/bench.py --wdrift-bench $(BUILD)/wdrift-bench --vqsort $(BUILD)/wdrift-bench-vqsort

# How long Publisher.publish() blocks the caller, against torch's clone (CPU)
# and a synchronous .cpu() (GPU, when torch sees one), with a real wdriftd.
bench-publish: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) $(PYTHON) bench/bench_publish.py

# The Python package (python/wdrift, its modules only) goes where PREFIX's
# Python looks: Debian's python3.X searches PREFIX/lib/python3.X/dist-packages
# for PREFIX=/usr/local and /usr (not PREFIX/lib/python3/dist-packages under
# /usr/local); for another PREFIX, PYTHONPATH names it (docs/publishing.md,
# Install). From there the package finds the library as ../../../libwdrift.so,
# PREFIX/lib (python/wdrift/_lib.py); a PYTHONDIR set outside PREFIX/lib/X/Y
# needs WDRIFT_LIB or ldconfig instead. Evaluated only when used.
PYVER      = $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
PYTHONDIR ?= $(PREFIX)/lib/python$(PYVER)/dist-packages

# What install creates is listed in MANIFEST (the directories that were not
# there), so that uninstall removes exactly what install made: the files,
# the config unless edited (scripts/install.sh compares it with
# config/wdrift.system.yaml), then those directories when empty.
# CONFDIR: where the config goes; the installed programs find it there
# (PREFIX/etc/wdrift: docs/config.md, "Which file").
CONFDIR  ?= $(PREFIX)/etc/wdrift
MANIFEST := $(PREFIX)/share/wdrift/installed-dirs
INSTALL_SH := sh scripts/install.sh
# pkg-config's file, for the PREFIX it is installed in; the version is the header's.
$(BUILD)/wdrift.pc: lib/wdrift.pc.in lib/wdrift.h FORCE
	@mkdir -p $(dir $@)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e "s|@VERSION@|$$(sed -n 's/^#define WDRIFT_VERSION \"\(.*\)\"/\1/p' lib/wdrift.h)|" $< > $@

install: all $(BUILD)/wdrift.pc
	@case '$(PYTHONDIR)' in */lib/python/dist-packages) echo "install: $(PYTHON) does not run: set PYTHON, or PYTHONDIR"; exit 1 ;; esac
	@$(INSTALL_SH) dirs '$(DESTDIR)' '$(MANIFEST)' $(PREFIX)/share/wdrift $(PREFIX)/bin $(PREFIX)/lib \
		$(PREFIX)/lib/pkgconfig $(PREFIX)/include $(CONFDIR) $(PYTHONDIR)/wdrift
	install -m 755 $(BUILD)/wdrift $(DESTDIR)$(PREFIX)/bin/wdrift
	install -m 755 $(BUILD)/wdriftd $(DESTDIR)$(PREFIX)/bin/wdriftd
	install -m 755 $(BUILD)/libwdrift.so $(DESTDIR)$(PREFIX)/lib/libwdrift.so
	install -m 644 lib/wdrift.h $(DESTDIR)$(PREFIX)/include/wdrift.h
	install -m 644 $(BUILD)/wdrift.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/wdrift.pc
	@$(INSTALL_SH) config config/wdrift.system.yaml $(DESTDIR)$(CONFDIR)/wdrift.yaml
	install -m 644 python/wdrift/*.py $(DESTDIR)$(PYTHONDIR)/wdrift/

# The system service: the unit, and the config as /etc/wdrift/wdrift.yaml
# instead of PREFIX/etc/wdrift (one config, the unit's, which wdrift then
# finds too), with ipc:// endpoints under /run/wdrift, storage in
# /var/lib/wdrift and no study (config/wdrift.system.yaml).
UNITDIR ?= /etc/systemd/system
SYSCONFDIR ?= /etc
$(BUILD)/wdriftd.service: systemd/wdriftd.service.in FORCE
	@mkdir -p $(dir $@)
	sed -e 's|@BINDIR@|$(PREFIX)/bin|g' -e 's|/etc/wdrift/|$(SYSCONFDIR)/wdrift/|g' $< > $@

# The system config as installed (tests/integration/t57 installs it by hand).
$(BUILD)/wdrift.system.yaml: config/wdrift.system.yaml
	@mkdir -p $(dir $@)
	cp $< $@

install-system: CONFDIR = $(SYSCONFDIR)/wdrift
install-system: install $(BUILD)/wdriftd.service
	@$(INSTALL_SH) dirs '$(DESTDIR)' '$(MANIFEST)' $(UNITDIR)
	install -m 644 $(BUILD)/wdriftd.service $(DESTDIR)$(UNITDIR)/wdriftd.service
	@case '$(PREFIX)/' in /tmp/*|/var/tmp/*|/home/*|/root/*|/run/user/*) echo "warning: the unit runs $(PREFIX)/bin/wdriftd, which its PrivateTmp=yes and ProtectHome=yes hide from the service: it will not start; install-system with a PREFIX outside /tmp, /var/tmp, /home, /root and /run/user (the default /usr/local), or use make install and run wdriftd yourself" >&2 ;; esac
	@if [ -e '$(DESTDIR)$(PREFIX)/etc/wdrift/wdrift.yaml' ]; then echo "note: $(DESTDIR)$(PREFIX)/etc/wdrift/wdrift.yaml (from make install) is found before $(SYSCONFDIR)/wdrift/wdrift.yaml by wdrift and wdriftd without -c: remove it"; fi
	@echo "then: systemctl daemon-reload && systemctl enable --now wdriftd"

# The inverse of install and install-system. The package directory goes
# whole: with the __pycache__ its imports wrote. The unit, and the config
# in SYSCONFDIR beside it, go only if the unit runs this PREFIX's wdriftd:
# uninstalling a private PREFIX must not take the system install's.
uninstall:
	@case '$(PYTHONDIR)' in */lib/python/dist-packages) echo "uninstall: $(PYTHON) does not run: set PYTHON, or PYTHONDIR"; exit 1 ;; esac
	@unit='$(DESTDIR)$(UNITDIR)/wdriftd.service' conf='$(DESTDIR)$(SYSCONFDIR)/wdrift/wdrift.yaml'; \
	if [ -e "$$unit" ] && grep -qF 'ExecStart=$(PREFIX)/bin/wdriftd ' "$$unit"; then \
		echo "uninstall: stop the service first if it runs: systemctl disable --now wdriftd"; \
		echo "rm -f $$unit"; rm -f "$$unit" || exit 1; \
		$(INSTALL_SH) remove-config config/wdrift.system.yaml "$$conf" || exit 1; \
	elif [ -e "$$unit" ]; then \
		echo "uninstall: kept $$unit and $$conf: the unit runs another install's wdriftd ($$(grep -m1 '^ExecStart=' "$$unit")), not $(PREFIX)'s"; \
	elif [ -e "$$conf" ]; then \
		echo "uninstall: kept $$conf: no $$unit says which install it belongs to"; \
	fi
	rm -f $(DESTDIR)$(PREFIX)/bin/wdrift $(DESTDIR)$(PREFIX)/bin/wdriftd $(DESTDIR)$(PREFIX)/lib/libwdrift.so \
		$(DESTDIR)$(PREFIX)/include/wdrift.h $(DESTDIR)$(PREFIX)/lib/pkgconfig/wdrift.pc
	rm -rf $(DESTDIR)$(PYTHONDIR)/wdrift
	@$(INSTALL_SH) remove-config config/wdrift.system.yaml $(DESTDIR)$(PREFIX)/etc/wdrift/wdrift.yaml
	@$(INSTALL_SH) remove-dirs '$(DESTDIR)' '$(MANIFEST)'

clean:
	rm -rf $(BUILD)

-include $(LIB_OBJS:.o=.d) $(CKPT_OBJS:.o=.d) $(CLI_OBJS:.o=.d) $(DAEMON_OBJS:.o=.d) $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/unit/%.d) $(BUILD)/tests/gpu/test_gpu.d $(BUILD)/tests/kernels/test_kernels.d
