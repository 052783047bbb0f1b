// Package criu checkpoints and restores process trees with CRIU, and writes
// and reads the checkpoint archives that kubelet's Checkpoint API promises:
// root-only, uncompressed tars that checkpointctl reads.
//
// # Finding criu
//
// Find looks, in order, at a configured path (`nodeshim checkpoint
// --criu-path`), at $NODESHIM_CRIU, at `criu` on PATH, and at DefaultPath
// (/usr/sbin/criu, where nodeshim's image puts CRIU). The path may be a
// wrapper script: `make` installs .tools/bin/criu, which execs either the
// system's criu (when it passes `criu check`) or Debian trixie's criu 4.1.1
// unpacked into .tools/criu-trixie and run through that prefix's own
// dynamic loader, and exports NODESHIM_CRIU pointing at it for `make test`,
// `make bench` and `make run`. Requirements probes the same binary for the
// capability report: found, version, `criu check` (a failing check is
// Unsupported with CRIU's own message) and `criu check --feature NAME` for
// ProbedFeatures. One `criu swrk` session answers the version, the check
// and the three features CRIU's RPC knows; the other features, and any the
// session finds missing (for CRIU's message), run as `criu check
// --feature` processes. CRIU keeps the kernel facts it gathers in
// /run/criu.kdat only when /run is a tmpfs; where it is not (a disk, or a
// container's /run), those processes start in a mount namespace of their
// own with a tmpfs on /run, so that only the first gathers them.
//
// # Driving CRIU
//
// CRIU runs as `criu swrk` and is driven over its RPC socket with the
// message types of github.com/checkpoint-restore/go-criu/v7 (rpc, stats).
// go-criu's own Criu type hides the child and its socket, so a request could
// not be cancelled through it: Checkpoint owns both. When the context ends
// the socket is shut down, CRIU aborts at its next notification and cures
// the tasks it seized; if it has not exited after Options.KillGrace it is
// killed. Either way Checkpoint then checks /proc/PID/status: the target
// must be alive, not stopped and not traced (a tree left stopped is sent
// SIGCONT). Dumps always use leave-running.
//
// CRIU is run without hardware breakpoints (see noBreakpointsEnv): on
// machines where they do not fire, CRIU otherwise hangs at the end of a dump
// of a multi-threaded process with the target frozen.
//
// # Options a target needs
//
// A plain process tree on the host (`--pid`) that holds no TCP connections,
// no unix sockets to outside peers, no file locks and no terminal needs
// none of Options' switches. Otherwise: TCPEstablished for established TCP
// connections, ExtUnixSockets for unix sockets connected outside the tree,
// FileLocks for held locks, ShellJob for a tree in a terminal session. A
// container additionally needs what a runtime passes (ContainerOptions, as
// runc sets them): its root, --external entries for bind mounts and
// namespaces it shares, its cgroup, an orphan pty master. The shim's
// checkpoint service (shim/checkpoint) fills these in for
// --namespace/--pod/--container from the container runtime, and keeps to one
// checkpoint per container at a time and a bound across containers.
//
// # Archives
//
// An archive is named as kubelet names it,
// checkpoint-<pod>_<namespace>-<container>-<RFC3339 time in UTC>.tar, under
// <root-dir>/checkpoints (mode 0700). When that name exists (two checkpoints
// in the same second, or any other file), "-1", "-2", ... is appended after
// the timestamp: the name is claimed with renameat2(RENAME_NOREPLACE), so
// nothing is ever overwritten. The tar holds checkpoint/ and the CRIU images
// under it, config.dump, spec.dump, dump.log and stats-dump, all USTAR, no
// "./" prefix (the one PAX record, a "comment" that fills the gap before
// the pages image, is skipped by every tar). CRIU writes into a private 0700
// work directory (.nodeshim-work-<pid>-<random>) in the same directory.
// Where the filesystem can insert a range (ext4, XFS), the archive is built
// around CRIU's largest pages image in that directory, so the pages are
// written once; elsewhere (tmpfs), or with Options.CopyArchive, the images
// are copied into .nodeshim-tmp-<pid>-<random>.tar, opened O_EXCL with mode
// 0600. Either file is fsynced, made 0600, renamed into place without
// replacing anything, and the directory fsynced: no one but root ever sees
// it before it is complete. Work directory and temp file are removed on any
// failure; what a killed nodeshim leaves behind is removed by the next
// checkpoint into the same directory.
//
// Restore validates the whole archive first (archive.Validate: symlinks
// followed through each other, sizes bounded) and unpacks it through an
// os.Root (archive.Unpack), so no entry can land outside the work
// directory and a refused archive leaves nothing. The archive format
// itself, and everything that reads an archive from outside, is package
// criu/archive; the names here that forward to it keep callers compiling.
package criu
