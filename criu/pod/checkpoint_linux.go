package pod

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/archive"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/criu/image"
	"github.com/nodeshim/nodeshim/criu/workentry"
	"github.com/nodeshim/nodeshim/internal/atomicfile"
	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// workPrefix starts the work directory of a pod checkpoint being written,
// followed by nodeshim's pid: the prefix of every nodeshim work entry in a
// checkpoint directory, which the sweep of leftovers removes once its
// maker is gone.
const workPrefix = ".nodeshim-work-"

// DefaultFreezeTimeout bounds the wait for the pod's cgroup to freeze.
const DefaultFreezeTimeout = 5 * time.Second

// ErrNotFrozen: the pod's cgroup did not freeze in time (class
// errdefs.ErrUnavailable: a task in uninterruptible sleep, for example).
var ErrNotFrozen = errdefs.New(errdefs.ErrUnavailable, "the pod's cgroup did not freeze")

// Pod is what Checkpoint dumps: a pod's identity, its sandbox settings,
// its freezer cgroup and its running containers.
type Pod struct {
	// Namespace, Name, UID and SandboxID identify the pod.
	Namespace, Name, UID, SandboxID string
	// Sandbox is recorded in the manifest; Checkpoint fills Architecture,
	// Kernel and CRIUVersion.
	Sandbox Sandbox
	// FreezeCgroup is the pod's freezer cgroup directory: the cgroup v1
	// freezer hierarchy's pod cgroup, or the pod's cgroup v2 directory.
	// Every container's FreezeCgroup must be below it.
	FreezeCgroup string
	// Containers are the running containers, in the pod's order; each
	// Target names its container (Ref) and describes it as
	// criu.ContainerTarget does.
	Containers []criu.Target
	// InitContainers are the init containers that had finished.
	InitContainers []InitContainer
}

// Options configure a pod checkpoint.
type Options struct {
	// Dir is the checkpoint directory the pod checkpoint is published in.
	Dir string
	// Criu are the options of each container's dump (Binary, ProcRoot,
	// Logger, KillGrace, the dump flags, Seal); its ArchiveDir, Frozen,
	// Now, Progress, Lazy, PageServerTLS and Published are set by
	// Checkpoint (the last three from Options.Lazy). With Criu.Seal every
	// container's archive is encrypted and signed as a container
	// checkpoint's is, and its signer also signs the manifest
	// (ManifestFile + seal.SignatureSuffix beside it).
	Criu criu.Options
	// Now is the clock of names and records; time.Now when nil.
	Now func() time.Time
	// FreezeTimeout bounds the freeze; DefaultFreezeTimeout when zero.
	FreezeTimeout time.Duration
	// Room, when set, is called with the estimated size of the whole pod
	// checkpoint before anything is frozen; an error refuses the
	// checkpoint.
	Room func(estimate int64) error
	// Progress, when set, is called with the container being dumped (its
	// index and name) and CRIU's progress.
	Progress func(i int, name string, p criu.Progress)
	// ImageRef, when set, asks for one OCI checkpoint image per container,
	// named ImageRef(container name), written into the pod checkpoint as
	// "<archive name without .tar>.oci.tar" (criu/image).
	ImageRef func(container string) string
	// Lazy, when set, makes the checkpoint the first half of a lazy pod
	// migration (see Lazy); not with ImageRef.
	Lazy *Lazy
}

// Lazy makes a pod checkpoint the first half of a lazy pod migration:
// CRIU dumps every container but its memory, and serves each
// container's memory from a page server of its own (criu.Options.Lazy),
// over mutual TLS, while the pod stays frozen, until a restore has
// fetched all of it; then CRIU kills the containers' trees, which run on
// where they were restored.
type Lazy struct {
	// Address is the host the page servers listen on (the node's IP),
	// and what the manifest names as each container's page server.
	Address string
	// Port returns a free TCP port for one container's page server.
	Port func() (int, error)
	// TLS is required: the memory never crosses the network in the
	// clear.
	TLS *criu.TLS
	// Published, if set, is called with the pod checkpoint's path once
	// it is published and every page server is ready, while the page
	// servers wait for the restore.
	Published func(path string)
}

