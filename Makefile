# kvc Makefile: one binary, ./kvc.  `make`, `make test`, `make results`, `make install`, `make clean`.
# Quality-path numerics must match numpy: -ffp-contract=off, never -ffast-math / -Ofast.

CC      ?= cc
PREFIX  ?= /usr/local
DESTDIR ?=
PKGS    := openblas lapacke libcjson
PY      ?= /usr/bin/python3

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS   := $(shell pkg-config --libs $(PKGS))

WARN    := -Wall -Wextra -Wshadow -Wconversion -Wno-sign-conversion -Wstrict-prototypes -Wmissing-prototypes
ifeq ($(WERROR),1)
WARN    += -Werror
endif
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_POSIX_C_SOURCE=200809L -ffp-contract=off -fno-fast-math $(WARN) $(PKG_CFLAGS) -Isrc -MMD -MP
LDLIBS  += $(PKG_LIBS) -lm

SRC     := $(wildcard src/*.c src/methods/*.c)
OBJ     := $(SRC:%.c=build/%.o)
LIBOBJ  := $(filter-out build/src/main.o,$(OBJ))
TESTSRC := $(wildcard tests/*.c)
TESTBIN := $(TESTSRC:tests/%.c=build/tests/%)

.PHONY: all test results clean install
all: kvc

kvc: $(OBJ)
	$(CC) $(CFLAGS) -o $@ $(OBJ) $(LDFLAGS) $(LDLIBS)

build/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

# C unit tests: each tests/NAME.c links every module but main.
build/tests/%: tests/%.c $(LIBOBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIBOBJ) $(LDFLAGS) $(LDLIBS)

# The runner's last line is "N passed, N failed"; it exits non-zero on any failure.
test: kvc $(TESTBIN)
	PY=$(PY) tests/run.sh

# Regenerates every committed file under results/ from the tool itself.
results: kvc
	scripts/make-results.sh

install: kvc
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 kvc $(DESTDIR)$(PREFIX)/bin/kvc
	install -m 644 man/kvc.1 $(DESTDIR)$(PREFIX)/share/man/man1/kvc.1

clean:
	rm -rf build kvc

-include $(OBJ:.o=.d) $(TESTBIN:=.d)
