// Shared layout of the seccomp child's probe records (child_linux.c) and
// their Go reader (child_linux.go).
#ifndef NODESHIM_SECCOMP_CHILD_H
#define NODESHIM_SECCOMP_CHILD_H

#include <stdint.h>

#define NODESHIM_ENV_CHILD "NODESHIM_SECCOMP_CHILD"
#define NODESHIM_ENV_PROG_FD "NODESHIM_SECCOMP_PROG_FD"
#define NODESHIM_ENV_FLAGS "NODESHIM_SECCOMP_FLAGS"
#define NODESHIM_ENV_PROBE_FD "NODESHIM_SECCOMP_PROBE_FD"
#define NODESHIM_ENV_PROBE_START "NODESHIM_SECCOMP_PROBE_START"

#define NODESHIM_PROBE_MAGIC 0x6e736363u
#define NODESHIM_PROBE_FORKLIKE 1u

struct nodeshim_probe_hdr {
	uint32_t magic;
	uint32_t count;
	int32_t setup_errno;
	uint32_t installed;
};

struct nodeshim_probe_rec {
	int64_t nr;
	uint64_t args[6];
	uint32_t flags;
	uint32_t state; /* 0 pending, 1 started, 2 done */
	int64_t ret;
	int32_t err;
	int32_t trapped;
	int32_t trap_nr;
	int32_t trap_data;
};

#endif
