package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/archive"
	"github.com/nodeshim/nodeshim/criu/pod"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/runtimes/cri"
	"github.com/nodeshim/nodeshim/shim/checkpoint/retention"
	"github.com/nodeshim/nodeshim/shim/config"
	"github.com/nodeshim/nodeshim/shim/status"
)

// PodRef names a pod: POST /checkpoint/{namespace}/{pod}.
type PodRef struct {
	Namespace, Name string
}

func (r PodRef) String() string { return r.Namespace + "/" + r.Name }

// PodOptions are a pod checkpoint's options (KEP-5823's CheckpointPod
// request: a timeout and options).
type PodOptions struct {
	// Timeout bounds the checkpoint; zero is the configured default.
	Timeout time.Duration
	// ImageRef, when set, asks for one OCI checkpoint image per container,
	// named "<ImageRef>-<container>" (a tag of ImageRef is kept at the end).
	ImageRef string
	// Lazy makes the checkpoint the first half of a lazy pod migration
	// (pod.Lazy): CheckpointPod returns once the pod checkpoint, without
	// the containers' memory, is published, and the memory is served from
	// a page server per container on the host of api.tcpAddress, over
	// mutual TLS with the node's certificate (Settings.PageServer), in
	// the background, while the pod stays frozen, until a restore has
	// fetched it all or Timeout ends. Not with ImageRef.
	Lazy bool
}

// PageServerSettings are what a lazy pod checkpoint's page servers need
// of the node API's settings: they listen on the host of its TCP
// address (the node's transfer address), present the node's certificate
// and accept only a restoring node whose certificate the cluster's node
// CA issued.
type PageServerSettings struct {
	// TCPAddress is api.tcpAddress; CertFile, KeyFile and CAFile are
	// api.tlsCertFile, api.tlsKeyFile and api.clientCAFile.
	TCPAddress, CertFile, KeyFile, CAFile string
}

// lazy returns the pod.Lazy of a lazy pod checkpoint with these
// settings, or an error wrapping errdefs.ErrInvalidArgument that names
// the settings missing.
func (ps PageServerSettings) lazy() (*pod.Lazy, error) {
	var missing []string
	for _, f := range []struct{ name, v string }{{"api.tcpAddress", ps.TCPAddress}, {"api.tlsCertFile", ps.CertFile},
		{"api.tlsKeyFile", ps.KeyFile}, {"api.clientCAFile", ps.CAFile}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("a lazy pod checkpoint serves the memory over mutual TLS on the node's transfer address: %s not configured: %w",
			strings.Join(missing, ", "), errdefs.ErrInvalidArgument)
	}
	host, _, err := net.SplitHostPort(ps.TCPAddress)
	if err != nil {
		return nil, fmt.Errorf("api.tcpAddress %q: %w: %w", ps.TCPAddress, err, errdefs.ErrInvalidArgument)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return nil, fmt.Errorf("api.tcpAddress %q names no host the restoring node can reach the page servers on (the node's IP): %w", ps.TCPAddress, errdefs.ErrInvalidArgument)
	}
	return &pod.Lazy{Address: host, TLS: &criu.TLS{CACert: ps.CAFile, Cert: ps.CertFile, Key: ps.KeyFile},
		Port: func() (int, error) {
			// A port the kernel picks for host, free a moment ago.
			l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
			if err != nil {
				return 0, fmt.Errorf("page server port on %s: %w", host, err)
			}
			defer l.Close()
			return l.Addr().(*net.TCPAddr).Port, nil
		}}, nil
}

// lazyServe is a lazy pod checkpoint being served in the background.
type lazyServe struct {
	cancel context.CancelFunc
	done   <-chan struct{} // closed when the serve has ended
}

// ErrPodNotRunning: a container of the pod is not running (starting,
// restarting, or exited while not an init container): the pod cannot be
// checkpointed at one consistent instant now (class errdefs.ErrBusy).
var ErrPodNotRunning = errdefs.New(errdefs.ErrBusy, "a container of the pod is not running")

