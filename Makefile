# tiercache: plain GNU make.
#
#   make            build build/tiercache
#   make SANITIZE=1 build build-san/tiercache with ASan + UBSan and the debug
#                   assertions (TC_ASSERT, src/util/assert.h)
#   make run        install dependencies, build, serve a default volume
#   make test       build both variants and run the whole test suite
#   make bench      benchmarks (docs/BENCHMARKS.md; SCALE=small, WORKLOADS="zipf git");
#                   never part of make test
#   make install    the binary, man pages, systemd units and bash completion
#                   under PREFIX (default /usr/local), and the configuration
#                   directory SYSCONFDIR/tiercache (0700), staged under
#                   DESTDIR; make uninstall removes exactly those files (and
#                   the configuration directory if it is empty)
#   make fuzz       libFuzzer harnesses in build-fuzz/, each run FUZZ_SECONDS
#                   (docs/FUZZING.md); not part of the builds of make or make
#                   test (tests/fuzz/fuzz.test builds them for itself)
#
# Dependencies are Debian packages; scripts/deps.sh installs the missing ones.

CC      ?= cc
CSTD    := -std=gnu11
WARN    := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wmissing-prototypes -Wstrict-prototypes
CPPFLAGS += -Iinclude -Isrc -D_GNU_SOURCE
LDLIBS  := -luring -lnbd -lgnutls -lpthread -lm

ifeq ($(SANITIZE),1)
  BUILD   ?= build-san
  CFLAGS  ?= -O1 -g -fno-omit-frame-pointer
  CFLAGS  += -fsanitize=address,undefined -fno-sanitize-recover=undefined
  # TC_ASSERT (src/util/assert.h) and the index audit at a clean close.
  CPPFLAGS += -DTC_DEBUG_ASSERTS
  LDFLAGS += -fsanitize=address,undefined
else
  BUILD   ?= build
  CFLAGS  ?= -O2 -g
endif
CFLAGS += $(CSTD) $(WARN) -MMD -MP

