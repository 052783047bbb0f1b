// The seccomp child: code that runs in a process re-executed from the
// nodeshim binary (or a test binary linking kernel/seccomp), in a
// constructor, before the Go runtime starts its threads.
//
// Installing a filter and then running code is only exact in a
// single-threaded process: SECCOMP_RET_KILL_THREAD kills one thread of a
// multi-threaded Go program and leaves it hung, and the Go runtime itself
// makes syscalls (futex, mmap, sched_yield...) that a strict profile denies.
// Here nothing runs between seccomp(2) and the syscalls that matter.
//
// The mode comes from NODESHIM_SECCOMP_CHILD; without it the constructor
// returns at once and the program starts normally.
//
//   exec:  read the program from fd NODESHIM_SECCOMP_PROG_FD, set
//          no_new_privs, load it with SECCOMP_FILTER_FLAG_TSYNC plus
//          NODESHIM_SECCOMP_FLAGS, execve(argv[1], argv+2). Exit 126 when
//          the filter cannot be loaded or the command cannot be executed.
//   probe: map the record file at fd NODESHIM_SECCOMP_PROBE_FD and read
//          the program if NODESHIM_SECCOMP_PROG_FD is set (not for the
//          unfiltered baseline). This process, which stays unfiltered,
//          forks one worker per record: the worker loads the program, calls
//          the syscall and stores the result; a worker that dies has the
//          signal stored in its record. Nothing but the probed syscall runs
//          under the filter: results go to shared memory, not through
//          write(2).

#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "child_linux.h"

static struct nodeshim_probe_rec *nodeshim_recs;
static volatile long nodeshim_cur = -1;

static void nodeshim_sigsys(int sig, siginfo_t *info, void *ctx) {
	(void)sig;
	(void)ctx;
	if (nodeshim_cur >= 0 && info->si_code == 1 /* SYS_SECCOMP */) {
		nodeshim_recs[nodeshim_cur].trapped = 1;
		nodeshim_recs[nodeshim_cur].trap_nr = info->si_syscall;
		// SECCOMP_RET_DATA of a TRAP arrives in si_errno.
		nodeshim_recs[nodeshim_cur].trap_data = info->si_errno;
	}
}

static int nodeshim_env_int(const char *name, long *out) {
	const char *v = getenv(name);
	char *end;
	if (v == NULL || *v == '\0') {
		return 0;
	}
	errno = 0;
	*out = strtol(v, &end, 10);
	return errno == 0 && *end == '\0' ? 1 : -1;
}

// nodeshim_read_prog reads the BPF program from fd into a heap buffer.
static int nodeshim_read_prog(int fd, struct sock_fprog *prog) {
	struct stat st;
	if (fstat(fd, &st) != 0) {
		return -1;
	}
	if (st.st_size <= 0 || st.st_size % sizeof(struct sock_filter) != 0 ||
	    st.st_size / sizeof(struct sock_filter) > 0xffff) {
		errno = EINVAL;
		return -1;
	}
	struct sock_filter *buf = malloc(st.st_size);
	if (buf == NULL) {
		return -1;
	}
	ssize_t done = 0;
	while (done < st.st_size) {
		ssize_t n = pread(fd, (char *)buf + done, st.st_size - done, done);
		if (n <= 0) {
			if (n == 0) {
				errno = EIO;
			}
			free(buf);
			return -1;
		}
		done += n;
	}
	prog->len = st.st_size / sizeof(struct sock_filter);
	prog->filter = buf;
	return 0;
}

static int nodeshim_load(struct sock_fprog *prog, long flags) {
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
		return -1;
	}
	long ret = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
	                   (unsigned long)flags | SECCOMP_FILTER_FLAG_TSYNC, prog);
	if (ret > 0) {
		// TSYNC reports the id of a thread it could not synchronise;
		// impossible here, the process has one thread.
		errno = ESRCH;
		return -1;
	}
	return ret == 0 ? 0 : -1;
}

#if defined(__x86_64__)
// nodeshim_int80 makes a syscall through the ia32 entry (int $0x80), which a
// 64-bit process may use when the kernel has IA32_EMULATION: seccomp sees
// AUDIT_ARCH_I386 and i386 syscall numbers. Arguments are truncated to 32
// bits. The 128-byte red zone below %rsp is skipped before %rbp (the sixth
// argument register) is saved on the stack.
static long nodeshim_int80(long nr, const uint64_t *a) {
	long ret;
	long a5 = (long)(uint32_t)a[5];
	__asm__ volatile(
	    "sub $128, %%rsp\n\t"
	    "push %%rbp\n\t"
	    "mov %[a5], %%rbp\n\t"
	    "int $0x80\n\t"
	    "pop %%rbp\n\t"
	    "add $128, %%rsp"
	    : "=a"(ret)
	    : "a"(nr), "b"((long)(uint32_t)a[0]), "c"((long)(uint32_t)a[1]), "d"((long)(uint32_t)a[2]),
	      "S"((long)(uint32_t)a[3]), "D"((long)(uint32_t)a[4]), [a5] "r"(a5)
	    : "memory", "r8", "r9", "r10", "r11", "cc");
	// The ia32 entry returns a 32-bit value: sign-extend it.
	return (long)(int)ret;
}
#endif

