# kvc Makefile: one binary, ./kvc.  `make`, `make test`, `make results`, `make install`, `make clean`.
# Quality-path numerics must match numpy: -ffp-contract=off, and never the fast-math or O-fast options.

CC      ?= cc
PREFIX  ?= /usr/local
DESTDIR ?=
PKGS    := openblas lapacke libcjson
PY      ?= /usr/bin/python3
BUILD   ?= build
BIN     ?= kvc
# XCFLAGS: extra flags for every compile and link (make sanitize and make fuzz set it)
XCFLAGS ?=

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS   := $(shell pkg-config --libs $(PKGS))

WARN    := -Wall -Wextra -Wshadow -Wconversion -Wno-sign-conversion -Wstrict-prototypes -Wmissing-prototypes
ifeq ($(WERROR),1)
WARN    += -Werror
endif
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_POSIX_C_SOURCE=200809L -ffp-contract=off -fno-fast-math $(WARN) $(PKG_CFLAGS) -Isrc -MMD -MP
CFLAGS  += $(XCFLAGS)
LDLIBS  += $(PKG_LIBS) -lm -lpthread
OPT_FLAGS := $(filter -O% -g%,$(CFLAGS))

SRC     := $(wildcard src/*/*.c)
OBJ     := $(SRC:%.c=$(BUILD)/%.o)
LIBOBJ  := $(filter-out $(BUILD)/src/cli/%,$(OBJ))
TESTSRC := $(wildcard tests/*.c)
TESTBIN := $(TESTSRC:tests/%.c=$(BUILD)/tests/%)

.PHONY: all test results clean install sanitize fuzz testbin bench models
all: $(BIN)

$(BIN): $(OBJ)
	$(CC) $(CFLAGS) -o $@ $(OBJ) $(LDFLAGS) $(LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

# Decode speed path: only kernels_avx2.c, kernels_kivi_avx2.c and kernels_ggml_avx2.c get the ISA flags (on x86);
# decode.c calls them after a runtime CPU check (cpuid + xgetbv) and falls back to the scalar _ref kernels. Never
# fast-math.
# -g1 (line tables): the unrolled intrinsics make full debug info slow to build. Under make sanitize the files
# keep ASan but not UBSan (both together take minutes on this one file; ASan still checks every vector load).
ifneq ($(filter x86_64 amd64 i386 i686,$(shell uname -m)),)
$(BUILD)/src/decode/kernels_avx2.o: CFLAGS += -mavx2 -mfma -mf16c -g1
$(BUILD)/src/decode/kernels_kivi_avx2.o: CFLAGS += -mavx2 -mfma -mf16c -g1
$(BUILD)/src/decode/kernels_ggml_avx2.o: CFLAGS += -mavx2 -mfma -mf16c -g1
$(BUILD)/src/decode/kernels_avx512.o: CFLAGS += -mavx512f -mavx512bw -mavx512vl -mavx2 -mfma -mf16c -g1
endif
ifneq ($(findstring -fsanitize,$(XCFLAGS)),)
$(BUILD)/src/decode/kernels_avx2.o: CFLAGS += -fno-sanitize=undefined
$(BUILD)/src/decode/kernels_kivi_avx2.o: CFLAGS += -fno-sanitize=undefined
$(BUILD)/src/decode/kernels_ggml_avx2.o: CFLAGS += -fno-sanitize=undefined
$(BUILD)/src/decode/kernels_avx512.o: CFLAGS += -fno-sanitize=undefined
endif
$(BUILD)/src/cli/bench.o: CFLAGS += -DKVC_BUILD_FLAGS='"$(OPT_FLAGS) -std=c11 -ffp-contract=off"'

# The commit kvc is built from, for kvc --version and the provenance of result files (src/cli/provenance.c):
# `git describe --always --dirty` (a -dirty suffix: tracked files differ from the commit), "unknown" outside a git
# checkout; `make KVC_COMMIT=...` sets it. provenance.o is rebuilt when it changes ($(BUILD)/commit.txt).
KVC_COMMIT ?= $(shell git describe --always --dirty 2>/dev/null || echo unknown)
$(BUILD)/commit.txt: FORCE
	@mkdir -p $(dir $@)
	@if [ "$$(cat $@ 2>/dev/null)" != '$(KVC_COMMIT)' ]; then echo '$(KVC_COMMIT)' > $@; fi
$(BUILD)/src/cli/provenance.o: $(BUILD)/commit.txt
$(BUILD)/src/cli/provenance.o: CFLAGS += -DKVC_COMMIT='"$(KVC_COMMIT)"' \
    -DKVC_BUILD_FLAGS='"$(OPT_FLAGS) -std=c11 -ffp-contract=off"'
.PHONY: FORCE
FORCE:

# C unit tests: each tests/NAME.c links every module but the commands (src/cli/).
$(BUILD)/tests/%: tests/%.c $(LIBOBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIBOBJ) $(LDFLAGS) $(LDLIBS)

# tests/run.sh runs the tests in its manifest, TEST_JOBS at a time (default: one per CPU; tests/README.md). Its last
# line is "N passed, N failed" (", K skipped" added when a check could not run here); it exits non-zero on any failure.
TEST_JOBS ?= $(shell getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
test: $(BIN) $(TESTBIN)
	PY=$(PY) tests/run.sh -j $(TEST_JOBS)

# make sanitize: kvc and the unit tests built with ASan+UBSan into build-san/ (build-san/kvc), then the whole
# suite run against them (tests/run.sh takes the binaries from $$KVC and $$KVC_TESTBIN; a leak or a sanitizer
# report makes a program exit 86, which fails its test), then valgrind memcheck of the normal ./kvc on the lesson
# and practice runs (tests/valgrind.sh; skipped when valgrind is not installed). Both run; either failing fails.
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
SAN_ENV   := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=86 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
sanitize: kvc
	$(MAKE) --no-print-directory BUILD=build-san BIN=build-san/kvc XCFLAGS="$(SAN_FLAGS)" build-san/kvc testbin
	status=0; \
	$(SAN_ENV) KVC=build-san/kvc KVC_TESTBIN=build-san/tests PY=$(PY) tests/run.sh || status=1; \
	sh tests/valgrind.sh ./kvc || status=1; \
	exit $$status

testbin: $(BIN) $(TESTBIN)

# make fuzz: libFuzzer targets (clang, ASan+UBSan) in build-fuzz/, each run for FUZZ_SECONDS; see tests/fuzz/README.md.
FUZZ_SECONDS ?= 60
FUZZ_CC      ?= clang
FUZZ_TARGETS := config npy safetensors results
fuzz:
	$(MAKE) --no-print-directory CC=$(FUZZ_CC) BUILD=build-fuzz BIN=build-fuzz/kvc \
	    XCFLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
	    $(FUZZ_TARGETS:%=build-fuzz/fuzz/fuzz_%)
	sh tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The fuzz targets link an archive of the library modules, so the linker takes only what they call; eval/bench.c is
# not even compiled for them. (src/decode/ is: the results reader names the output columns, src/eval/evaluate.c,
# whose object also holds the calls into the decode timing.)
FUZZ_LIBOBJ := $(filter-out $(BUILD)/src/eval/bench.o,$(LIBOBJ))
$(BUILD)/libkvc-fuzz.a: $(FUZZ_LIBOBJ)
	rm -f $@
	ar rcs $@ $(FUZZ_LIBOBJ)
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_targets.c $(BUILD)/libkvc-fuzz.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -o $@ $< $(BUILD)/libkvc-fuzz.a $(LDFLAGS) $(LDLIBS)

# make bench: the decode-speed benchmark at full size (timing targets live here, never in make test);
# writes results/bench.csv and results/bench.txt (machine description at the top; BENCH_ARGS adds options), and
# results/run-timing.txt (kvc run's decode_ns / decode_speedup on configs/realistic.json and configs/methods.json),
# and results/bench-quality.txt (kvc run against numpy on the lesson's experiments at 65536 x 128: wall, CPU, RSS),
# and results/bench-kernels.txt (tests/bench_kernels.c: the key and value kernels per cached row, in L2 and from
# memory, beside the memory floor: where a grouped-query step's time goes), and results/bench-insns.txt
# (tests/count_insns.c: the instructions each kernel executes per cached row, counted by single-stepping it).
bench: $(BIN) $(BUILD)/tests/bench_kernels $(BUILD)/tests/count_insns
	KVC_BENCH_KERNELS=$(BUILD)/tests/bench_kernels KVC_COUNT_INSNS=$(BUILD)/tests/count_insns scripts/bench.sh $(BENCH_ARGS)
	scripts/bench-run.sh
	scripts/bench-quality.sh

# make models: trains the shipped models models/lm (byte-level LM on the Debian Administrator's Handbook, from the
# Debian package debian-handbook) and models/recall (multi-query associative recall) with python3-torch on the CPU
# (2 threads, each under 30 minutes; the data, seed and command land in models/*/README.md and train.log). Not part
# of make test. scripts/train_lm.py --smoke and scripts/train_recall.py --smoke run tiny versions in seconds.
models:
	$(PY) scripts/train_lm.py --out models/lm
	$(PY) scripts/train_recall.py --out models/recall

# Regenerates every committed file under results/ from the tool itself.
results: kvc
	scripts/make-results.sh

install: kvc
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 kvc $(DESTDIR)$(PREFIX)/bin/kvc
	install -m 644 man/kvc.1 $(DESTDIR)$(PREFIX)/share/man/man1/kvc.1
	install -d $(DESTDIR)$(PREFIX)/share/bash-completion/completions
	install -m 644 scripts/kvc-completion.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/kvc

clean:
	rm -rf build build-san build-fuzz kvc

-include $(OBJ:.o=.d) $(TESTBIN:=.d)
