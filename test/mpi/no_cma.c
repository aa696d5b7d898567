/*
 * no_cma: run a program where process_vm_readv fails with EPERM, as it does between
 * sibling processes under Yama's ptrace_scope 1 or a container's seccomp policy.
 *
 *   no_cma PROGRAM [ARGS...]
 *
 * Installs a seccomp filter (inherited across exec) that makes process_vm_readv and
 * process_vm_writev return EPERM and allows every other system call, then executes
 * PROGRAM. single_copy.sh puts it between mpirun and the test programs.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define NO_CMA_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NO_CMA_ARCH AUDIT_ARCH_AARCH64
#else
#error "no_cma: unknown architecture"
#endif

int main(int argc, char **argv)
{
    struct sock_filter filter[] = {
        /* Another architecture's calls (a 32-bit ABI) pass unchanged. */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NO_CMA_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    };
    struct sock_fprog prog = {(unsigned short) (sizeof filter / sizeof filter[0]), filter};

    if (argc < 2) {
        fprintf(stderr, "usage: %s PROGRAM [ARGS...]\n", argv[0]);
        return 2;
    }
    if (0 != prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
        0 != prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0)) {
        fprintf(stderr, "no_cma: cannot install the seccomp filter: %s\n", strerror(errno));
        return 77; /* automake: SKIP */
    }
    execvp(argv[1], argv + 1);
    fprintf(stderr, "no_cma: cannot run %s: %s\n", argv[1], strerror(errno));
    return 127;
}
