# The libFuzzer harnesses (docs/FUZZING.md), built apart from everything
# else: clang with -fsanitize=fuzzer,address,undefined, objects and
# programs in build-fuzz/.  The top-level Makefile calls this file for
# `make fuzz`; tests/fuzz/fuzz.test calls it for `make test`.
#
#   make -f tests/fuzz/fuzz.mk            build the harnesses
#   make -f tests/fuzz/fuzz.mk run        build, then run each for FUZZ_SECONDS
#   make -f tests/fuzz/fuzz.mk replay     run each over its corpus and regressions once
#   make -f tests/fuzz/fuzz.mk coverage   line coverage of the parsers by the corpora
#
# A run stops at the first crash; the input that caused it is saved as
# build-fuzz/crashes/HARNESS/crash-... (see docs/FUZZING.md to turn it into
# a regression).  Every libFuzzer invocation here names its artifact
# directory: without -artifact_prefix libFuzzer writes crash-*, leak-*,
# timeout-* and oom-* files into the current directory, the source tree.

FUZZ_CC      ?= clang
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 60
# Where each run keeps the inputs it finds (one folder per harness).
FUZZ_CORPUS  ?= $(FUZZ_BUILD)/corpus
# Extra libFuzzer options for every run, e.g. FUZZ_FLAGS='-jobs=2 -workers=2'.
FUZZ_FLAGS   ?=
# Where each run's and replay's log goes (HARNESS.log, HARNESS.replay.log).
FUZZ_LOGDIR  ?= $(FUZZ_BUILD)

CSTD      := -std=gnu11
WARN      := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wmissing-prototypes -Wstrict-prototypes
SANITIZE  := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FCPPFLAGS := -Iinclude -Isrc -Itests/fuzz -D_GNU_SOURCE
FCFLAGS   := -O1 -g -fno-omit-frame-pointer $(CSTD) $(WARN) $(SANITIZE) -fsanitize=fuzzer-no-link -MMD -MP
FLDFLAGS  := $(SANITIZE) -fsanitize=fuzzer
LIBS      := -luring -lnbd -lgnutls -lpthread -lm

HARNESSES := nbd_handshake nbd_transmission superblock chunk recovery trace statefiles

# What each harness links, besides its own tests/fuzz/fuzz_NAME.c.
UTIL := src/util/crc32c.c src/util/crc32c_fold.c src/util/log.c src/util/misc.c src/util/json.c
# The NBD harnesses run the real connection, handshake and transmission
# code over a simulated reactor and engine (tests/fuzz/nbd_sim.c), so they
# link neither the io_uring reactor nor the engine.  tls.c is linked
# because conn.c calls it, but the simulated server has TLS off.
NBD_SRCS := src/nbd/conn.c src/nbd/handshake.c src/nbd/transmission.c src/nbd/server.c src/nbd/fe.c \
            src/util/unixsock.c \
            src/nbd/tls.c src/trace/writer.c src/replay/shards.c src/replay/blockmap.c \
            tests/fuzz/nbd_sim.c $(UTIL)
