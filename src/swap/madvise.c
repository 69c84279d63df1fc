#include "swap/madvise.h"

#include <errno.h>
#include <linux/capability.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "swap/procfs.h"
#include "util/misc.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_process_madvise
#define SYS_process_madvise 440
#endif
#ifndef MADV_WILLNEED
#define MADV_WILLNEED 3
#endif

#define IOPRIO_CLASS_SHIFT 13
#define IOPRIO_CLASS_BE 2
#define IOPRIO_CLASS_IDLE 3
#define IOPRIO_WHO_PROCESS 1

int sp_pidfd_open(pid_t pid)
{
    long fd = syscall(SYS_pidfd_open, (long)pid, 0L);
    return fd < 0 ? -errno : (int)fd;
}

ssize_t sp_willneed(int pidfd, const struct iovec *iov, size_t n)
{
    long r = syscall(SYS_process_madvise, (long)pidfd, iov, (unsigned long)n, (long)MADV_WILLNEED,
                     0L);
    return r < 0 ? -errno : (ssize_t)r;
}

ssize_t sp_map_pages(pid_t pid, const uint64_t *addrs, size_t n)
{
    /* One byte per page: what it reads is thrown away; the point is the
     * fault taken on the way. */
    static char sink[SP_MAX_IOV];
    struct iovec local[SP_MAX_IOV], remote[SP_MAX_IOV];
    size_t done = 0;
    while (done < n) {
        size_t k = TC_MIN(n - done, (size_t)SP_MAX_IOV);
        for (size_t i = 0; i < k; i++) {
            local[i] = (struct iovec){ sink + i, 1 };
            remote[i] = (struct iovec){ (void *)(uintptr_t)addrs[done + i], 1 };
        }
        ssize_t r = process_vm_readv(pid, local, k, remote, k, 0);
        if (r < 0)
            return done ? (ssize_t)done : -errno;
        done += (size_t)r;
        if ((size_t)r < k)
            break;
    }
    return (ssize_t)done;
}

void sp_kernel_error(int which, int err, char *msg, size_t len)
{
    if (which == 0 && err == ENOSYS)
        snprintf(msg, len,
                 "this kernel has no pidfd_open system call (Linux 5.3 or later has it); "
                 "swap prefetch needs Linux 5.15 or later");
    else if (which == 0)
        snprintf(msg, len, "pidfd_open failed: %s", strerror(err));
    else if (err == ENOSYS)
        snprintf(msg, len,
                 "this kernel has no process_madvise system call (ENOSYS); swap prefetch "
                 "needs Linux 5.15 or later, built with CONFIG_ADVISE_SYSCALLS");
    else if (err == EPERM)
        snprintf(msg, len,
                 "process_madvise was refused (EPERM): this kernel asks for CAP_SYS_NICE even "
                 "to advise the calling process; run as root or grant the capability "
                 "(setcap cap_sys_nice,cap_sys_ptrace+ep tiercache)");
    else if (err == EINVAL)
        snprintf(msg, len,
                 "this kernel's process_madvise does not accept MADV_WILLNEED (EINVAL); "
                 "swap prefetch needs Linux 5.15 or later");
    else
        snprintf(msg, len, "process_madvise(MADV_WILLNEED) failed on this process: %s",
                 strerror(err));
}

bool sp_check_kernel(char *err, size_t errlen)
{
    int fd = sp_pidfd_open(getpid());
    if (fd < 0) {
        sp_kernel_error(0, -fd, err, errlen);
        return false;
    }
    /* Advise one page of our own: the same system call and advice, without
     * the capability that advising others needs. */
    long pagesize = sysconf(_SC_PAGESIZE);
    void *page = mmap(NULL, (size_t)pagesize, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
        snprintf(err, errlen, "mmap: %s", strerror(errno));
        close(fd);
        return false;
    }
    struct iovec iov = { page, (size_t)pagesize };
    ssize_t r = sp_willneed(fd, &iov, 1);
    munmap(page, (size_t)pagesize);
    close(fd);
    if (r < 0) {
        sp_kernel_error(1, (int)-r, err, errlen);
        return false;
    }
    return true;
}

static bool have_cap(int cap)
{
    struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    if (syscall(SYS_capget, &h, d) < 0)
        return geteuid() == 0;
    return (d[cap / 32].effective >> (cap % 32)) & 1;
}

bool sp_check_caps(char *err, size_t errlen)
{
    if (have_cap(CAP_SYS_NICE))
        return true;
    snprintf(err, errlen,
             "process_madvise on other processes needs CAP_SYS_NICE, which this process lacks; "
             "run it as root, or grant the capabilities to the binary "
             "(setcap cap_sys_nice,cap_sys_ptrace+ep tiercache)");
    return false;
}

bool sp_have_cap_sys_admin(void)
{
    return have_cap(CAP_SYS_ADMIN);
}

bool sp_check_swap(char *err, size_t errlen)
{
    char buf[4096];
    if (sp_read_text("/proc/swaps", buf, sizeof buf) < 0) {
        snprintf(err, errlen, "cannot read /proc/swaps: %s (is /proc mounted?)", strerror(errno));
        return false;
    }
    /* A header line, then one line per active swap area. */
    const char *nl = strchr(buf, '\n');
    if (nl && nl[1] != '\0')
        return true;
    snprintf(err, errlen,
             "no swap is enabled (/proc/swaps lists none), so there is nothing to prefetch; "
             "enable a swap file or partition first (mkswap and swapon, or /etc/fstab)");
    return false;
}

bool sp_set_priority(int level, char *err, size_t errlen)
{
    bool ok = true;
    err[0] = '\0';
    int ioprio;
    if (level >= 3) {
        if (setpriority(PRIO_PROCESS, 0, 19) < 0) {
            snprintf(err, errlen, "setpriority(19): %s", strerror(errno));
            ok = false;
        }
        ioprio = (IOPRIO_CLASS_BE << IOPRIO_CLASS_SHIFT) | 7;
    } else {
        struct sched_param sp = { .sched_priority = 0 };
        if (sched_setscheduler(0, SCHED_IDLE, &sp) < 0) {
            snprintf(err, errlen, "sched_setscheduler(SCHED_IDLE): %s", strerror(errno));
            ok = false;
        }
        ioprio = IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT;
    }
    if (syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, ioprio) < 0) {
        size_t n = strlen(err);
        snprintf(err + n, errlen - n, "%sioprio_set: %s", n ? "; " : "", strerror(errno));
        ok = false;
    }
    return ok;
}
