package pod

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// validate checks the options of a lazy pod checkpoint of p; nil l is an
// ordinary checkpoint.
func (l *Lazy) validate(p Pod, o Options) error {
	if l == nil {
		return nil
	}
	var errs []error
	if o.ImageRef != nil {
		errs = append(errs, errors.New("lazy: a checkpoint image holds no memory of a lazy checkpoint (ImageRef)"))
	}
	if l.TLS == nil {
		errs = append(errs, errors.New("lazy: no page server TLS: the memory would cross the network in the clear (Lazy.TLS)"))
	}
	if l.Address == "" {
		errs = append(errs, errors.New("lazy: no address for the page servers (Lazy.Address)"))
	}
	if l.Port == nil {
		errs = append(errs, errors.New("lazy: no port for the page servers (Lazy.Port)"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("pod %s/%s: %w: %w", p.Namespace, p.Name, errors.Join(errs...), errdefs.ErrInvalidArgument)
	}
	return nil
}

// lazyDump is one container's lazy dump, run by its own goroutine.
type lazyDump struct {
	dir       string // where criu.Checkpoint writes its archive
	server    criu.PageServer
	published chan struct{} // closed when its archive is published
	path      string        // the archive, once published
	started   time.Time
	ready     time.Time     // when it was published
	done      chan struct{} // closed when criu.Checkpoint returned
	res       criu.Result
	err       error
}

// checkpointLazy is Checkpoint with o.Lazy, from the work directory on.
// Each container's CRIU writes its archive into a directory of its own
// beside work, since it serves the memory, and holds its work files
// there, after the pod checkpoint is published; the archives are linked
// into work once every page server is ready.
func checkpointLazy(ctx context.Context, p Pod, o Options, work string, m Manifest, start time.Time) (res Result, err error) {
	published := false
	defer func() {
		if err == nil {
			return
		}
		// Useless without its memory: the pod checkpoint goes, before or
		// after it was published.
		rm := work
		if published {
			rm = res.Path
			res.Path = ""
		}
		if rmErr := os.RemoveAll(rm); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("remove %s: %w", rm, rmErr))
		}
	}()
	dumps := make([]*lazyDump, len(p.Containers))
	defer func() {
		for _, d := range dumps {
			if d != nil {
				if rmErr := os.RemoveAll(d.dir); rmErr != nil {
					err = errors.Join(err, fmt.Errorf("remove %s: %w", d.dir, rmErr))
				}
			}
		}
	}()
	used := map[int]bool{}
	for i, t := range p.Containers {
		port, err := freePort(o.Lazy.Port, used)
		if err != nil {
			return res, fmt.Errorf("pod %s/%s: container %s: page server port: %w", p.Namespace, p.Name, t.Ref.Container, err)
		}
		dir, err := makeWorkDir(o.Dir)
		if err != nil {
			return res, err
		}
		dumps[i] = &lazyDump{dir: dir, server: criu.PageServer{Address: o.Lazy.Address, Port: port},
			published: make(chan struct{}), done: make(chan struct{})}
	}

	thawAll, err := freezeAll(ctx, p, o, &m, &res)
	if err != nil {
		return res, err
	}
	frozenAt := m.FrozenAt
	defer func() {
		// Whatever happened: after the memory was fetched CRIU has killed
		// the trees, and the thaw lets the kill take effect on a frozen
		// cgroup v1; otherwise the pod runs on.
		err = errors.Join(err, thawAll())
	}()

	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := 0
	// wait ends every dump started and returns their errors.
	wait := func() error {
		var errs []error
		for i, d := range dumps[:started] {
			<-d.done
			if d.err != nil {
				errs = append(errs, fmt.Errorf("pod %s/%s: container %s (%d of %d): %w", p.Namespace, p.Name, p.Containers[i].Ref.Container, i+1, len(dumps), d.err))
			}
		}
		return errors.Join(errs...)
	}
	abort := func(why error) error {
		cancel()
		return errors.Join(why, wait())
	}
	// One container at a time until its page server is ready: CRIU
	// seizes a container's tasks by thawing its cgroup under their
	// ptrace stop (freezePod), and two CRIUs doing so at once in one pod
	// were seen to find a task in uninterruptible sleep ("Unseizable
	// non-zombie"). The pod stays frozen throughout, so the containers
	// are still dumped at one instant; each then serves while the next
	// is dumped.
	for i, t := range p.Containers {
		d := dumps[i]
		co := o.Criu
		// CRIU finds the container's cgroup frozen (freezePod), seizes
		// the tasks and keeps them stopped while it serves.
		co.ArchiveDir, co.Lazy, co.PageServerTLS = d.dir, &d.server, o.Lazy.TLS
		co.Now = func() time.Time { return m.CheckpointedAt }
		co.Published = func(path string) {
			d.path, d.ready = path, time.Now()
			close(d.published)
		}
		if o.Progress != nil {
			name := t.Ref.Container
			co.Progress = func(pr criu.Progress) { o.Progress(i, name, pr) }
		}
		d.started = time.Now()
		started++
		go func() {
			defer close(d.done)
			d.res, d.err = criu.Checkpoint(dctx, t, co)
		}()
		select {
		case <-d.published:
		case <-d.done:
			cancel()
			return res, errors.Join(fmt.Errorf("pod %s/%s: container %s ended before its page server was ready", p.Namespace, p.Name, t.Ref.Container), wait())
		case <-ctx.Done():
			return res, abort(fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, ctx.Err()))
		}
	}
	for i, d := range dumps {
		c, err := linkArchive(work, d.path)
		if err != nil {
			return res, abort(fmt.Errorf("pod %s/%s: container %s: %w", p.Namespace, p.Name, p.Containers[i].Ref.Container, err))
		}
		t := p.Containers[i]
		c.Name, c.ID, c.Image, c.ImageRef, c.PageServer = t.Ref.Container, t.ID, t.Image, t.ImageRef, d.server.String()
		c.DumpStartedAt, c.DumpFinishedAt = d.started.UTC(), d.ready.UTC()
		m.Containers = append(m.Containers, c)
	}
	// From here on the pod runs on the restoring side: the manifest
	// records the freeze up to the publication.
	m.ThawedAt = time.Now().UTC()
	if err := m.Validate(); err != nil {
		return res, abort(fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err))
	}
	if err := writeAndPublish(ctx, p, o, work, m, &res); err != nil {
		return res, abort(err)
	}
	published = true
	res.Frozen = time.Since(frozenAt)
	if o.Lazy.Published != nil {
		o.Lazy.Published(res.Path)
	}
	if err := wait(); err != nil {
		return res, err
	}
	for _, d := range dumps {
		res.Containers = append(res.Containers, d.res)
	}
	res.Total = time.Since(start)
	return res, nil
}