# Every C file under src/ is part of the one binary.
SRCS := $(sort $(wildcard src/*/*.c))
OBJS := $(SRCS:%.c=$(BUILD)/%.o)
LIB_OBJS := $(filter-out $(BUILD)/src/cli/main.o,$(OBJS))

# One focused program per feature under tests/unit/.
UNIT_SRCS := $(sort $(wildcard tests/unit/*.c))
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)

BENCH_SRCS := $(sort $(wildcard bench/*.c))
BENCH_BINS := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)

.PHONY: all deps test-deps run test bench clean man man-pages crash-test soak fuzz valgrind \
	install uninstall units

all: deps $(BUILD)/tiercache $(UNIT_BINS) $(BENCH_BINS)

deps:
	@scripts/deps.sh build

test-deps:
	@scripts/deps.sh test

$(BUILD)/tiercache: $(OBJS)
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Every compile waits for deps: with make -j on a fresh machine the
# compiles would otherwise start before the library headers are installed.
$(BUILD)/%.o: %.c | deps
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/%: tests/unit/%.c $(LIB_OBJS) | deps
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	@$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.o,$^) $(LDLIBS)

$(BUILD)/bench/%: bench/%.c | deps
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	@$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.o,$^) $(LDLIBS)

# A micro-benchmark of the checksum's code itself.
$(BUILD)/bench/crc32c_speed: $(BUILD)/src/util/crc32c.o $(BUILD)/src/util/crc32c_fold.o
# What a start after a crash reads: the whole log against the segments'
# first headers (src/engine/survey.h).
$(BUILD)/bench/survey_speed: $(LIB_OBJS)

# The main job on a built-in default: a 1 GiB origin file and a 256 MiB cache
# file under ./state, served on ./state/tiercache.sock until Ctrl-C.
run: all
	@scripts/run-default.sh

# The whole suite: the normal build, then the sanitizer build, each on every
# core.
test: test-deps
	@$(MAKE) --no-print-directory -j$(shell nproc) all
	@$(MAKE) --no-print-directory -j$(shell nproc) SANITIZE=1 all
	@tests/run

# Long crash-consistency run (issue: writeback never loses a flushed write).
N ?= 1000
crash-test: test-deps all
	@tests/run --build build --only crash --iterations $(N)

SECONDS ?= 300
soak: test-deps all
	@TC_TEST_TIMEOUT=$$(( $(SECONDS) + 300 )) tests/run --build build --only soak --seconds $(SECONDS)

bench: test-deps all
	@bench/run $(WORKLOADS)

# Each harness for FUZZ_SECONDS, stopping at the first crash (its input is
# saved in build-fuzz/crashes/); tests/fuzz/fuzz.mk has the rules.
FUZZ_SECONDS ?= 60
fuzz: test-deps
	@$(MAKE) --no-print-directory -f tests/fuzz/fuzz.mk run FUZZ_SECONDS=$(FUZZ_SECONDS)

valgrind: test-deps all
	@tests/run --valgrind

man:
	@man -l docs/tiercache.8

# One page per subcommand, made from its --help (tests/cli/manpages.test
# fails when they are behind the binary).
man-pages: $(BUILD)/tiercache
	@python3 scripts/man-pages.py $(BUILD)/tiercache docs >/dev/null

# ---- install ----
# Directories follow the GNU conventions; the units are generated with the
# binary's installed path, so they run what was installed.  Configuration
# stays in /etc whatever the PREFIX (as for every packaged daemon) unless
# SYSCONFDIR says otherwise.
PREFIX         ?= /usr/local
BINDIR         ?= $(PREFIX)/bin
MANDIR         ?= $(PREFIX)/share/man
DOCDIR         ?= $(PREFIX)/share/doc/tiercache
SYSCONFDIR     ?= /etc
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
BASHCOMPDIR    ?= $(PREFIX)/share/bash-completion/completions

UNIT_NAMES := tiercache@.service tiercache@.socket tiercache-swap-prefetch.service
UNITS      := $(UNIT_NAMES:%=$(BUILD)/contrib/%)
MAN_PAGES  := $(sort $(wildcard docs/*.8))

units: $(UNITS)

$(BUILD)/contrib/%: contrib/%.in Makefile
	@mkdir -p $(dir $@)
	@echo "  GEN     $@"
	@sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' $< > $@.tmp && mv $@.tmp $@

# The units are generated on every install: PREFIX may differ from the last.
install: $(BUILD)/tiercache
	@rm -f $(UNITS)
	@$(MAKE) --no-print-directory units
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(SYSTEMDUNITDIR) \
		$(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(DOCDIR)
	install -m 755 $(BUILD)/tiercache $(DESTDIR)$(BINDIR)/tiercache
	install -m 644 $(MAN_PAGES) $(DESTDIR)$(MANDIR)/man8/
	install -m 644 $(UNITS) $(DESTDIR)$(SYSTEMDUNITDIR)/
	install -m 644 contrib/tiercache.bash-completion $(DESTDIR)$(BASHCOMPDIR)/tiercache
	install -m 644 contrib/tiercache.conf.example README.md $(DESTDIR)$(DOCDIR)/
	@# The instances' configuration (it may hold key paths): made 0700 when
	@# missing, an existing one keeps the mode it was given.
	[ -d $(DESTDIR)$(SYSCONFDIR)/tiercache ] || install -d -m 700 $(DESTDIR)$(SYSCONFDIR)/tiercache

# Only the files install puts there, then the directories of our own.
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/tiercache
	rm -f $(MAN_PAGES:docs/%=$(DESTDIR)$(MANDIR)/man8/%)
	rm -f $(UNIT_NAMES:%=$(DESTDIR)$(SYSTEMDUNITDIR)/%)
	rm -f $(DESTDIR)$(BASHCOMPDIR)/tiercache
	rm -f $(DESTDIR)$(DOCDIR)/tiercache.conf.example $(DESTDIR)$(DOCDIR)/README.md
	-rmdir $(DESTDIR)$(DOCDIR) 2>/dev/null
	-rmdir $(DESTDIR)$(SYSCONFDIR)/tiercache 2>/dev/null

clean:
	rm -rf build build-san build-fuzz

-include $(OBJS:.o=.d) $(UNIT_BINS:%=%.d)
