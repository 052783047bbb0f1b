// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// nodeshim cgroup stats pass: a cgroup iterator (kernel/bpf/cgroup_iter.c,
// Linux 6.1+) that walks a cgroup v2 subtree in one kernel pass and copies,
// for each cgroup down to max_depth below the iterator's root, the state
// behind its *.pressure files and its memory.current, memory.max and
// memory.events' oom_kill into an mmapable array. It writes nothing to the
// iterator's seq_file: one read of a cgroup iterator is a single session of
// at most 8 pages of output, too little for thousands of pods, so the
// records go to the map and user space reads them from its memory.
//
// PSI: the program copies what psi_show (kernel/sched/psi.c) prints from,
// the group's aggregated totals and running averages. It cannot run
// psi_show's aggregation of the per-CPU state, so the totals are as of the
// kernel's last averaging (every 2 s while the group is active); user space
// applies the averages' decay for the periods since, as psi_show would.

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

// enum psi_states up to CPU_FULL, identical since 5.13: IO_SOME, IO_FULL,
// MEM_SOME, MEM_FULL, CPU_SOME, CPU_FULL. IRQ_FULL (6.1+, with
// CONFIG_IRQ_TIME_ACCOUNTING) and NONIDLE follow and are not copied.
#define PSI_STATES 6

// flags
#define HAS_PSI 1      // the cgroup has a PSI group
#define PSI_DISABLED 2 // cgroup.pressure is 0 (6.2+): the files fail
#define HAS_MEMCG 4    // the memory controller is enabled in the cgroup

// Field order and sizes are mirrored by the decoder in cgroupstats.go.
struct cgroup_stat {
	__u64 id;                      // cgroup id: its kernfs node id, the directory's inode
	__u64 now_ns;                  // bpf_ktime_get_ns when the cgroup was read
	__u64 psi_total[PSI_STATES];   // group->total[PSI_AVGS][s], ns
	__u64 psi_avg_total[PSI_STATES];
	__u64 psi_avg[PSI_STATES * 3]; // group->avg[s][10s, 60s, 300s], FIXED_1 = 2048
	__u64 psi_avg_last_update;     // sched_clock ns
	__u64 psi_avg_next_update;
	__u64 mem_usage_pages;         // memcg->memory.usage
	__u64 mem_max_pages;           // memcg->memory.max
	__u64 mem_oom_kill;            // memory.events oom_kill
	__u32 level;                   // depth below the hierarchy's root
	__u32 flags;
};

// Keeps struct cgroup_stat in the object's BTF so that bpf2go emits its Go
// twin, which the decoder's layout test compares against.
const struct cgroup_stat *unused_cgroup_stat __attribute__((unused));

// Set by the loader.
const volatile __u32 capacity = 1;        // entries of cgroup_stats
const volatile bool local_events = false; // cgroup2 mounted with memory_localevents

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1); // resized by the loader
	__type(key, __u32);
	__type(value, struct cgroup_stat);
} cgroup_stats SEC(".maps");

// Pass state, reset by user space before each pass: the number of cgroups
// seen (records past capacity are counted but not written) and the level
// of the iterator's root, the first cgroup of a pre-order walk.
__u32 seen;
__s32 root_level = -1;
// Set by user space before each pass: the levels below the root to report.
__u32 max_depth = 2;
// The kernel's jiffies and clock when the pass reached its root: two passes
// give CONFIG_HZ, which sets PSI's averaging period, where the kernel's
// config cannot be read.
__u64 root_jiffies;
__u64 root_ns;

SEC("iter/cgroup")
int cgroup_stats_pass(struct bpf_iter__cgroup *ctx)
{
	struct cgroup *cg = ctx->cgroup;
	if (!cg)
		return 0;
	int level = BPF_CORE_READ(cg, level);
	if (root_level < 0) {
		root_level = level;
		root_jiffies = bpf_jiffies64();
		root_ns = bpf_ktime_get_ns();
	}
	if (level - root_level > (int)max_depth)
		return 0;
	__u32 i = seen;
	seen = i + 1;
	if (i >= capacity)
		return 0;
	struct cgroup_stat *r = bpf_map_lookup_elem(&cgroup_stats, &i);
	if (!r)
		return 0;
	__builtin_memset(r, 0, sizeof(*r));
	r->id = BPF_CORE_READ(cg, kn, id);
	r->level = level;
	r->now_ns = bpf_ktime_get_ns();

	struct psi_group *g = BPF_CORE_READ(cg, psi);
	if (g) {
		r->flags |= HAS_PSI;
		if (bpf_core_field_exists(g->enabled) && !BPF_CORE_READ(g, enabled))
			r->flags |= PSI_DISABLED;
		// The first row of total and avg_total is aggregator PSI_AVGS,
		// and avg's first 18 entries are states 0-5, whatever the
		// number of states this kernel has.
		bpf_probe_read_kernel(r->psi_total, sizeof(r->psi_total),
				      (void *)g + bpf_core_field_offset(g->total));
		bpf_probe_read_kernel(r->psi_avg_total, sizeof(r->psi_avg_total),
				      (void *)g + bpf_core_field_offset(g->avg_total));
		bpf_probe_read_kernel(r->psi_avg, sizeof(r->psi_avg),
				      (void *)g + bpf_core_field_offset(g->avg));
		r->psi_avg_last_update = BPF_CORE_READ(g, avg_last_update);
		r->psi_avg_next_update = BPF_CORE_READ(g, avg_next_update);
	}

	if (bpf_core_enum_value_exists(enum cgroup_subsys_id, memory_cgrp_id)) {
		int ssid = bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id);
		struct cgroup_subsys_state *css = NULL;
		if (ssid >= 0 && ssid < 16)
			css = BPF_CORE_READ(cg, subsys[ssid]);
		if (css) {
			// css is mem_cgroup's first member.
			struct mem_cgroup *m = (void *)css;
			int ev = bpf_core_enum_value(enum memcg_memory_event, MEMCG_OOM_KILL);
			r->flags |= HAS_MEMCG;
			r->mem_usage_pages = BPF_CORE_READ(m, memory.usage.counter);
			r->mem_max_pages = BPF_CORE_READ(m, memory.max);
			if (ev >= 0 && ev < 16) {
				if (local_events)
					r->mem_oom_kill = BPF_CORE_READ(m, memory_events_local[ev].counter);
				else
					r->mem_oom_kill = BPF_CORE_READ(m, memory_events[ev].counter);
			}
		}
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