static void nodeshim_die(void) {
	syscall(SYS_exit_group, 0);
	syscall(SYS_exit, 0);
	__builtin_trap();
}

static void nodeshim_exec(int argc, char **argv) {
	long fd, flags = 0;
	struct sock_fprog prog;
	if (argc < 3 || nodeshim_env_int(NODESHIM_ENV_PROG_FD, &fd) != 1 ||
	    nodeshim_env_int(NODESHIM_ENV_FLAGS, &flags) < 0) {
		fprintf(stderr, "nodeshim: seccomp exec: bad invocation of the seccomp child\n");
		_exit(126);
	}
	if (nodeshim_read_prog((int)fd, &prog) != 0) {
		fprintf(stderr, "nodeshim: seccomp exec: read filter from fd %ld: %s\n", fd, strerror(errno));
		_exit(126);
	}
	close((int)fd);
	unsetenv(NODESHIM_ENV_CHILD);
	unsetenv(NODESHIM_ENV_PROG_FD);
	unsetenv(NODESHIM_ENV_FLAGS);
	if (nodeshim_load(&prog, flags) != 0) {
		fprintf(stderr, "nodeshim: seccomp exec: load filter: %s\n", strerror(errno));
		_exit(126);
	}
	execv(argv[1], argv + 2);
	int err = errno;
	fprintf(stderr, "nodeshim: seccomp exec: execve %s: %s\n", argv[1], strerror(err));
	_exit(err == ENOENT ? 127 : 126);
}

// nodeshim_worker runs record i in a process of its own, forked from the
// probe supervisor: it loads the filter (when prog is set), makes the call,
// stores the result and exits. Every record starts from the supervisor's
// state, so no record sees what an earlier one changed (a persona, a uid, a
// umask, a signal mask...), with or without the filter.
static void nodeshim_worker(struct nodeshim_probe_hdr *hdr, long i, struct sock_fprog *prog, long flags,
                            pid_t supervisor) {
	struct nodeshim_probe_rec *r = &nodeshim_recs[i];
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	if (getppid() != supervisor) {
		_exit(119);
	}
	// The baseline's worker gets no_new_privs too: it differs from the
	// filtered one by the filter alone.
	if (prog != NULL ? nodeshim_load(prog, flags) != 0 : prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
		hdr->setup_errno = errno;
		_exit(125);
	}
	hdr->installed = 1;
	nodeshim_cur = i;
	r->state = 1;
	__sync_synchronize();
	errno = 0;
	long ret;
	int err;
	if (r->flags & NODESHIM_PROBE_I386) {
#if defined(__x86_64__)
		ret = nodeshim_int80(r->nr, r->args);
		err = 0;
		if (ret < 0 && ret > -4096) {
			err = (int)-ret;
			ret = -1;
		}
#else
		ret = -1;
		err = ENOSYS;
#endif
	} else {
		ret = syscall(r->nr, r->args[0], r->args[1], r->args[2], r->args[3], r->args[4], r->args[5]);
		err = errno;
	}
	if (ret == 0 && (r->flags & NODESHIM_PROBE_FORKLIKE)) {
		// The new child of fork or clone: leave at once, and a trapped
		// exit is not the record's.
		nodeshim_cur = -1;
		nodeshim_die();
	}
	r->ret = ret;
	r->err = ret == -1 ? err : 0;
	__sync_synchronize();
	r->state = 2;
	// The exit is not the record's: a filter that traps exit_group must not
	// mark the finished record trapped.
	nodeshim_cur = -1;
	nodeshim_die();
}

