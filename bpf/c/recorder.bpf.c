// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// nodeshim syscall recorder: counts, per syscall number, the syscalls made
// by a target (a cgroup v2 subtree, a mount namespace or a process tree) as
// seen on the raw_syscalls/sys_enter tracepoint. Seccomp filters run before
// this tracepoint (arch/x86/entry: syscall_trace_enter calls
// __secure_computing before trace_sys_enter), so a syscall that a filter
// denies is never counted: record unconfined.
//
// With from_filter_load set, a target process is counted only from the
// moment it installs a seccomp filter until it executes a new program:
// what an OCI runtime's container init does under the container's own
// filter before the execve of the container's process.

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define MAX_SYSCALLS 1024
// The last slot counts syscall numbers outside [0, MAX_SYSCALLS-1), such as
// x32 numbers (bit 30 set).
#define OTHER_SLOT (MAX_SYSCALLS - 1)

enum target_mode {
	MODE_NONE = 0,
	MODE_CGROUP = 1,
	MODE_MNTNS = 2,
	MODE_TREE = 3,
};

// Set by the loader before the program is loaded (.rodata): the verifier
// sees them as constants and prunes the branches of the other modes.
const volatile __u32 target_mode = MODE_NONE;
// In cgroup mode, the level of the target cgroup in the cgroup v2 hierarchy
// (the root is level 0): the program compares the current task's ancestor
// at that level, so that the whole subtree is recorded.
const volatile __s32 cgroup_level = 0;
// Count a target process only between its seccomp filter load and its next
// exec (see `armed`). The syscall numbers of seccomp(2) and prctl(2) come
// from the loader, so that the program names no architecture's table.
const volatile __u32 from_filter_load = 0;
const volatile __u64 nr_seccomp = 0;
const volatile __u64 nr_prctl = 0;

// include/uapi/linux/seccomp.h and prctl.h.
#define SECCOMP_SET_MODE_FILTER 1
#define PR_SET_SECCOMP 22
#define SECCOMP_MODE_FILTER 2

// Keys of the targets: cgroup v2 ids, mount namespace inode numbers or
// process (thread group) ids.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u8);
} targets SEC(".maps");

// A direct-mapped table in front of `targets`, so that most syscalls are
// decided without hashing: slot_of(key) holds 0 when no target key has
// been put there, the key itself when one key has, and SLOT_MIXED when
// more than one (or one that has left). 0 means "not a target" and the key
// means "a target"; anything else asks `targets`. An array lookup is
// inlined by the verifier, where a hash lookup hashes the key and walks a
// bucket on every syscall of every task of the host. A slot never goes back
// to 0, so a key in `targets` is never missed however writers race: a lost
// write leaves another key or SLOT_MIXED there, which falls back to
// `targets`.
#define SLOT_BITS 12
#define SLOT_MIXED (~0ULL)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << SLOT_BITS);
	__type(key, __u32);
	__type(value, __u64);
} target_slots SEC(".maps");

// slot_of is Fibonacci hashing of key onto SLOT_BITS bits; recorder.go
// computes the same.
static __always_inline __u32 slot_of(__u64 key)
{
	return (__u32)((key * 0x9E3779B97F4A7C15ULL) >> (64 - SLOT_BITS));
}

// slot_add records that key is now in `targets` (after it was put there).
static __always_inline void slot_add(__u64 key)
{
	__u32 s = slot_of(key);
	__u64 *slot = bpf_map_lookup_elem(&target_slots, &s);
	__u64 v;

	if (!slot)
		return;
	v = *(volatile __u64 *)slot;
	if (v == 0)
		*(volatile __u64 *)slot = key;
	else if (v != key)
		*(volatile __u64 *)slot = SLOT_MIXED;
}

// slot_forget records that key has left `targets`.
static __always_inline void slot_forget(__u64 key)
{
	__u32 s = slot_of(key);
	__u64 *slot = bpf_map_lookup_elem(&target_slots, &s);

	if (slot && *(volatile __u64 *)slot == key)
		*(volatile __u64 *)slot = SLOT_MIXED;
}

// In from_filter_load mode, the processes (thread group ids) that have
// asked the kernel to install a seccomp filter and have not executed a new
// program since.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u8);
} armed SEC(".maps");

// In from_filter_load mode, slot 0 is set when a process loaded its filter
// with a signal handler installed: a signal may then come at any point of
// the window (Go's runtime preempts its threads with SIGURG), and its
// handler returns through rt_sigreturn, whether or not one came while
// recording.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} handlers_at_load SEC(".maps");

// has_handlers says whether the current task has a signal handler
// installed: an action whose sa_handler is neither SIG_DFL (0) nor
// SIG_IGN (1) (include/uapi/asm-generic/signal-defs.h), over the _NSIG (64)
// actions of its sighand_struct.
static __always_inline int has_handlers(void)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	void *acts = (void *)BPF_CORE_READ(task, sighand) +
		     bpf_core_field_offset(struct sighand_struct, action);
	__u32 size = bpf_core_type_size(struct k_sigaction);
	__u32 off = bpf_core_field_offset(struct k_sigaction, sa.sa_handler);

	for (int i = 0; i < 64; i++) {
		__u64 h = 0;

		if (bpf_probe_read_kernel(&h, sizeof(h), acts + i * size + off))
			return 0;
		if (h > 1)
			return 1;
	}
	return 0;
}

// Per-CPU counters indexed by syscall number.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_SYSCALLS);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