// PodImageRef is the checkpoint image name of container in a pod
// checkpoint asked with image ref: "<repository>-<container>[:tag]".
func PodImageRef(ref, container string) string {
	repo, tag := ref, ""
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		repo, tag = ref[:i], ref[i:]
	}
	return repo + "-" + container + tag
}

// podKey is the busy key of a pod checkpoint.
func podKey(p PodRef) criu.ContainerRef {
	return criu.ContainerRef{Namespace: p.Namespace, Pod: p.Name}
}

// CheckpointPod checkpoints every running container of the pod p at one
// instant (criu/pod: the pod's cgroup frozen once) into one pod
// checkpoint in the checkpoint directory. Errors wrapping ErrNotFound mean
// an unknown pod or the feature being off; ErrBusy a checkpoint of the
// pod or of one of its containers in progress, or a container not
// running.
//
// With opts.Lazy it returns once the pod checkpoint is published (its
// Result has Path, Manifest, Size and Frozen), and serves the memory in
// the background until a restore has fetched it, the timeout ends,
// RemoveCheckpoint removes the pod checkpoint or Close is called; the
// pod's busy marks, target locks and slot are held until then, and a
// serve that ends unfetched thaws the pod and removes the pod checkpoint.
// A request ctx that ends before the publication aborts the checkpoint.
func (s *Service) CheckpointPod(ctx context.Context, p PodRef, opts PodOptions) (pod.Result, error) {
	if !opts.Lazy {
		return s.checkpointPod(ctx, p, opts, nil)
	}
	// The serve outlives the request once the pod checkpoint is
	// published; until then the request may abort it.
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	ended := make(chan struct{})
	published := make(chan pod.Result, 1)
	sv := &lazyServe{cancel: cancel, done: ended}
	var res pod.Result
	var err error
	go func() {
		defer close(ended)
		defer cancel()
		res, err = s.checkpointPod(bg, p, opts, func(path string) {
			m, merr := pod.ReadManifest(path)
			if merr != nil {
				s.opts.Logger.Warn("lazy pod checkpoint: read back its manifest", "path", path, "err", merr)
			}
			r := pod.Result{Path: path, Manifest: m, Size: podCheckpointSize(path), Frozen: m.ThawedAt.Sub(m.FrozenAt)}
			s.mu.Lock()
			s.serving[filepath.Base(path)] = sv
			s.mu.Unlock()
			published <- r
		})
		s.mu.Lock()
		for name, v := range s.serving {
			if v == sv {
				delete(s.serving, name)
			}
		}
		s.mu.Unlock()
	}()
	select {
	case r := <-published:
		if stop() {
			return r, nil
		}
		// The request ended just as the pod checkpoint was published:
		// the serve was cancelled with it.
		<-ended
		if err == nil {
			err = fmt.Errorf("checkpoint of pod %s: %w", p, ctx.Err())
		}
		return pod.Result{}, err
	case <-ended:
		stop()
		return res, err
	}
}

// podCheckpointSize sums the sizes of the files in the pod checkpoint
// directory dir.
func podCheckpointSize(dir string) int64 {
	var n int64
	files, _ := os.ReadDir(dir)
	for _, f := range files {
		if i, err := f.Info(); err == nil && i.Mode().IsRegular() {
			n += i.Size()
		}
	}
	return n
}

// stopServing ends the lazy serve of the pod checkpoint name, if one
// runs, and waits until the pod is thawed and the pod checkpoint removed,
// or ctx ends.
func (s *Service) stopServing(ctx context.Context, name string) error {
	s.mu.Lock()
	sv := s.serving[name]
	s.mu.Unlock()
	if sv == nil {
		return nil
	}
	sv.cancel()
	select {
	case <-sv.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("end the lazy serve of %s: %w", name, ctx.Err())
	}
}

