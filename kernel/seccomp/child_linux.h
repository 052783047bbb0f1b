// Shared layout of the seccomp child's probe records (child_linux.c) and
// their Go reader (child_linux.go).
#ifndef NODESHIM_SECCOMP_CHILD_H
#define NODESHIM_SECCOMP_CHILD_H

#include <stddef.h>
#include <stdint.h>

#define NODESHIM_ENV_CHILD "NODESHIM_SECCOMP_CHILD"
#define NODESHIM_ENV_PROG_FD "NODESHIM_SECCOMP_PROG_FD"
#define NODESHIM_ENV_FLAGS "NODESHIM_SECCOMP_FLAGS"
#define NODESHIM_ENV_PROBE_FD "NODESHIM_SECCOMP_PROBE_FD"
#define NODESHIM_ENV_BENCH_N "NODESHIM_SECCOMP_BENCH_N"

#define NODESHIM_PROBE_MAGIC 0x6e736363u
#define NODESHIM_PROBE_FORKLIKE 1u
#define NODESHIM_PROBE_I386 2u /* call through int $0x80, the x86 (ia32) ABI */
/* The call may end the record's process (exit, exit_group): a normal exit
   during the call is the record's answer, state NODESHIM_PROBE_EXITED with
   the exit status in ret. */
#define NODESHIM_PROBE_EXITLIKE 4u
#define NODESHIM_PROBE_EXITED 3u

struct nodeshim_probe_hdr {
	uint32_t magic;
	uint32_t count;
	int32_t setup_errno;
	uint32_t installed;
	uint32_t workers; /* processes forked, one a record */
	uint32_t reserved;
};

struct nodeshim_probe_rec {
	int64_t nr;
	uint64_t args[6];
	uint32_t flags;
	uint32_t state; /* 0 pending, 1 started, 2 done, 3 exited in the call */
	int64_t ret;
	int32_t err;
	int32_t trapped;
	int32_t trap_nr;
	int32_t trap_data;
	int32_t signal; /* the signal the record's process died of, or 0 */
	uint32_t reserved;
};

/* decodeResults and encodeRecords in child_linux.go use these offsets. */
_Static_assert(sizeof(struct nodeshim_probe_hdr) == 24, "probe header layout");
_Static_assert(offsetof(struct nodeshim_probe_hdr, workers) == 16, "workers offset");
_Static_assert(sizeof(struct nodeshim_probe_rec) == 96, "probe record layout");
_Static_assert(offsetof(struct nodeshim_probe_rec, flags) == 56, "flags offset");
_Static_assert(offsetof(struct nodeshim_probe_rec, state) == 60, "state offset");
_Static_assert(offsetof(struct nodeshim_probe_rec, ret) == 64, "ret offset");
_Static_assert(offsetof(struct nodeshim_probe_rec, err) == 72, "err offset");
_Static_assert(offsetof(struct nodeshim_probe_rec, trap_data) == 84, "trap_data offset");
_Static_assert(offsetof(struct nodeshim_probe_rec, signal) == 88, "signal offset");

#endif