// Result describes a published pod checkpoint.
type Result struct {
	// Path is the pod checkpoint directory; Manifest its manifest.
	Path     string
	Manifest Manifest
	// Size sums its files' sizes.
	Size int64
	// Frozen is how long the pod was frozen (from the freeze's completion
	// to the thaw), Freezing how long the freeze took, Total the whole
	// call.
	Frozen, Freezing, Total time.Duration
	// Containers are the containers' results, in order.
	Containers []criu.Result
}

// Checkpoint checkpoints every container of p at one instant: it freezes
// p's cgroup once, dumps each container in order with criu.Checkpoint
// into a private work directory while the whole pod stays frozen (CRIU
// finds the containers' cgroups frozen, seizes the tasks as they are and
// leaves them frozen), thaws the pod once, whatever happened (a failed
// dump, ctx ending), writes the manifest and publishes the work directory
// under Name's name (renameat2 RENAME_NOREPLACE): a pod checkpoint is
// never visible half-written. On error nothing is left in o.Dir, but a
// work directory that a crash interrupted, which the sweep of leftovers
// removes.
//
// With o.Lazy, the containers are dumped one after the other while the
// pod stays frozen, each by a CRIU that then serves its memory from a
// page server on o.Lazy.Address (see Lazy) while the next is dumped; once
// every page server is ready the manifest, which names each
// container's page server, is written and the pod checkpoint published,
// and o.Lazy.Published called. Checkpoint then returns when the restore
// has fetched all the memory, and the containers' trees are gone. If ctx
// ends or a dump fails first, the pod is thawed and runs on, and the pod
// checkpoint, useless without its memory, is removed again.
func Checkpoint(ctx context.Context, p Pod, o Options) (res Result, err error) {
	start := time.Now()
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.FreezeTimeout <= 0 {
		o.FreezeTimeout = DefaultFreezeTimeout
	}
	if err := p.validate(); err != nil {
		return res, err
	}
	if o.ImageRef != nil && len(o.Criu.Seal.Recipients) > 0 {
		return res, fmt.Errorf("pod %s/%s: a checkpoint image would hold the encrypted archives' plain text (make encrypted images of the archives with nodeshim checkpoint image --encryption-key): %w", p.Namespace, p.Name, errdefs.ErrInvalidArgument)
	}
	if err := o.Lazy.validate(p, o); err != nil {
		return res, err
	}
	bin := o.Criu.Binary
	ver, err := bin.Version(ctx)
	if err != nil {
		return res, fmt.Errorf("pod %s/%s: criu version: %w", p.Namespace, p.Name, err)
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return res, fmt.Errorf("uname: %w", err)
	}
	at := o.Now()
	m := Manifest{Kind: Kind, Version: Version, Namespace: p.Namespace, Name: p.Name, UID: p.UID, SandboxID: p.SandboxID,
		Sandbox: p.Sandbox, InitContainers: p.InitContainers, CheckpointedAt: at.UTC()}
	m.Sandbox.Architecture, m.Sandbox.Kernel, m.Sandbox.CRIUVersion = runtime.GOARCH, unix.ByteSliceToString(uts.Release[:]), ver.String()

	if o.Room != nil {
		var est int64
		for _, t := range p.Containers {
			n, err := criu.EstimateSize(o.Criu.ProcRoot, t)
			if err != nil {
				return res, fmt.Errorf("pod %s/%s: container %s: %w", p.Namespace, p.Name, t.Ref.Container, err)
			}
			est += n
		}
		if err := o.Room(est); err != nil {
			return res, fmt.Errorf("pod %s/%s refused before freezing anything: %w", p.Namespace, p.Name, err)
		}
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return res, fmt.Errorf("create %s: %w", o.Dir, err)
	}
	work, err := makeWorkDir(o.Dir)
	if err != nil {
		return res, err
	}
	defer func() {
		if err != nil {
			if rmErr := os.RemoveAll(work); rmErr != nil {
				err = errors.Join(err, fmt.Errorf("remove %s: %w", work, rmErr))
			}
		}
	}()

	if o.Lazy != nil {
		return checkpointLazy(ctx, p, o, work, m, start)
	}
	if err := dumpFrozen(ctx, p, o, work, &m, &res); err != nil {
		return res, err
	}
	if o.ImageRef != nil {
		for i := range m.Containers {
			if err := writeImage(work, &m.Containers[i], o.ImageRef(m.Containers[i].Name)); err != nil {
				return res, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
			}
		}
	}
	if err := m.Validate(); err != nil {
		return res, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	if err := writeAndPublish(ctx, p, o, work, m, &res); err != nil {
		return res, err
	}
	res.Total = time.Since(start)
	return res, nil
}

// writeAndPublish writes m into work as the manifest, signs it, and
// publishes work in o.Dir; it sets res's Path, Manifest and Size.
func writeAndPublish(ctx context.Context, p Pod, o Options, work string, m Manifest, res *Result) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", ManifestFile, err)
	}
	if err := atomicfile.WriteNew(filepath.Join(work, ManifestFile), b, 0o600); err != nil {
		return err
	}
	// The manifest's signature binds the pod to its archives (names,
	// sizes), each signed on its own.
	if err := seal.SignFile(filepath.Join(work, ManifestFile), seal.WriteOptions{Signer: o.Criu.Seal.Signer, Now: o.Now}); err != nil {
		return fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	if err := atomicfile.SyncDir(work); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	res.Path, err = publish(o.Dir, work, func(attempt int) string { return Name(p.Namespace, p.Name, m.CheckpointedAt, attempt) })
	if err != nil {
		return err
	}
	res.Manifest = m
	res.Size = int64(len(b))
	for _, c := range m.Containers {
		res.Size += c.Size
		if c.CheckpointImage != "" {
			if fi, err := os.Stat(filepath.Join(res.Path, c.CheckpointImage)); err == nil {
				res.Size += fi.Size()
			}
		}
	}
	return nil
}