// linkArchive links the published archive path, and its signature if it
// has one, into work, and returns its manifest entry (Archive, Size).
func linkArchive(work, path string) (Container, error) {
	name := filepath.Base(path)
	fi, err := os.Stat(path)
	if err != nil {
		return Container{}, err
	}
	if err := os.Link(path, filepath.Join(work, name)); err != nil {
		return Container{}, fmt.Errorf("link %s into %s: %w", path, work, err)
	}
	sig := path + seal.SignatureSuffix
	if _, err := os.Stat(sig); err == nil {
		if err := os.Link(sig, filepath.Join(work, name+seal.SignatureSuffix)); err != nil {
			return Container{}, fmt.Errorf("link %s into %s: %w", sig, work, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return Container{}, err
	}
	return Container{Archive: name, Size: fi.Size()}, nil
}

// freePort asks port for a port that no other page server of the pod
// checkpoint takes (a port just closed may come back), and records it in
// used.
func freePort(port func() (int, error), used map[int]bool) (int, error) {
	for range 16 {
		n, err := port()
		if err != nil {
			return 0, err
		}
		if n <= 0 || n > 65535 {
			return 0, fmt.Errorf("port %d is not a TCP port", n)
		}
		if !used[n] {
			used[n] = true
			return n, nil
		}
	}
	return 0, errors.New("the same ports keep coming back")
}