// checkpointPod is CheckpointPod; with published set, the checkpoint is
// lazy, and published is called with the pod checkpoint's path once it
// is published, while its memory is being served.
func (s *Service) checkpointPod(ctx context.Context, p PodRef, opts PodOptions, published func(string)) (pod.Result, error) {
	set := s.opts.Settings()
	if !set.Enabled {
		return pod.Result{}, ErrDisabled
	}
	for _, n := range []struct {
		what string
		errs []string
	}{{"namespace", validation.IsDNS1123Label(p.Namespace)}, {"pod", validation.IsDNS1123Subdomain(p.Name)}} {
		if len(n.errs) > 0 {
			return pod.Result{}, fmt.Errorf("%s: invalid %s name: %s: %w", p, n.what, strings.Join(n.errs, "; "), ErrNotFound)
		}
	}
	if opts.ImageRef != "" {
		if err := archive.CheckImageRef("request", "image", PodImageRef(opts.ImageRef, "c")); err != nil {
			return pod.Result{}, fmt.Errorf("checkpoint of pod %s: %w: %w", p, err, errdefs.ErrInvalidArgument)
		}
	}
	var lazy *pod.Lazy
	if published != nil {
		if opts.ImageRef != "" {
			return pod.Result{}, fmt.Errorf("checkpoint of pod %s: image: a checkpoint image holds no memory of a lazy checkpoint: %w", p, errdefs.ErrInvalidArgument)
		}
		l, err := set.PageServer.lazy()
		if err != nil {
			return pod.Result{}, fmt.Errorf("lazy checkpoint of pod %s: %w", p, err)
		}
		lazy = l
	}
	// Each container's archive is sealed as a container checkpoint's is;
	// the keys are read at each checkpoint, as there.
	sealing, _, err := set.Seal.Load(config.SealFieldNames)
	if err != nil {
		return pod.Result{}, fmt.Errorf("checkpoint of pod %s: %w", p, err)
	}
	if opts.ImageRef != "" && len(sealing.Recipients) > 0 {
		return pod.Result{}, fmt.Errorf("checkpoint of pod %s: a checkpoint image would hold the encrypted archives' plain text (make encrypted images of the archives with nodeshim checkpoint image --encryption-key): %w", p, errdefs.ErrInvalidArgument)
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = set.DefaultTimeout
	}
	if timeout <= 0 {
		timeout = criu.DefaultTimeout
	}
	key := podKey(p)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return pod.Result{}, ErrShuttingDown
	}
	if s.busy[key] {
		s.mu.Unlock()
		return pod.Result{}, fmt.Errorf("checkpoint of pod %s: %w", p, ErrBusy)
	}
	s.busy[key] = true
	s.inflight.Add(1)
	s.mu.Unlock()
	var marked []criu.ContainerRef
	defer func() {
		s.mu.Lock()
		delete(s.busy, key)
		for _, r := range marked {
			delete(s.busy, r)
		}
		s.mu.Unlock()
		s.inflight.Done()
	}()

	started := s.opts.Now()
	ctx, cancel := s.bound(ctx, timeout)
	defer cancel()

	resolver, err := s.resolver(set.RuntimeEndpoint)
	if err != nil {
		return pod.Result{}, err
	}
	target, err := s.resolvePod(ctx, resolver, p, started)
	if err != nil {
		return pod.Result{}, s.abortedOr(ctx, err)
	}
	// The pod's containers are busy for single checkpoints meanwhile.
	s.mu.Lock()
	for _, t := range target.Containers {
		if s.busy[t.Ref] {
			s.mu.Unlock()
			return pod.Result{}, fmt.Errorf("checkpoint of pod %s: container %s: %w", p, t.Ref.Container, ErrBusy)
		}
	}
	for _, t := range target.Containers {
		s.busy[t.Ref] = true
		marked = append(marked, t.Ref)
	}
	s.mu.Unlock()
	bin, err := s.opts.FindCriu()
	if err != nil {
		return pod.Result{}, err
	}
	for _, t := range target.Containers {
		lock, err := lockTarget(s.lockDir(set), t.Pid, fmt.Sprintf("checkpoint of pod %s: container %s (pid %d)", p, t.Ref.Container, t.Pid))
		if err != nil {
			return pod.Result{}, err
		}
		defer func() {
			if err := lock.Unlock(); err != nil {
				s.opts.Logger.Warn("checkpoint lock", "pod", p.String(), "err", err)
			}
		}()
	}

	rec := status.CheckpointRecord{Namespace: p.Namespace, Pod: p.Name, StartedAt: started}
	done := func(string, time.Duration, time.Duration) {}
	if s.opts.Metrics != nil {
		done = s.opts.Metrics.Start()
	}
	what := "checkpoint of pod " + p.String()
	s.opts.Model.Set(condition.Progress(status.TypeCheckpoint, condition.ReasonInProgress, what+": waiting for a free slot", 1, 3))
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		err := s.abortedOr(ctx, fmt.Errorf("%s: waiting for a free slot: %w", what, ctx.Err()))
		s.finish(rec, criu.Result{}, err, done)
		return pod.Result{}, err
	}
	defer func() { <-s.sem }()
	defer s.applyPodRetention(set, p)

	var phaseMu sync.Mutex
	last := -1
	o := pod.Options{
		Dir:  set.Dir,
		Criu: criu.Options{Binary: bin, ProcRoot: s.opts.ProcRoot, Logger: s.opts.Logger, Seal: sealing, LockDir: s.lockDir(set)},
		Now:  s.opts.Now,
		Room: func(est int64) error {
			plan, err := PlanSpace(est, set.Dir, set.Dir)
			if err != nil {
				return err
			}
			if err := s.makeRoom(set, key, plan); err != nil {
				return err
			}
			s.opts.Model.Set(condition.Progress(status.TypeCheckpoint, condition.ReasonInProgress,
				fmt.Sprintf("%s: freezing the pod to dump %d containers with CRIU", what, len(target.Containers)), 2, 3))
			return nil
		},
		Progress: func(i int, name string, pr criu.Progress) {
			phaseMu.Lock()
			defer phaseMu.Unlock()
			if i == last {
				return
			}
			last = i
			s.opts.Model.Set(condition.Progress(status.TypeCheckpoint, condition.ReasonInProgress,
				fmt.Sprintf("%s: pod frozen, dumping container %s (%d of %d)", what, name, i+1, len(target.Containers)), 2, 3))
		},
	}
	if opts.ImageRef != "" {
		o.ImageRef = func(c string) string { return PodImageRef(opts.ImageRef, c) }
	}
	if lazy != nil {
		lazy.Published = func(path string) {
			s.opts.Model.Set(condition.Progress(status.TypeCheckpoint, condition.ReasonInProgress,
				fmt.Sprintf("%s: pod frozen, serving the memory of %d containers from %s to a lazy restore", what, len(target.Containers), filepath.Base(path)), 3, 3))
			s.opts.Logger.Info("lazy pod checkpoint published; serving its memory", "pod", p.String(), "path", path)
			published(path)
		}
		o.Lazy = lazy
	}
	res, err := pod.Checkpoint(ctx, target, o)
	if err != nil {
		err = s.abortedOr(ctx, err)
	}
	s.finish(rec, criu.Result{Path: res.Path, Size: res.Size, Frozen: res.Frozen}, err, done)
	return res, err
}

