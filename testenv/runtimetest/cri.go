package runtimetest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// kubelet's labels on pods and containers (pkg/kubelet/types/labels.go).
const (
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelContainerName = "io.kubernetes.container.name"
)

// PodOptions describe a pod sandbox. The zero value is a pod named
// "pod-<random>" in namespace "default" on the pod network under runc.
type PodOptions struct {
	Name, Namespace, UID string
	// RuntimeHandler is RuntimeRunc (the default) or RuntimeCrun.
	RuntimeHandler string
	// HostNetwork runs the pod in the node's network namespace instead of
	// its own one on the CNI bridge.
	HostNetwork bool
	// Labels and Annotations are added to kubelet's labels.
	Labels, Annotations map[string]string
	// CgroupParent defaults to CgroupRoot/pod<UID>.
	CgroupParent string
}

// Pod is a running pod sandbox.
type Pod struct {
	ID             string
	RuntimeHandler string
	Config         *runtimeapi.PodSandboxConfig
	c              *Containerd
	n              int
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), callTimeout)
}

// RunPod runs a pod sandbox as kubelet would (kubelet's labels, a log
// directory named namespace_name_uid) and stops and removes it, with its
// containers, when t ends.
func (c *Containerd) RunPod(t testing.TB, opts PodOptions) *Pod {
	t.Helper()
	if opts.Name == "" {
		opts.Name = "pod-" + randomHex(4)
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.UID == "" {
		u := randomHex(16)
		opts.UID = u[:8] + "-" + u[8:12] + "-" + u[12:16] + "-" + u[16:20] + "-" + u[20:]
	}
	if opts.RuntimeHandler == "" {
		opts.RuntimeHandler = RuntimeRunc
	}
	if opts.CgroupParent == "" {
		opts.CgroupParent = c.CgroupRoot + "/pod" + opts.UID
	}
	labels := map[string]string{LabelPodName: opts.Name, LabelPodNamespace: opts.Namespace, LabelPodUID: opts.UID}
	for k, v := range opts.Labels {
		labels[k] = v
	}
	netMode := runtimeapi.NamespaceMode_POD
	if opts.HostNetwork {
		netMode = runtimeapi.NamespaceMode_NODE
	}
	logDir := filepath.Join(c.Dir, "pods", opts.Namespace+"_"+opts.Name+"_"+opts.UID)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: opts.Name, Namespace: opts.Namespace, Uid: opts.UID},
		LogDirectory: logDir,
		Labels:       labels,
		Annotations:  opts.Annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: opts.CgroupParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{
					Network: netMode,
					Pid:     runtimeapi.NamespaceMode_CONTAINER,
					Ipc:     runtimeapi.NamespaceMode_POD,
				},
			},
		},
	}
	if !opts.HostNetwork {
		// As kubelet: a host-network pod shares the node's UTS namespace,
		// where the runtime refuses to set a hostname.
		cfg.Hostname = opts.Name
	}
	ctx, cancel := callCtx()
	defer cancel()
	resp, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: opts.RuntimeHandler})
	if err != nil {
		t.Fatalf("run pod %s/%s (%s): %v\n%s", opts.Namespace, opts.Name, opts.RuntimeHandler, err, c.Log())
	}
	p := &Pod{ID: resp.PodSandboxId, RuntimeHandler: opts.RuntimeHandler, Config: cfg, c: c}
	c.mu.Lock()
	c.sandbox[p.ID] = true
	c.mu.Unlock()
	t.Cleanup(func() {
		if err := p.Remove(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// Remove stops and removes the pod and its containers; it is done at the
// end of the test that ran the pod and may be called earlier.
func (p *Pod) Remove() error {
	ctx, cancel := callCtx()
	defer cancel()
	if _, err := p.c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.ID}); err != nil && !isNotFound(err) {
		return fmt.Errorf("stop pod %s: %w", p.ID, err)
	}
	if _, err := p.c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.ID}); err != nil && !isNotFound(err) {
		return fmt.Errorf("remove pod %s: %w", p.ID, err)
	}
	return nil
}

