package criu

import (
	"context"

	"github.com/nodeshim/nodeshim/criu/archive"
)

// WriteRootfsDiff is archive.WriteRootfsDiff: it writes rootfs-diff.tar
// and deleted.files of layer into dir.
func WriteRootfsDiff(ctx context.Context, layer Layer, dir string) error {
	return archive.WriteRootfsDiff(ctx, layer, dir)
}

// ApplyRootfsDiff is archive.ApplyRootfsDiff within the default
// archive.Limits: it applies rootfs-diff.tar and deleted.files of the
// unpacked archive in dir to the container root rootfs.
func ApplyRootfsDiff(dir, rootfs string) error {
	return archive.ApplyRootfsDiff(dir, rootfs, archive.Limits{})
}