static __always_inline int current_is_target(void)
{
	__u64 key;

	switch (target_mode) {
	case MODE_CGROUP:
		key = bpf_get_current_ancestor_cgroup_id(cgroup_level);
		break;
	case MODE_MNTNS: {
		struct task_struct *task = (struct task_struct *)bpf_get_current_task();
		key = BPF_CORE_READ(task, nsproxy, mnt_ns, ns.inum);
		break;
	}
	case MODE_TREE:
		key = bpf_get_current_pid_tgid() >> 32;
		break;
	default:
		return 0;
	}
	__u32 s = slot_of(key);
	__u64 *slot = bpf_map_lookup_elem(&target_slots, &s);
	if (slot) {
		__u64 v = *(volatile __u64 *)slot;
		if (v == 0)
			return 0;
		if (v == key)
			return 1;
	}
	return bpf_map_lookup_elem(&targets, &key) != NULL;
}

// raw_tracepoint/sys_enter: args[0] is struct pt_regs *, args[1] the
// syscall number (include/trace/events/syscalls.h). The raw tracepoint
// skips the perf buffer copy of the classic tracepoint, which matters on a
// hook that every syscall of the host goes through.
SEC("raw_tracepoint/sys_enter")
int record_sys_enter(struct bpf_raw_tracepoint_args *ctx)
{
	if (!current_is_target())
		return 0;

	__u64 id = ctx->args[1];
	if (from_filter_load) {
		__u64 tgid = bpf_get_current_pid_tgid() >> 32;

		if (bpf_map_lookup_elem(&armed, &tgid))
			goto count;
		// seccomp(SECCOMP_SET_MODE_FILTER, flags, prog) or
		// prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog) with a
		// program: libseccomp probes the syscall with a NULL program
		// (EFAULT), which installs nothing. runc loads with prctl
		// when it passes no filter flags (libcontainer/seccomp/
		// patchbpf). The call itself runs before its filter and is
		// not counted; what follows is, in every thread of the
		// process: a superset when the filter covers one thread (a
		// Go runtime's other threads, without TSYNC).
		struct pt_regs *regs = (struct pt_regs *)ctx->args[0];
		__u64 a0 = BPF_CORE_READ(regs, di);
		__u64 a1 = BPF_CORE_READ(regs, si);
		__u64 a2 = BPF_CORE_READ(regs, dx);
		__u8 one = 1;

		if ((id == nr_seccomp && a0 == SECCOMP_SET_MODE_FILTER && a2 != 0) ||
		    (id == nr_prctl && a0 == PR_SET_SECCOMP && a1 == SECCOMP_MODE_FILTER && a2 != 0)) {
			bpf_map_update_elem(&armed, &tgid, &one, BPF_ANY);
			if (has_handlers()) {
				__u32 zero = 0, set = 1;

				bpf_map_update_elem(&handlers_at_load, &zero, &set, BPF_ANY);
			}
		}
		return 0;
	}
count:;
	__u32 slot = id < OTHER_SLOT ? (__u32)id : OTHER_SLOT;
	__u64 *count = bpf_map_lookup_elem(&counts, &slot);
	if (count)
		*count += 1;
	return 0;
}

// raw_tracepoint/sched_process_fork: args[0] is the forking task (current),
// args[1] the new one (kernel/fork.c: trace_sched_process_fork(current, p)).
// In process-tree mode a new process of a tracked process is tracked too;
// threads share the tgid and need no entry.
SEC("raw_tracepoint/sched_process_fork")
int record_fork(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *parent = (struct task_struct *)ctx->args[0];
	struct task_struct *child = (struct task_struct *)ctx->args[1];
	__u64 ptgid = BPF_CORE_READ(parent, tgid);
	__u64 ctgid = BPF_CORE_READ(child, tgid);
	__u8 one = 1;

	if (target_mode != MODE_TREE || ptgid == ctgid)
		return 0;
	if (!bpf_map_lookup_elem(&targets, &ptgid))
		return 0;
	if (bpf_map_update_elem(&targets, &ctgid, &one, BPF_ANY) == 0)
		slot_add(ctgid);
	return 0;
}

// raw_tracepoint/sched_process_exit: args[0] is the exiting task. do_exit
// decrements signal->live before the tracepoint, so live == 0 means the
// last thread of the process is leaving and its pid may be reused.
SEC("raw_tracepoint/sched_process_exit")
int record_exit(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task = (struct task_struct *)ctx->args[0];
	__u64 tgid;

	if (target_mode != MODE_TREE)
		return 0;
	if (BPF_CORE_READ(task, signal, live.counter) != 0)
		return 0;
	tgid = BPF_CORE_READ(task, tgid);
	bpf_map_delete_elem(&targets, &tgid);
	slot_forget(tgid);
	// A process that loaded a filter and exits without an exec: its pid
	// may come back as another process.
	if (from_filter_load)
		bpf_map_delete_elem(&armed, &tgid);
	return 0;
}

// raw_tracepoint/sched_process_exec: current has executed a new program
// (fs/exec.c: exec_binprm, after the point of no return). In
// from_filter_load mode its window closes: the execve that got here was
// counted on entry, the new program's syscalls are not.
SEC("raw_tracepoint/sched_process_exec")
int record_exec(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 tgid = bpf_get_current_pid_tgid() >> 32;

	if (from_filter_load)
		bpf_map_delete_elem(&armed, &tgid);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