func isNotFound(err error) bool {
	return status.Code(err) == codes.NotFound || (err != nil && strings.Contains(err.Error(), "not found"))
}

// Status returns the pod's CRI status.
func (p *Pod) Status(t testing.TB) *runtimeapi.PodSandboxStatus {
	t.Helper()
	ctx, cancel := callCtx()
	defer cancel()
	st, err := p.c.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.ID})
	if err != nil {
		t.Fatalf("pod %s status: %v", p.ID, err)
	}
	return st.Status
}

// ContainerOptions describe a container in a pod. The zero value runs
// BusyboxImage's `sh` under the runtime's defaults (seccomp unconfined, as
// CRI leaves it unless told).
type ContainerOptions struct {
	// Name defaults to "ctr<N>".
	Name string
	// Image defaults to BusyboxImage.
	Image         string
	Command, Args []string
	Env           map[string]string
	// SeccompLocalhost is the absolute path of a Localhost seccomp profile
	// (kubelet passes <seccomp root>/<localhostProfile>).
	SeccompLocalhost string
	// Seccomp, when set, is passed as is and SeccompLocalhost is ignored.
	Seccomp    *runtimeapi.SecurityProfile
	Privileged bool
	Mounts     []*runtimeapi.Mount
	Labels     map[string]string
}

// Container is a created CRI container.
type Container struct {
	ID, Name string
	Pod      *Pod
	// LogPath is the absolute path of its CRI log file.
	LogPath string
}

// CreateContainer creates a container in the pod (not started).
func (p *Pod) CreateContainer(t testing.TB, opts ContainerOptions) *Container {
	t.Helper()
	p.n++
	if opts.Name == "" {
		opts.Name = fmt.Sprintf("ctr%d", p.n)
	}
	if opts.Image == "" {
		opts.Image = BusyboxImage
	}
	seccomp := opts.Seccomp
	if seccomp == nil && opts.SeccompLocalhost != "" {
		seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: opts.SeccompLocalhost}
	}
	labels := map[string]string{LabelContainerName: opts.Name}
	for _, k := range []string{LabelPodName, LabelPodNamespace, LabelPodUID} {
		labels[k] = p.Config.Labels[k]
	}
	for k, v := range opts.Labels {
		labels[k] = v
	}
	var env []*runtimeapi.KeyValue
	for k, v := range opts.Env {
		env = append(env, &runtimeapi.KeyValue{Key: k, Value: []byte(v)})
	}
	logRel := filepath.Join(opts.Name, "0.log")
	if err := os.MkdirAll(filepath.Join(p.Config.LogDirectory, opts.Name), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: opts.Name},
		Image:    &runtimeapi.ImageSpec{Image: opts.Image},
		Command:  opts.Command,
		Args:     opts.Args,
		Envs:     env,
		Mounts:   opts.Mounts,
		Labels:   labels,
		LogPath:  logRel,
		Linux: &runtimeapi.LinuxContainerConfig{
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				Privileged:       opts.Privileged,
				Seccomp:          seccomp,
				NamespaceOptions: p.Config.Linux.SecurityContext.NamespaceOptions,
			},
		},
	}
	ctx, cancel := callCtx()
	defer cancel()
	resp, err := p.c.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: p.ID, Config: cfg, SandboxConfig: p.Config})
	if err != nil {
		t.Fatalf("create container %s in pod %s: %v\n%s", opts.Name, p.ID, err, p.c.Log())
	}
	return &Container{ID: resp.ContainerId, Name: opts.Name, Pod: p, LogPath: filepath.Join(p.Config.LogDirectory, logRel)}
}

// Run creates and starts a container in the pod.
func (p *Pod) Run(t testing.TB, opts ContainerOptions) *Container {
	t.Helper()
	ctr := p.CreateContainer(t, opts)
	ctr.Start(t)
	return ctr
}

