// Package seccomp validates, compiles, verifies and loads the seccomp
// profiles Kubernetes containers run under. Installing Localhost profiles
// under the kubelet's seccomp root is shim/profiles' (what serve runs).
//
// A profile is OCI runtime-spec seccomp JSON or the Docker/moby profile
// shape (archMap, includes/excludes by capability, architecture and
// minKernel), which Parse resolves for one node. Validation errors are
// *FieldError values naming the JSON path ("syscalls[12].args[0].op").
// EffectiveProfile applies the kubelet's rules (container over pod,
// privileged means Unconfined, Localhost relative to the seccomp root).
//
// Compile builds the BPF program with libseccomp (binary tree layout when
// the library has it) for the native architecture plus the profile's. When
// the default action denies, a short prefix answers ENOSYS for every
// syscall number above the highest one the profile names on that
// architecture, the rule runc's "enosys" patch uses: such a syscall is
// newer than the profile or unknown to the kernel, and ENOSYS is what lets
// libc fall back to an older call.
//
// Loading a filter happens in a re-executed copy of the running binary, in
// a C constructor that runs before the Go runtime starts any thread
// (child_linux.c). Command and Exec use it to run a program under a filter
// (no_new_privs, SECCOMP_FILTER_FLAG_TSYNC, then execve, same pid); Verify
// uses it to call syscalls under the filter and compare the kernel's
// answers with what the profile means (Profile.Evaluate). Any binary that
// links this package carries the constructor; it does nothing unless
// NODESHIM_SECCOMP_CHILD is set in its environment.
package seccomp