// sandboxInfo is the part of containerd's verbose sandbox info ("info"
// JSON) a pod checkpoint records: the CRI config as encoding/json wrote it.
type sandboxInfo struct {
	Config json.RawMessage `json:"config"`
}

// resolvePod finds the ready sandbox of p and its containers through the
// CRI runtime: every container must be running, but for init containers
// that finished (exited with 0 before the first running container was
// created), which are recorded.
func (s *Service) resolvePod(ctx context.Context, resolver cri.Resolver, p PodRef, now time.Time) (pod.Pod, error) {
	cl, ok := resolver.(interface {
		Client() runtimeapi.RuntimeServiceClient
	})
	if !ok {
		return pod.Pod{}, fmt.Errorf("pod %s: the runtime resolver does not speak CRI: %w", p, errdefs.ErrNotSupported)
	}
	client := cl.Client()
	sandboxes, err := client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: map[string]string{cri.LabelPodNamespace: p.Namespace, cri.LabelPodName: p.Name},
	}})
	if err != nil {
		return pod.Pod{}, fmt.Errorf("list pod sandboxes of %s: %w", p, err)
	}
	var sb *runtimeapi.PodSandbox
	for _, c := range sandboxes.Items {
		if c.State == runtimeapi.PodSandboxState_SANDBOX_READY && c.GetMetadata().GetNamespace() == p.Namespace &&
			c.GetMetadata().GetName() == p.Name && (sb == nil || c.CreatedAt > sb.CreatedAt) {
			sb = c
		}
	}
	if sb == nil {
		return pod.Pod{}, fmt.Errorf("pod %s: no ready sandbox: %w", p, ErrNotFound)
	}
	st, err := client.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.Id, Verbose: true})
	if err != nil {
		return pod.Pod{}, fmt.Errorf("pod sandbox status of %s (%s): %w", p, sb.Id, err)
	}
	out := pod.Pod{Namespace: p.Namespace, Name: p.Name, UID: sb.GetMetadata().GetUid(), SandboxID: sb.Id}
	out.Sandbox.RuntimeHandler = st.GetStatus().GetRuntimeHandler()
	if out.Sandbox.RuntimeHandler == "" {
		out.Sandbox.RuntimeHandler = sb.RuntimeHandler
	}
	ns := st.GetStatus().GetLinux().GetNamespaces().GetOptions()
	out.Sandbox.Namespaces = pod.NamespaceOptions{Network: ns.GetNetwork().String(), PID: ns.GetPid().String(), IPC: ns.GetIpc().String()}
	if raw, ok := st.Info["info"]; ok {
		var info sandboxInfo
		if err := json.Unmarshal([]byte(raw), &info); err != nil {
			return pod.Pod{}, fmt.Errorf("pod %s (%s): decode verbose info: %w", p, sb.Id, err)
		}
		if len(info.Config) > 0 && string(info.Config) != "null" {
			out.Sandbox.Config = info.Config
			var cfg runtimeapi.PodSandboxConfig
			if err := json.Unmarshal(info.Config, &cfg); err == nil {
				out.Sandbox.Hostname = cfg.Hostname
				out.Sandbox.CgroupParent = cfg.GetLinux().GetCgroupParent()
			}
		}
	}

	list, err := client.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: sb.Id}})
	if err != nil {
		return pod.Pod{}, fmt.Errorf("list containers of %s: %w", p, err)
	}
	latest := map[string]*runtimeapi.Container{}
	for _, c := range list.Containers {
		n := c.GetMetadata().GetName()
		if c.PodSandboxId != sb.Id || n == "" {
			continue
		}
		if prev := latest[n]; prev == nil || c.CreatedAt > prev.CreatedAt {
			latest[n] = c
		}
	}
	ctrs := make([]*runtimeapi.Container, 0, len(latest))
	for _, c := range latest {
		ctrs = append(ctrs, c)
	}
	slices.SortFunc(ctrs, func(a, b *runtimeapi.Container) int {
		if a.CreatedAt != b.CreatedAt {
			if a.CreatedAt < b.CreatedAt {
				return -1
			}
			return 1
		}
		return strings.Compare(a.GetMetadata().GetName(), b.GetMetadata().GetName())
	})
	firstRunning := int64(-1)
	for _, c := range ctrs {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING && (firstRunning < 0 || c.CreatedAt < firstRunning) {
			firstRunning = c.CreatedAt
		}
	}
	if firstRunning < 0 {
		return pod.Pod{}, fmt.Errorf("pod %s: no running container: %w", p, ErrPodNotRunning)
	}
	for _, c := range ctrs {
		name := c.GetMetadata().GetName()
		ref := criu.ContainerRef{Namespace: p.Namespace, Pod: p.Name, Container: name}
		if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			cs, err := client.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
			if err != nil {
				return pod.Pod{}, fmt.Errorf("container status of %s (%s): %w", ref, c.Id, err)
			}
			sc := cs.GetStatus()
			if c.State == runtimeapi.ContainerState_CONTAINER_EXITED && sc.GetExitCode() == 0 && c.CreatedAt < firstRunning {
				ic := pod.InitContainer{Name: name, ID: c.Id, Image: sc.GetImage().GetImage(), ExitCode: sc.GetExitCode()}
				if f := sc.GetFinishedAt(); f > 0 {
					ic.FinishedAt = time.Unix(0, f).UTC()
				}
				out.InitContainers = append(out.InitContainers, ic)
				continue
			}
			return pod.Pod{}, fmt.Errorf("pod %s: container %s is %s (exit code %d): %w", p, name,
				strings.TrimPrefix(c.State.String(), "CONTAINER_"), sc.GetExitCode(), ErrPodNotRunning)
		}
		proc, err := resolver.Resolve(ctx, ref)
		if errors.Is(err, cri.ErrNotFound) {
			return pod.Pod{}, fmt.Errorf("pod %s: container %s stopped meanwhile: %w", p, name, ErrPodNotRunning)
		}
		if err != nil {
			return pod.Pod{}, err
		}
		if proc.PodSandboxID != "" && proc.PodSandboxID != sb.Id {
			return pod.Pod{}, fmt.Errorf("pod %s: container %s belongs to sandbox %s, not %s: %w", p, name, proc.PodSandboxID, sb.Id, ErrPodNotRunning)
		}
		if proc.Spec == nil {
			return pod.Pod{}, fmt.Errorf("pod %s: container %s: the runtime gives no OCI spec: %w", p, name, errdefs.ErrNotSupported)
		}
		t, err := criu.ContainerTarget(s.opts.ProcRoot, proc.PID, proc.Spec, "", now)
		if err != nil {
			return pod.Pod{}, fmt.Errorf("container %s (%s): %w", ref, proc.ContainerID, err)
		}
		t.Ref, t.ID, t.Runtime = ref, proc.ContainerID, "cri"
		t.Image, t.ImageRef, t.Status = proc.Image, proc.ImageRef, proc.Status
		if !proc.Created.IsZero() {
			t.Created = proc.Created
		}
		out.Containers = append(out.Containers, t)
	}
	// The pod's freezer cgroup is the parent of its containers' (kubelet
	// puts each container in <pod cgroup>/<container>), and the sandbox
	// config names it.
	for _, t := range out.Containers {
		d := filepath.Dir(t.Container.FreezeCgroup)
		if t.Container.FreezeCgroup == "" {
			return pod.Pod{}, fmt.Errorf("pod %s: container %s has no freezer cgroup nodeshim sees: %w", p, t.Ref.Container, errdefs.ErrNotSupported)
		}
		if out.FreezeCgroup == "" {
			out.FreezeCgroup = d
		} else if d != out.FreezeCgroup {
			return pod.Pod{}, fmt.Errorf("pod %s: containers in different cgroups %s and %s: %w", p, out.FreezeCgroup, d, errdefs.ErrNotSupported)
		}
	}
	if cp := out.Sandbox.CgroupParent; cp != "" && filepath.Base(cri.CgroupRelPath(cp)) != filepath.Base(out.FreezeCgroup) {
		return pod.Pod{}, fmt.Errorf("pod %s: containers' cgroup %s is not the pod's cgroup %s: %w", p, out.FreezeCgroup, cp, errdefs.ErrNotSupported)
	}
	return out, nil
}