// validate checks that p can be dumped and named.
func (p Pod) validate() error {
	var errs []error
	for _, n := range []struct{ what, v string }{{"namespace", p.Namespace}, {"pod", p.Name}} {
		if err := checkName(n.what, n.v); err != nil {
			errs = append(errs, err)
		}
	}
	if len(p.Containers) == 0 {
		errs = append(errs, fmt.Errorf("no running container to checkpoint: %w", errdefs.ErrInvalidArgument))
	}
	if p.FreezeCgroup == "" {
		errs = append(errs, fmt.Errorf("no freezer cgroup of the pod: %w", errdefs.ErrNotSupported))
	}
	for _, t := range p.Containers {
		if t.Ref.Namespace != p.Namespace || t.Ref.Pod != p.Name {
			errs = append(errs, fmt.Errorf("container %s is not in pod %s/%s: %w", t.Ref, p.Namespace, p.Name, errdefs.ErrInvalidArgument))
		}
		if rel, err := filepath.Rel(p.FreezeCgroup, t.Container.FreezeCgroup); t.Container.FreezeCgroup == "" || err != nil || rel == "." || !filepath.IsLocal(rel) {
			errs = append(errs, fmt.Errorf("container %s: its freezer cgroup %q is not below the pod's %s: %w", t.Ref, t.Container.FreezeCgroup, p.FreezeCgroup, errdefs.ErrInvalidArgument))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, errors.Join(errs...))
	}
	return nil
}

// checkName checks a namespace or pod name against the name rules of
// the archives (archive.CheckName's): it goes into file names.
func checkName(what, v string) error {
	if archive.CheckName(ManifestFile, what, v) != nil {
		return fmt.Errorf("%s %q is not a valid name: %w", what, v, errdefs.ErrInvalidArgument)
	}
	return nil
}

// dumpFrozen freezes the pod, dumps each container into work and thaws
// the pod, also when a dump fails or ctx ends.
func dumpFrozen(ctx context.Context, p Pod, o Options, work string, m *Manifest, res *Result) (err error) {
	thawAll, err := freezeAll(ctx, p, o, m, res)
	if err != nil {
		return err
	}
	frozenAt := m.FrozenAt
	defer func() {
		// Thaw once, whatever happened: the deferred call runs on every
		// return path, an aborted dump's included.
		terr := thawAll()
		thawedAt := time.Now()
		res.Frozen = thawedAt.Sub(frozenAt)
		m.ThawedAt = thawedAt.UTC()
		err = errors.Join(err, terr)
	}()
	for i, t := range p.Containers {
		co := o.Criu
		// CRIU finds the container's cgroup frozen: it seizes the tasks
		// and freezes the cgroup again when done (see freezePod), and
		// criu.Checkpoint leaves it frozen for thawPod.
		// Every archive carries the pod checkpoint's time, in its name
		// and in config.dump.
		co.ArchiveDir, co.Lazy, co.Published = work, nil, nil
		co.Now = func() time.Time { return m.CheckpointedAt }
		if o.Progress != nil {
			name := t.Ref.Container
			co.Progress = func(pr criu.Progress) { o.Progress(i, name, pr) }
		}
		started := time.Now()
		r, err := criu.Checkpoint(ctx, t, co)
		if err != nil {
			return fmt.Errorf("pod %s/%s: container %s (%d of %d): %w", p.Namespace, p.Name, t.Ref.Container, i+1, len(p.Containers), err)
		}
		res.Containers = append(res.Containers, r)
		m.Containers = append(m.Containers, Container{Name: t.Ref.Container, ID: t.ID, Image: t.Image, ImageRef: t.ImageRef,
			Archive: filepath.Base(r.Path), Size: r.Size, DumpStartedAt: started.UTC(), DumpFinishedAt: time.Now().UTC()})
	}
	return nil
}

