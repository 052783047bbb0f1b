// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// nodeshim OOM watcher: one event per task that the kernel marks as an OOM
// victim (mm/oom_kill.c: mark_oom_victim, which also fires the
// oom/mark_victim tracepoint). Four entry points share one body, and the
// loader picks the best one that this kernel accepts: fentry (BTF
// trampoline, 5.5+), the raw tracepoint (which is handed the victim's
// task_struct since 6.8, and only its pid before unless backported), kprobe, then the
// tracepoint's formatted record, which names only the pid before 6.8.

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#define TASK_COMM_LEN 16
// Room for a container's cgroup directory name: the systemd driver's
// "cri-containerd-<64 hex>.scope" is 85 bytes, a pod's slice
// "kubepods-burstable-pod<uid>.slice" 64.
#define CGROUP_NAME_LEN 96

// Field order and sizes are mirrored by OOMEvent's decoder in oom.go.
struct oom_event {
	__u64 timestamp_ns;   // bpf_ktime_get_ns (CLOCK_MONOTONIC)
	__u64 cgroup_id;      // cgroup v2 id of the victim, 0 when unknown
	__u64 total_vm;       // victim's mm->total_vm
	__u64 rss;            // file + anon + shmem resident memory
	__u32 pid;            // victim thread id
	__u32 tgid;           // victim process id, 0 when unknown
	__u32 hook;           // which entry point reported it (HOOK_*)
	__s32 oom_score_adj;
	__u32 mem_in_kib;     // total_vm and rss are in KiB, not pages
	char comm[TASK_COMM_LEN];
	// The names of the victim's cgroup v2 directory and of its parent
	// (kernfs_node.name), read at the kill: a kill that takes its whole
	// container (memory.oom.group) removes the directory, and with it any
	// way to turn cgroup_id into a path, before user space looks.
	char cgroup_name[CGROUP_NAME_LEN];
	char cgroup_parent_name[CGROUP_NAME_LEN];
};

// Keeps struct oom_event in the object's BTF so that bpf2go emits its Go
// twin (oomOomEvent), which the decoder's layout test compares against.
const struct oom_event *unused_oom_event __attribute__((unused));

enum hook {
	HOOK_FENTRY = 1,
	HOOK_KPROBE = 2,
	HOOK_TRACEPOINT = 3,
	HOOK_RAW_TRACEPOINT = 4,
};

// Set by the loader: false where BPF_MAP_TYPE_RINGBUF (5.8) is missing; the
// verifier then never sees the ring buffer branch.
const volatile bool use_ringbuf = true;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} oom_events_rb SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} oom_events_pb SEC(".maps");

// Before 6.2 the RSS counters were atomics in struct mm_rss_stat; since 6.2
// (f1a7941243c1) they are percpu_counters in mm_struct.rss_stat[].
struct mm_rss_stat___old {
	atomic_long_t count[4];
} __attribute__((preserve_access_index));

struct mm_struct___old {
	struct mm_rss_stat___old rss_stat;
} __attribute__((preserve_access_index));

// enum mm_counter indexes (include/linux/mm_types_task.h).
#define MM_FILEPAGES 0
#define MM_ANONPAGES 1
#define MM_SHMEMPAGES 3

static __always_inline __u64 mm_rss(struct mm_struct *mm)
{
	if (bpf_core_type_exists(struct mm_rss_stat___old)) {
		struct mm_struct___old *old = (void *)mm;
		return BPF_CORE_READ(old, rss_stat.count[MM_FILEPAGES].counter) +
		       BPF_CORE_READ(old, rss_stat.count[MM_ANONPAGES].counter) +
		       BPF_CORE_READ(old, rss_stat.count[MM_SHMEMPAGES].counter);
	}
	// percpu_counter.count lags the per-CPU deltas by at most the batch
	// size per CPU: close enough to say how big the victim was.
	return BPF_CORE_READ(mm, rss_stat[MM_FILEPAGES].count) +
	       BPF_CORE_READ(mm, rss_stat[MM_ANONPAGES].count) +
	       BPF_CORE_READ(mm, rss_stat[MM_SHMEMPAGES].count);
}

static __always_inline void submit(void *ctx, struct oom_event *e)
{
	if (use_ringbuf)
		bpf_ringbuf_output(&oom_events_rb, e, sizeof(*e), 0);
	else
		bpf_perf_event_output(ctx, &oom_events_pb, BPF_F_CURRENT_CPU, e, sizeof(*e));
}

// kernfs_node.parent became __parent in 6.15 (RCU-protected since).
struct kernfs_node___old {
	struct kernfs_node *parent;
} __attribute__((preserve_access_index));