SRCS_nbd_handshake    := $(NBD_SRCS)
SRCS_nbd_transmission := $(NBD_SRCS)
SRCS_superblock       := src/format/superblock.c $(UTIL)
SRCS_chunk            := src/format/chunk.c $(UTIL)
SRCS_trace            := src/trace/reader.c $(UTIL)
SRCS_statefiles       := src/format/statefile.c src/format/seqrec.c $(UTIL)
# Recovery runs the whole engine, reactor and devices included.
SRCS_recovery         := $(filter-out src/cli/main.c,$(sort $(wildcard src/*/*.c)))

# Largest input each harness is given (libFuzzer -max_len).
MAXLEN_nbd_handshake    := 16384
MAXLEN_nbd_transmission := 65536
MAXLEN_superblock       := 4096
MAXLEN_chunk            := 32776
MAXLEN_recovery         := 65536
MAXLEN_trace            := 8192
MAXLEN_statefiles       := 16384

DICT_nbd_handshake    := tests/fuzz/nbd.dict
DICT_nbd_transmission := tests/fuzz/nbd.dict
DICT_superblock       := tests/fuzz/format.dict
DICT_chunk            := tests/fuzz/format.dict
DICT_recovery         := tests/fuzz/format.dict
DICT_trace            := tests/fuzz/trace.dict
DICT_statefiles       := tests/fuzz/statefiles.dict

BINS := $(HARNESSES:%=$(FUZZ_BUILD)/fuzz_%)
$(foreach h,$(HARNESSES),$(eval OBJS_$(h) := $(patsubst %.c,$(FUZZ_BUILD)/obj/%.o,tests/fuzz/fuzz_$(h).c $(SRCS_$(h)))))

.PHONY: all run replay coverage
# Objects are kept between builds.
.SECONDARY:
all: $(BINS)

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(FUZZ_CC) $(FCPPFLAGS) $(FCFLAGS) -c -o $@ $<

.SECONDEXPANSION:
$(FUZZ_BUILD)/fuzz_%: $$(OBJS_$$*)
	@echo "  LD      $@"
	@$(FUZZ_CC) $(FLDFLAGS) -o $@ $^ $(LIBS)

# One harness for FUZZ_SECONDS.  New inputs go to FUZZ_CORPUS/NAME; the
# committed corpus and regressions are read, never written.
define run_one
	@mkdir -p $(FUZZ_CORPUS)/$(1) $(FUZZ_BUILD)/crashes/$(1) tests/fuzz/corpus/$(1) tests/fuzz/regressions/$(1)
	@echo "  FUZZ    $(1) for $(FUZZ_SECONDS) s"
	@$(FUZZ_BUILD)/fuzz_$(1) -max_total_time=$(FUZZ_SECONDS) -max_len=$(MAXLEN_$(1)) \
	    -dict=$(DICT_$(1)) -print_final_stats=1 -timeout=25 -rss_limit_mb=4096 \
	    -artifact_prefix=$(FUZZ_BUILD)/crashes/$(1)/ $(FUZZ_FLAGS) \
	    $(FUZZ_CORPUS)/$(1) tests/fuzz/corpus/$(1) tests/fuzz/regressions/$(1) \
	    >$(FUZZ_LOGDIR)/$(1).log 2>&1 || { tail -n 60 $(FUZZ_LOGDIR)/$(1).log; \
	    echo "fuzz: $(1) failed; the input is in $(FUZZ_BUILD)/crashes/$(1)/"; exit 1; }
	@grep -E '^#[0-9]+[[:space:]]+DONE' $(FUZZ_LOGDIR)/$(1).log | sed 's/^/          /' | grep . \
	    || { tail -n 20 $(FUZZ_LOGDIR)/$(1).log; echo "fuzz: $(1) did not run to its end"; exit 1; }

endef

# One target a harness, so that `make -j N run` fuzzes N harnesses at once
# (each still gets its FUZZ_SECONDS of wall time, on a core of its own).
RUNS := $(HARNESSES:%=run-%)
.PHONY: $(RUNS)
run: $(RUNS)
$(RUNS): run-%: all
	$(call run_one,$*)

# Every committed input once: no fuzzing, fails on the first crash.
define replay_one
	@mkdir -p tests/fuzz/corpus/$(1) tests/fuzz/regressions/$(1) $(FUZZ_BUILD)/crashes/$(1)
	@echo "  REPLAY  $(1)"
	@$(FUZZ_BUILD)/fuzz_$(1) -runs=0 -timeout=25 -rss_limit_mb=4096 \
	    -artifact_prefix=$(FUZZ_BUILD)/crashes/$(1)/ \
	    tests/fuzz/corpus/$(1) tests/fuzz/regressions/$(1) >$(FUZZ_LOGDIR)/$(1).replay.log 2>&1 \
	    || { tail -n 60 $(FUZZ_LOGDIR)/$(1).replay.log; exit 1; }

endef

replay: all
	$(foreach h,$(HARNESSES),$(call replay_one,$(h)))

# Line coverage: the harnesses built again with clang's source-based
# coverage (no sanitizers) in build-fuzz/cov/, run once over every input
# they have (FUZZ_CORPUS, the committed corpus and regressions), and
# llvm-cov's report for the sources each one is about.
COV      := $(FUZZ_BUILD)/cov
COVFLAGS := -O1 -g $(CSTD) $(WARN) -fprofile-instr-generate -fcoverage-mapping \
            -fsanitize=fuzzer-no-link -MMD -MP
COVSRC_nbd_handshake    := src/nbd/conn.c src/nbd/handshake.c src/nbd/transmission.c
COVSRC_nbd_transmission := $(COVSRC_nbd_handshake)
COVSRC_superblock       := src/format/superblock.c
COVSRC_chunk            := src/format/chunk.c
COVSRC_trace            := src/trace/reader.c
COVSRC_statefiles       := src/format/statefile.c src/format/seqrec.c
COVSRC_recovery         := src/engine/recovery.c src/engine/cache.c src/engine/space.c \
                           src/engine/check.c src/format/superblock.c src/format/chunk.c
$(foreach h,$(HARNESSES),$(eval COVOBJS_$(h) := $(patsubst $(FUZZ_BUILD)/obj/%,$(COV)/obj/%,$(OBJS_$(h)))))

$(COV)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $< (coverage)"
	@$(FUZZ_CC) $(FCPPFLAGS) $(COVFLAGS) -c -o $@ $<

$(COV)/fuzz_%: $$(COVOBJS_$$*)
	@echo "  LD      $@"
	@$(FUZZ_CC) -fsanitize=fuzzer -fprofile-instr-generate $(COVLDFLAGS) -o $@ $^ $(LIBS)

define cov_one
	@mkdir -p $(FUZZ_CORPUS)/$(1) tests/fuzz/regressions/$(1) $(COV)/crashes/$(1)
	@rm -f $(COV)/$(1).profraw
	@LLVM_PROFILE_FILE=$(COV)/$(1).profraw $(COV)/fuzz_$(1) -runs=0 \
	    -artifact_prefix=$(COV)/crashes/$(1)/ $(FUZZ_CORPUS)/$(1) \
	    tests/fuzz/corpus/$(1) tests/fuzz/regressions/$(1) >$(COV)/$(1).log 2>&1 \
	    || { tail -n 20 $(COV)/$(1).log; exit 1; }
	@llvm-profdata merge -o $(COV)/$(1).profdata $(COV)/$(1).profraw
	@echo "== $(1): $$(find $(FUZZ_CORPUS)/$(1) tests/fuzz/corpus/$(1) tests/fuzz/regressions/$(1) -type f | wc -l) inputs"
	@llvm-cov report $(COV)/fuzz_$(1) -instr-profile=$(COV)/$(1).profdata $(COVSRC_$(1)) \
	    | sed 's/^/  /'

endef

coverage: $(HARNESSES:%=$(COV)/fuzz_%)
	$(foreach h,$(HARNESSES),$(call cov_one,$(h)))

-include $(shell find $(FUZZ_BUILD)/obj $(COV)/obj -name '*.d' 2>/dev/null)

# The NBD harnesses see every conn_abort() and shutdown() (nbd_sim.c).
$(FUZZ_BUILD)/fuzz_nbd_handshake $(FUZZ_BUILD)/fuzz_nbd_transmission: \
    FLDFLAGS += -Wl,--wrap=conn_abort -Wl,--wrap=shutdown
$(COV)/fuzz_nbd_handshake $(COV)/fuzz_nbd_transmission: \
    COVLDFLAGS += -Wl,--wrap=conn_abort -Wl,--wrap=shutdown
