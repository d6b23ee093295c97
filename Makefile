# tfm — one C binary that trains and runs the Transformer.
#
#   make            build ./tfm (-O3 -march=native; override: make ARCH=x86-64-v3)
#   make deps       install the Debian packages the build and tests need
#   make test       run the whole test suite (make test T=bleu: the tests whose name contains "bleu")
#   make asan       build and run the suite under ASan + UBSan (into build-asan/)
#   make fuzz       run each libFuzzer target (tests/fuzz) FUZZ_TIME seconds under ASan + UBSan
#   make demo       the README's main job: train a small model, translate, score
#   make install PREFIX=/usr/local
#   make MPI=0      build without OpenMPI (no `mpirun -np N tfm train`; see src/dist.h)
#   make DNNL=0     build without oneDNN (bf16 products on our own kernel; see src/gemm_dnnl.h)
#
# BLIS: Debian's libblis-openmp-dev puts blis.h under /usr/include/x86_64-linux-gnu.
# Another BLIS: make BLIS_CFLAGS=-I/opt/blis/include BLIS_LIBS="-L/opt/blis/lib -lblis"

CC       ?= gcc
ARCH     ?= native
OPT      ?= -O3
BUILD    ?= build
PREFIX   ?= /usr/local
BLIS_CFLAGS ?= -I/usr/include/x86_64-linux-gnu
BLIS_LIBS   ?= -lblis
SANITIZE ?=
MPI      ?= 1
DNNL     ?= 1

# OpenMPI (Debian libopenmpi-dev): only dist.c (and dev/bench_dist.c) include mpi.h; every binary links it.
ifeq ($(MPI),1)
MPI_CFLAGS := $(shell pkg-config --cflags ompi-c 2>/dev/null)
MPI_LIBS   := $(shell pkg-config --libs ompi-c 2>/dev/null)
MPI_CFLAGS += -DTFM_MPI
endif

# oneDNN (Debian libdnnl-dev): gemm_dnnl.c includes its header, and dispatch.c (the CPU as oneDNN sees it).
ifeq ($(DNNL),1)
DNNL_LIBS := -ldnnl
endif

# -fno-math-errno: sqrtf may not set errno (nothing reads it), so loops with a
# square root vectorise (Adam's update: src/optim.c); IEEE sqrt, same bits.
# -fno-trapping-math: nothing reads the FP exception flags, so gcc may compute
# both sides of `keep ? x * sc : 0` and select; without it every such loop
# (dropout, ReLU, its backward, Adam, the softmaxes) stays scalar with a branch
# an element. Each element's arithmetic is the same IEEE operations.
CFLAGS  := -std=c11 $(OPT) -march=$(ARCH) -fno-math-errno -fno-trapping-math -g -Wall -Wextra -fopenmp -D_GNU_SOURCE \
           $(BLIS_CFLAGS) $(shell pkg-config --cflags libutf8proc 2>/dev/null) $(SANITIZE) $(EXTRA_CFLAGS) \
           $(shell pkg-config --cflags libmicrohttpd 2>/dev/null)
LDLIBS  := $(BLIS_LIBS) $(shell pkg-config --libs libutf8proc 2>/dev/null || echo -lutf8proc) -linih -lz -lm -fopenmp $(MPI_LIBS) $(DNNL_LIBS) $(SANITIZE) \
           $(shell pkg-config --libs libmicrohttpd 2>/dev/null || echo -lmicrohttpd)

