package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nodeshim/nodeshim/criu/pod"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/shim/checkpoint/retention"
)

// RemoveCheckpoint removes the checkpoint name of the configured
// checkpoint directory, as the retention policy removes one: a container
// archive (with its signature) or a pod checkpoint as a unit, through
// retention's trash, so that a crash leaves it whole or in the trash.
// name must be a base name that retention or criu/pod recognise
// (errdefs.ErrInvalidArgument otherwise); one already gone is no error;
// an archive a restore is reading is left (errdefs.ErrBusy). A pod
// checkpoint whose memory is being served lazily (PodOptions.Lazy) is
// first given back: its serve ends, the pod thaws and runs on. It is
// api.CheckpointRemover.
func (s *Service) RemoveCheckpoint(ctx context.Context, name string) error {
	set := s.opts.Settings()
	if !set.Enabled || set.Dir == "" {
		return errdefs.New(errdefs.ErrNotFound, "checkpoints are not enabled on this node")
	}
	_, _, _, _, isPod := pod.ParseName(name)
	_, _, _, isArchive := retention.ParseName(name)
	if filepath.Base(name) != name || (!isPod && !isArchive) {
		return errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("%q is not the name of a checkpoint", name))
	}
	// Before pruneMu: the serve's end applies retention.
	if isPod {
		if err := s.stopServing(ctx, name); err != nil {
			return fmt.Errorf("remove checkpoint: %w", err)
		}
	}
	s.pruneMu.Lock()
	defer s.pruneMu.Unlock()
	fi, err := os.Lstat(filepath.Join(set.Dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove checkpoint: %w", err)
	}
	switch {
	case isPod && fi.IsDir():
		err = removePodCheckpoint(set.Dir, name)
	case isArchive && fi.Mode().IsRegular():
		err = retention.Remove(set.Dir, name)
		if errors.Is(err, retention.ErrHeld) {
			return errdefs.New(errdefs.ErrBusy, fmt.Sprintf("checkpoint %s is being read (a restore, an image build)", name))
		}
	default:
		return errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("%s in %s is not a checkpoint (%s)", name, set.Dir, fi.Mode().Type()))
	}
	if err != nil {
		return err
	}
	s.opts.Logger.Info("checkpoint removed on request", "checkpoint", name, "dir", set.Dir)
	return nil
}