static void nodeshim_probe(void) {
	long fd, pfd = -1, flags = 0;
	struct stat st;
	struct sock_fprog prog = {0};
	if (nodeshim_env_int(NODESHIM_ENV_PROBE_FD, &fd) != 1 || nodeshim_env_int(NODESHIM_ENV_PROG_FD, &pfd) < 0 ||
	    nodeshim_env_int(NODESHIM_ENV_FLAGS, &flags) < 0) {
		_exit(120);
	}
	if (fstat((int)fd, &st) != 0 || st.st_size < (off_t)sizeof(struct nodeshim_probe_hdr)) {
		_exit(121);
	}
	void *mem = mmap(NULL, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd, 0);
	if (mem == MAP_FAILED) {
		_exit(122);
	}
	struct nodeshim_probe_hdr *hdr = mem;
	nodeshim_recs = (struct nodeshim_probe_rec *)(hdr + 1);
	if (hdr->magic != NODESHIM_PROBE_MAGIC ||
	    sizeof(*hdr) + (size_t)hdr->count * sizeof(struct nodeshim_probe_rec) > (size_t)st.st_size) {
		_exit(123);
	}

	// A session of its own leaves no controlling terminal for vhangup(2)
	// to hang up; no core files from SIGSYS kills; die with the parent.
	// The workers inherit all of it, and the SIGSYS handler.
	setsid();
	struct rlimit nocore = {0, 0};
	setrlimit(RLIMIT_CORE, &nocore);
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = nodeshim_sigsys;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigaction(SIGSYS, &sa, NULL);

	if (pfd >= 0) {
		if (nodeshim_read_prog((int)pfd, &prog) != 0) {
			hdr->setup_errno = errno;
			_exit(124);
		}
		close((int)pfd);
	}
	// The supervisor stays unfiltered: the filter may deny fork and wait.
	pid_t self = getpid();
	for (long i = 0; i < (long)hdr->count; i++) {
		struct nodeshim_probe_rec *r = &nodeshim_recs[i];
		pid_t pid = fork();
		if (pid < 0) {
			_exit(126);
		}
		if (pid == 0) {
			nodeshim_worker(hdr, i, pfd >= 0 ? &prog : NULL, flags, self);
		}
		hdr->workers++;
		int status;
		while (waitpid(pid, &status, 0) < 0) {
			if (errno != EINTR) {
				_exit(127);
			}
		}
		__sync_synchronize();
		if (hdr->setup_errno != 0) {
			_exit(125);
		}
		if (r->state == 1 && (r->flags & NODESHIM_PROBE_EXITLIKE) && WIFEXITED(status)) {
			// The call ended the process, as exit_group does when
			// allowed.
			r->ret = WEXITSTATUS(status);
			r->state = NODESHIM_PROBE_EXITED;
		}
		if (r->state != 2 && r->state != NODESHIM_PROBE_EXITED) {
			if (!WIFSIGNALED(status)) {
				// Unfinished without a signal: the parent reports it.
				_exit(118);
			}
			// A kill action, or a trap or call that the process
			// could not survive.
			r->signal = WTERMSIG(status);
		}
	}
	nodeshim_die();
}

// nodeshim_bench times NODESHIM_SECCOMP_BENCH_N calls of the first record's
// syscall under the filter (if any) and stores the elapsed nanoseconds in the
// record's ret. The time is the thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID), so that time spent preempted on a busy machine
// does not count; the two clock_gettime calls are outside the loop.
static void nodeshim_bench(void) {
	long fd, pfd = -1, flags = 0, n = 0;
	struct stat st;
	struct sock_fprog prog = {0};
	if (nodeshim_env_int(NODESHIM_ENV_PROBE_FD, &fd) != 1 || nodeshim_env_int(NODESHIM_ENV_BENCH_N, &n) != 1 ||
	    nodeshim_env_int(NODESHIM_ENV_PROG_FD, &pfd) < 0 || nodeshim_env_int(NODESHIM_ENV_FLAGS, &flags) < 0) {
		_exit(120);
	}
	if (fstat((int)fd, &st) != 0 ||
	    st.st_size < (off_t)(sizeof(struct nodeshim_probe_hdr) + sizeof(struct nodeshim_probe_rec))) {
		_exit(121);
	}
	struct nodeshim_probe_hdr *hdr = mmap(NULL, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd, 0);
	if (hdr == MAP_FAILED) {
		_exit(122);
	}
	struct nodeshim_probe_rec *r = (struct nodeshim_probe_rec *)(hdr + 1);
	if (pfd >= 0) {
		if (nodeshim_read_prog((int)pfd, &prog) != 0 || nodeshim_load(&prog, flags) != 0) {
			hdr->setup_errno = errno;
			_exit(125);
		}
	}
	hdr->installed = 1;
	struct timespec t0, t1;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
	for (long i = 0; i < n; i++) {
		syscall(r->nr, r->args[0], r->args[1], r->args[2], r->args[3], r->args[4], r->args[5]);
	}
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
	r->err = errno;
	r->ret = (t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec);
	r->state = 2;
	nodeshim_die();
}

__attribute__((constructor)) static void nodeshim_seccomp_child(int argc, char **argv, char **envp) {
	(void)envp;
	const char *mode = getenv(NODESHIM_ENV_CHILD);
	if (mode == NULL) {
		return;
	}
	if (strcmp(mode, "exec") == 0) {
		nodeshim_exec(argc, argv);
	} else if (strcmp(mode, "probe") == 0) {
		nodeshim_probe();
	} else if (strcmp(mode, "bench") == 0) {
		nodeshim_bench();
	}
}