static __always_inline void cgroup_names(struct oom_event *e, struct task_struct *tsk)
{
	struct kernfs_node *kn = BPF_CORE_READ(tsk, cgroups, dfl_cgrp, kn);
	const char *name;

	if (!kn)
		return;
	name = BPF_CORE_READ(kn, name);
	if (name)
		bpf_probe_read_kernel_str(&e->cgroup_name, sizeof(e->cgroup_name), name);
	if (bpf_core_field_exists(kn->__parent))
		kn = BPF_CORE_READ(kn, __parent);
	else
		kn = BPF_CORE_READ((struct kernfs_node___old *)kn, parent);
	if (!kn)
		return;
	name = BPF_CORE_READ(kn, name);
	if (name)
		bpf_probe_read_kernel_str(&e->cgroup_parent_name, sizeof(e->cgroup_parent_name), name);
}

static __always_inline int report_task(void *ctx, struct task_struct *tsk, __u32 hook)
{
	struct oom_event e = {};
	struct mm_struct *mm;

	e.timestamp_ns = bpf_ktime_get_ns();
	e.hook = hook;
	e.pid = BPF_CORE_READ(tsk, pid);
	e.tgid = BPF_CORE_READ(tsk, tgid);
	e.oom_score_adj = BPF_CORE_READ(tsk, signal, oom_score_adj);
	BPF_CORE_READ_STR_INTO(&e.comm, tsk, comm);
	e.cgroup_id = BPF_CORE_READ(tsk, cgroups, dfl_cgrp, kn, id);
	cgroup_names(&e, tsk);
	mm = BPF_CORE_READ(tsk, mm);
	if (mm) {
		e.total_vm = BPF_CORE_READ(mm, total_vm);
		e.rss = mm_rss(mm);
	}
	submit(ctx, &e);
	return 0;
}

SEC("fentry/mark_oom_victim")
int BPF_PROG(oom_victim_fentry, struct task_struct *tsk)
{
	return report_task(ctx, tsk, HOOK_FENTRY);
}

// The raw tracepoint gets the arguments of trace_mark_victim. Since 6.8
// (and where that change was backported, as in Debian's 6.1) they are
// (struct task_struct *task, uid_t uid) (include/trace/events/oom.h); the
// loader attaches this program only where the kernel's BTF says so
// (btf_trace_mark_victim), never where the first is the pid.
SEC("raw_tracepoint/mark_victim")
int BPF_PROG(oom_victim_raw_tracepoint, struct task_struct *tsk)
{
	return report_task(ctx, tsk, HOOK_RAW_TRACEPOINT);
}

SEC("kprobe/mark_oom_victim")
int BPF_KPROBE(oom_victim_kprobe, struct task_struct *tsk)
{
	return report_task(ctx, tsk, HOOK_KPROBE);
}

// The 6.8+ layout of the tracepoint (include/trace/events/oom.h); older
// kernels only have pid, and CO-RE leaves the other fields at zero there.
SEC("tracepoint/oom/mark_victim")
int oom_victim_tracepoint(struct trace_event_raw_mark_victim *tp)
{
	struct oom_event e = {};

	e.timestamp_ns = bpf_ktime_get_ns();
	e.hook = HOOK_TRACEPOINT;
	// vmlinux.h marks every struct preserve_access_index, so these
	// direct context loads are CO-RE relocated.
	e.pid = tp->pid;
	// Since 6.8 the tracepoint reports memory in KiB (K(...) in
	// include/trace/events/oom.h), where the task hooks count pages.
	if (bpf_core_field_exists(tp->total_vm)) {
		e.total_vm = tp->total_vm;
		e.rss = tp->anon_rss + tp->file_rss + tp->shmem_rss;
		e.oom_score_adj = tp->oom_score_adj;
		e.mem_in_kib = 1;
	}
	if (bpf_core_field_exists(tp->__data_loc_comm)) {
		__u32 loc = tp->__data_loc_comm;
		bpf_probe_read_kernel_str(&e.comm, sizeof(e.comm), (void *)tp + (loc & 0xffff));
	}
	// A memcg OOM is handled in the task that failed to charge, which is
	// often a thread of the victim: then current names its process and
	// cgroup. The victim's pid is that of the thread whose mm was picked,
	// usually the group leader, so compare it with both ids of current.
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if ((__u32)pid_tgid == e.pid || (__u32)(pid_tgid >> 32) == e.pid) {
		e.tgid = pid_tgid >> 32;
		e.cgroup_id = bpf_get_current_cgroup_id();
		cgroup_names(&e, (struct task_struct *)bpf_get_current_task());
		if (!e.comm[0])
			bpf_get_current_comm(&e.comm, sizeof(e.comm));
	}
	submit(tp, &e);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