// Start starts the container.
func (ctr *Container) Start(t testing.TB) {
	t.Helper()
	ctx, cancel := callCtx()
	defer cancel()
	if _, err := ctr.Pod.c.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ID}); err != nil {
		t.Fatalf("start container %s: %v\n%s%s", ctr.Name, err, RuntimeLog(err.Error()), ctr.Pod.c.Log())
	}
}

// runtimeLogRE finds the log file an OCI runtime error names (runc's
// "log file: PATH", e.g. CRIU's restore.log).
var runtimeLogRE = regexp.MustCompile(`log file: (/\S+)`)

// RuntimeLog returns the tail of the log file that an OCI runtime's error
// message msg names (runc's "log file: PATH", e.g. CRIU's restore.log),
// if any, for a test's failure message.
func RuntimeLog(msg string) string {
	m := runtimeLogRE.FindStringSubmatch(msg)
	if m == nil {
		return ""
	}
	return fmt.Sprintf("%s, last lines:\n%s\n", m[1], tail(m[1], 40))
}

// Status returns the container's CRI status.
func (ctr *Container) Status(t testing.TB) *runtimeapi.ContainerStatus {
	t.Helper()
	ctx, cancel := callCtx()
	defer cancel()
	st, err := ctr.Pod.c.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr.ID})
	if err != nil {
		t.Fatalf("container %s status: %v", ctr.Name, err)
	}
	return st.Status
}

// Wait waits until the container has exited and returns its exit code.
func (ctr *Container) Wait(t testing.TB) int32 {
	t.Helper()
	for {
		st := ctr.Status(t)
		if st.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			return st.ExitCode
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Exec runs cmd in the running container (CRI ExecSync) and returns its
// stdout, stderr and exit code.
func (ctr *Container) Exec(t testing.TB, cmd ...string) (stdout, stderr string, code int32) {
	t.Helper()
	ctx, cancel := callCtx()
	defer cancel()
	resp, err := ctr.Pod.c.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: ctr.ID, Cmd: cmd})
	if err != nil {
		t.Fatalf("exec %q in %s: %v", cmd, ctr.Name, err)
	}
	return string(resp.Stdout), string(resp.Stderr), resp.ExitCode
}

// Logs returns what the container wrote to stdout and stderr, in order,
// read from its CRI log file ("<time> <stream> <P|F> <text>" lines).
func (ctr *Container) Logs(t testing.TB) string {
	t.Helper()
	data, err := os.ReadFile(ctr.LogPath)
	if err != nil {
		t.Fatalf("logs of %s: %v", ctr.Name, err)
	}
	out, err := ParseCRILog(data)
	if err != nil {
		t.Fatalf("logs of %s: %v", ctr.Name, err)
	}
	return out
}

// ParseCRILog returns the text of a CRI log file: each line's content, with
// a newline after full ("F") lines and none after partial ("P") ones.
func ParseCRILog(data []byte) (string, error) {
	var b strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		fields := strings.SplitN(sc.Text(), " ", 4)
		if len(fields) < 3 || (fields[1] != "stdout" && fields[1] != "stderr") || (fields[2] != "F" && fields[2] != "P") {
			return "", fmt.Errorf("CRI log line %d: %q is not <time> <stream> <tag> <text>", n, sc.Text())
		}
		if len(fields) == 4 {
			b.WriteString(fields[3])
		}
		if fields[2] == "F" {
			b.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("CRI log: %w", err)
	}
	return b.String(), nil
}

// Stop stops the container, killing it after timeout seconds.
func (ctr *Container) Stop(t testing.TB, timeout int64) {
	t.Helper()
	ctx, cancel := callCtx()
	defer cancel()
	if _, err := ctr.Pod.c.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: ctr.ID, Timeout: timeout}); err != nil {
		t.Fatalf("stop container %s: %v", ctr.Name, err)
	}
}

// Remove removes the container (stopping it first if it runs).
func (ctr *Container) Remove(t testing.TB) {
	t.Helper()
	ctx, cancel := callCtx()
	defer cancel()
	if _, err := ctr.Pod.c.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: ctr.ID}); err != nil {
		t.Fatalf("remove container %s: %v", ctr.Name, err)
	}
}