SRCS     := $(wildcard src/*.c)
OBJS     := $(SRCS:src/%.c=$(BUILD)/%.o)
LIB_OBJS := $(filter-out $(BUILD)/main.o,$(OBJS))
TEST_SRCS := $(wildcard tests/test_*.c)
TESTS    := $(TEST_SRCS:tests/%.c=$(BUILD)/%)
DEV_SRCS := $(wildcard dev/*.c)
DEV      := $(DEV_SRCS:dev/%.c=$(BUILD)/dev/%)

.PHONY: all deps test asan fuzz fuzz-build demo install clean tests
all: tfm

# copy then rename: works while ./tfm is running (a plain cp fails: text file busy)
tfm: $(BUILD)/tfm
	cp $< $@.tmp && mv -f $@.tmp $@

$(BUILD)/tfm: $(OBJS)
	$(CC) -o $@ $^ $(LDLIBS)

$(BUILD)/dist.o: CFLAGS += $(MPI_CFLAGS)
$(BUILD)/dev/bench_dist: CFLAGS += $(MPI_CFLAGS)
# dist.o is rebuilt when MPI changes (a stamp file named after it)
$(BUILD)/dist.o: $(BUILD)/mpi-$(MPI)

$(BUILD)/mpi-$(MPI): | $(BUILD)
	@if [ "$(MPI)" = 1 ] && [ -z "$(MPI_LIBS)" ]; then \
	  echo "OpenMPI not found (pkg-config ompi-c): run 'make deps', or build without MPI: make MPI=0" >&2; exit 1; fi
	rm -f $(BUILD)/mpi-* && touch $@

# dispatch.o too: it answers gemm_dnnl_built() and int8_onednn() for the choice of the bf16 route and int8 kernel
$(BUILD)/gemm_dnnl.o $(BUILD)/dispatch.o: CFLAGS += $(if $(filter 1,$(DNNL)),-DTFM_DNNL)
$(BUILD)/gemm_dnnl.o $(BUILD)/dispatch.o: $(BUILD)/dnnl-$(DNNL)

$(BUILD)/dev/bench_bf16: CFLAGS += $(if $(filter 1,$(DNNL)),-DTFM_DNNL)

$(BUILD)/dnnl-$(DNNL): | $(BUILD)
	@if [ "$(DNNL)" = 1 ] && [ ! -f /usr/include/oneapi/dnnl/dnnl.h ]; then \
	  echo "oneDNN not found (/usr/include/oneapi/dnnl/dnnl.h): run 'make deps', or build without it: make DNNL=0" >&2; exit 1; fi
	rm -f $(BUILD)/dnnl-* && touch $@

$(BUILD)/%.o: src/%.c src/*.h | $(BUILD)
	$(CC) $(CFLAGS) -c -o $@ $<

# -Werror=unused-function: a test function written but never RUN fails the build, not silently passes
$(BUILD)/test_%: tests/test_%.c tests/*.h $(LIB_OBJS) | $(BUILD)
	$(CC) $(CFLAGS) -Werror=unused-function -Isrc -o $@ $< $(LIB_OBJS) $(LDLIBS)

# dev/: tools the shell tests and benchmarks run (random models, the parity dump, the step server)
$(BUILD)/dev/%: dev/%.c tests/batch.h $(LIB_OBJS) | $(BUILD)
	@mkdir -p $(BUILD)/dev
	$(CC) $(CFLAGS) -Isrc -Itests -o $@ $< $(LIB_OBJS) $(LDLIBS)

$(BUILD):
	mkdir -p $(BUILD)

tests: $(TESTS) $(DEV)

deps:
	bash scripts/deps.sh

T ?=
test: tfm $(TESTS) $(DEV)
	TFM=$(CURDIR)/tfm TFM_BUILD=$(CURDIR)/$(BUILD) bash tests/run.sh $(T)

# The suite under AddressSanitizer + UndefinedBehaviorSanitizer, in build-asan/.
asan:
	$(MAKE) BUILD=build-asan OPT=-O1 SANITIZE="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" build-asan/tfm tests
	ASAN_OPTIONS=detect_leaks=1 TFM_ASAN=1 TFM=$(CURDIR)/build-asan/tfm TFM_BUILD=$(CURDIR)/build-asan bash tests/run.sh $(T)

# libFuzzer targets (clang): the library built with ASan + UBSan and coverage
# into build-fuzz/, one binary per tests/fuzz/fuzz_*.c; scripts/fuzz.sh runs
# each FUZZ_TIME seconds from its seeds (tests/fuzz/NAME/), FUZZ=name picks one.
FUZZ_CC     ?= clang
FUZZ_TIME   ?= 60
FUZZ        ?=
FUZZ_FLAGS  := -std=c11 -O1 -g -Wall -Wextra -march=$(ARCH) -fopenmp -D_GNU_SOURCE -Wno-psabi -Wno-pass-failed $(BLIS_CFLAGS) \
               $(shell pkg-config --cflags libutf8proc 2>/dev/null) -fno-omit-frame-pointer \
               -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_SRCS   := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS   := $(FUZZ_SRCS:tests/fuzz/%.c=build-fuzz/%)
FUZZ_OBJS   := $(LIB_OBJS:$(BUILD)/%.o=build-fuzz/%.o)

# the arithmetic kernels get ASan + UBSan but no coverage feedback (it would
# only slow the fuzzer down: they hold no input-dependent branches)
FUZZ_NO_COVERAGE := build-fuzz/ops.o build-fuzz/ops_infer.o build-fuzz/model.o build-fuzz/optim.o
build-fuzz/%.o: src/%.c src/*.h
	@mkdir -p build-fuzz
	$(FUZZ_CC) $(FUZZ_FLAGS) $(if $(filter $@,$(FUZZ_NO_COVERAGE)),,-fsanitize=fuzzer-no-link) -c -o $@ $<

build-fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $(FUZZ_OBJS)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer -Isrc -o $@ $< $(FUZZ_OBJS) $(LDLIBS)

fuzz-build: $(FUZZ_BINS)
.SECONDARY: $(FUZZ_OBJS)   # kept between runs (make would delete them as intermediates)

fuzz: fuzz-build
	bash scripts/fuzz.sh $(FUZZ_TIME) $(FUZZ)

demo: tfm
	bash scripts/demo.sh

install: tfm
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 tfm $(DESTDIR)$(PREFIX)/bin/tfm
	install -m 644 doc/tfm.1 $(DESTDIR)$(PREFIX)/share/man/man1/tfm.1

clean:
	rm -rf build build-asan build-fuzz tfm
