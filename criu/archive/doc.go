// Package archive is the checkpoint archive format that kubelet, CRI-O,
// containerd, podman and checkpointctl share: the names of its members
// (checkpoint/, config.dump, spec.dump, status.dump, rootfs-diff.tar,
// deleted.files), the records config.dump and spec.dump hold, and the code
// that reads an archive from outside: Validate, ReadMeta, Unpack and
// ApplyRootfsDiff.
//
// An archive is outside input. Every value this package returns from one
// has been checked against its grammar (names, image references,
// annotations); every path it opens or writes is resolved beneath the
// directory it belongs to, the way the kernel resolves it (os.Root); and
// what an archive may expand to is bounded (Limits) before anything is
// written. Refusals wrap ErrInvalid, of class errdefs.ErrInvalidArgument,
// and name the member.
package archive