// freezeAll freezes the pod (freezePod), recording the freeze for a
// nodeshim that comes after a killed one, sets m.FrozenAt and
// res.Freezing, and returns the function that thaws the pod again
// (thawPod) and drops the record.
func freezeAll(ctx context.Context, p Pod, o Options, m *Manifest, res *Result) (thawAll func() error, err error) {
	var cgroups []string
	for _, t := range p.Containers {
		cgroups = append(cgroups, t.Container.FreezeCgroup)
	}
	// A nodeshim killed from the freeze to the thaw leaves this record
	// behind, and the next one thaws the pod (workentry.ThawLeftFrozen).
	record, err := workentry.RecordFrozen(o.Criu.LockDir, append(slices.Clone(cgroups), p.FreezeCgroup))
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	freezeStart := time.Now()
	frozenAt, err := freezePod(ctx, p.FreezeCgroup, cgroups, o.FreezeTimeout)
	if err != nil {
		// freezePod thawed what it froze.
		return nil, errors.Join(fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err), record.Thawed())
	}
	res.Freezing = frozenAt.Sub(freezeStart)
	m.FrozenAt = frozenAt.UTC()
	return func() error {
		if err := thawPod(p.FreezeCgroup, cgroups, o.FreezeTimeout); err != nil {
			// The record stays: the next nodeshim tries again.
			return fmt.Errorf("pod %s/%s: thaw: %w: %w", p.Namespace, p.Name, err, criu.ErrTargetLost)
		}
		if err := record.Thawed(); err != nil {
			return fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		return nil
	}, nil
}

// writeImage writes c's OCI checkpoint image named ref beside its archive.
func writeImage(work string, c *Container, ref string) error {
	a, err := os.Open(filepath.Join(work, c.Archive))
	if err != nil {
		return err
	}
	defer a.Close()
	name := c.Archive[:len(c.Archive)-len(".tar")] + ".oci.tar"
	p := filepath.Join(work, name)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", p, err)
	}
	_, werr := image.Write(a, ref, f)
	if werr == nil {
		werr = f.Sync()
	}
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("checkpoint image %s of container %s: %w", ref, c.Name, err)
	}
	c.CheckpointImage, c.CheckpointImageRef = name, ref
	return nil
}

// makeWorkDir makes a private work directory in dir named
// workPrefix<pid>-<random>.
func makeWorkDir(dir string) (string, error) {
	for range 8 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("random name: %w", err)
		}
		p := filepath.Join(dir, workPrefix+strconv.Itoa(os.Getpid())+"-"+hex.EncodeToString(b[:]))
		err := os.Mkdir(p, 0o700)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("create %s: %w", p, err)
		}
		return p, nil
	}
	return "", fmt.Errorf("create a work directory in %s: names keep colliding", dir)
}

// publish renames the directory work into dir under the first name that
// is free, never replacing anything (renameat2 RENAME_NOREPLACE), and
// fsyncs dir.
func publish(dir, work string, name func(attempt int) string) (string, error) {
	for attempt := 0; attempt < 1000; attempt++ {
		final := filepath.Join(dir, name(attempt))
		err := unix.Renameat2(unix.AT_FDCWD, work, unix.AT_FDCWD, final, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("rename %s to %s: %w", work, final, err)
		}
		return final, atomicfile.SyncDir(dir)
	}
	return "", fmt.Errorf("rename %s: 1000 names in %s are taken", work, dir)
}
