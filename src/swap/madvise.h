/*
 * The kernel interface of swap prefetch, and the checks that it works here.
 *
 * pidfd_open(2) (Linux 5.3) names a process without the risk of a recycled
 * PID; process_madvise(2) (Linux 5.10) gives advice about another process's
 * memory, and accepts MADV_WILLNEED since Linux 5.15.  On swapped anonymous
 * memory, MADV_WILLNEED starts reading the pages into the swap cache and
 * returns without waiting; the pages are not mapped, so the process's first
 * touch is a minor fault, and the kernel may still drop them like any other
 * clean, unmapped page when memory runs short.
 *
 * Advising another process needs CAP_SYS_NICE, and ptrace read access to it
 * (same user, or CAP_SYS_PTRACE); reading swap offsets from pagemap needs
 * CAP_SYS_ADMIN (without it the order of prefetch falls back to addresses).
 */
#ifndef TC_SWAP_MADVISE_H
#define TC_SWAP_MADVISE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* The most iovecs one process_madvise call takes (UIO_MAXIOV). */
#define SP_MAX_IOV 1024

int sp_pidfd_open(pid_t pid);                       /* fd or -errno */
/* MADV_WILLNEED on the ranges: bytes advised, or -errno. */
ssize_t sp_willneed(int pidfd, const struct iovec *iov, size_t n);

/* Map swapped pages of another process into its page tables, the way its
 * own touch would, by reading one byte of each page with
 * process_vm_readv(2): the kernel faults the page in on the process's
 * behalf (the fault is counted to the caller, not to the process).  Pages
 * already in the swap cache are mapped without I/O; a page that is not
 * would be read from swap synchronously, so callers pass only pages just
 * prefetched.  Needs ptrace attach access to the process (same user, or
 * CAP_SYS_PTRACE); process_madvise accepts no advice that maps pages of
 * another process (MADV_POPULATE_READ is for the caller's own memory only).
 * Returns the number of pages mapped, from the first (a short count means
 * the page after the last one counted failed), or -errno. */
ssize_t sp_map_pages(pid_t pid, const uint64_t *addrs, size_t n);

/* Startup checks; each returns false with a message that says what is
 * wrong and what to do. */
bool sp_check_kernel(char *err, size_t errlen);     /* pidfd_open, process_madvise, WILLNEED */
bool sp_check_caps(char *err, size_t errlen);       /* CAP_SYS_NICE */
bool sp_check_swap(char *err, size_t errlen);       /* some swap is enabled */
/* The message for a failure of the kernel check, given the errno of
 * pidfd_open (which 0) or process_madvise (which 1). */
void sp_kernel_error(int which, int err, char *msg, size_t len);

/* Whether the capabilities for pagemap swap offsets are present. */
bool sp_have_cap_sys_admin(void);

/* Run gently: levels 1 and 2 use SCHED_IDLE and the idle I/O class, so that
 * prefetch only ever gets CPU and disk time nobody else wants; level 3
 * ("regardless of idleness") uses nice 19 and the lowest best-effort I/O
 * priority, so that it makes progress on a busy machine but yields to
 * everything else.  Returns false with a message if a setting failed (the
 * daemon logs it and goes on). */
bool sp_set_priority(int level, char *err, size_t errlen);

#endif