// applyPodRetention applies the retention policy to p's pod checkpoints
// as units: each pod checkpoint directory counts as one archive of the
// pod (its key "<pod>_<namespace>"), of the bytes of its files; removal
// renames it into retention's trash first, which Sweep empties.
func (s *Service) applyPodRetention(set Settings, p PodRef) {
	if set.Dir == "" {
		return
	}
	s.pruneMu.Lock()
	defer s.pruneMu.Unlock()
	list, err := podCheckpoints(set.Dir, p)
	if err != nil {
		s.opts.Logger.Warn("pod checkpoint retention", "dir", set.Dir, "err", err)
		return
	}
	removals, _ := retention.Plan(set.Retention, list, s.opts.Now(), 0, nil)
	for _, r := range removals {
		if err := removePodCheckpoint(set.Dir, r.Name); err != nil {
			s.opts.Logger.Warn("pod checkpoint retention", "checkpoint", r.Name, "err", err)
			continue
		}
		s.removed++
		s.opts.Logger.Info("pod checkpoint removed", "checkpoint", r.Name, "reason", r.Reason, "pod", p.String(), "bytes", r.Size, "dir", set.Dir)
		if s.opts.Metrics != nil {
			s.opts.Metrics.Removed(r.Reason)
		}
	}
}

// podCheckpoints lists p's pod checkpoints in dir as retention archives.
func podCheckpoints(dir string, p PodRef) ([]retention.Archive, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []retention.Archive
	for _, e := range ents {
		ns, name, at, attempt, ok := pod.ParseName(e.Name())
		if !ok || !e.IsDir() || ns != p.Namespace || name != p.Name {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		a := retention.Archive{Name: e.Name(), Container: p.Name + "_" + p.Namespace, Time: at, Modified: fi.ModTime(), Attempt: attempt}
		files, _ := os.ReadDir(filepath.Join(dir, e.Name()))
		for _, f := range files {
			if i, err := f.Info(); err == nil && i.Mode().IsRegular() {
				a.Size += i.Size()
			}
		}
		out = append(out, a)
	}
	return out, nil
}

// removePodCheckpoint removes the pod checkpoint name of dir as a unit:
// renamed into retention's trash (a crash leaves it there, whole, for
// retention.Sweep), then removed.
func removePodCheckpoint(dir, name string) error {
	trash := filepath.Join(dir, retention.TrashDir)
	if err := os.Mkdir(trash, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("remove pod checkpoint: %w", err)
	}
	dst := filepath.Join(trash, name)
	if err := os.Rename(filepath.Join(dir, name), dst); err != nil {
		return fmt.Errorf("remove pod checkpoint: %w", err)
	}
	return os.RemoveAll(dst)
}

// PodCheckpoint is CheckpointPod for the node API (api.PodCheckpointer):
// it returns the pod checkpoint's path.
func (s *Service) PodCheckpoint(ctx context.Context, namespace, name string, timeout time.Duration, imageRef string) (string, error) {
	res, err := s.CheckpointPod(ctx, PodRef{Namespace: namespace, Name: name}, PodOptions{Timeout: timeout, ImageRef: imageRef})
	return res.Path, err
}

// LazyPodCheckpoint is a lazy CheckpointPod for the node API
// (api.LazyPodCheckpointer): it returns the pod checkpoint's path once
// it is published, and its memory is served on.
func (s *Service) LazyPodCheckpoint(ctx context.Context, namespace, name string, timeout time.Duration) (string, error) {
	res, err := s.CheckpointPod(ctx, PodRef{Namespace: namespace, Name: name}, PodOptions{Timeout: timeout, Lazy: true})
	return res.Path, err
}
