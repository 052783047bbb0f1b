package clustertest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testproc"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// NodeOptions describe a node joined to the cluster beside this
// machine's.
type NodeOptions struct {
	// Name is the Node's name (a DNS label).
	Name string
	// Handlers2 are runtime handlers added to its containerd 2.x's
	// config (runtimetest.Env.Handlers2).
	Handlers2 []runtimetest.Handler
}

// Node is another node of the cluster on this machine, as a second
// machine would be: its own network namespace, joined to this one by a
// veth pair on a /30 of its own, its own containerd 2.x (with its shims,
// CNI bridge, cgroup parent and state), and its own kubelet, which
// registers the Node with the pair's address as its InternalIP and serves
// there. Inside the namespace the API server is reached on 127.0.0.1 at
// its own port, through a relay to this machine's loopback, so that one
// kubeconfig (and the API server's certificate) serves every node.
type Node struct {
	// Name is the Node's name.
	Name string
	// NetNS is the path of its network namespace (under /run/netns).
	NetNS string
	// IP is its end of the veth pair (the Node's InternalIP); HostIP
	// this machine's end.
	IP, HostIP string
	// Containerd is its container runtime, in NetNS.
	Containerd *runtimetest.Containerd
	// Dir holds its kubelet's state, configuration and log.
	Dir string
	// KubeletRootDir is its kubelet's --root-dir; CgroupRoot its
	// cgroupRoot.
	KubeletRootDir, CgroupRoot string

	nsName, veth string
	ip           string // the ip tool's path
	rt           runtimetest.Env
	relay        *relay
	procs        []*testproc.Proc
	sysctls      map[string]string
}

// Node returns the cluster's node named o.Name, joining it on first use
// (the cluster starts first if it has not). It gates t as Cluster does,
// and fails t if the node did not turn Ready. Close stops it before the
// cluster.
func (e *Env) Node(t testing.TB, o NodeOptions) *Node {
	t.Helper()
	c := e.Cluster(t)
	nsenter := testutil.RequireBinary(t, "nsenter")
	ip := testutil.RequireBinary(t, "ip")
	kubeletBin := binary(t, EnvKubelet, "kubelet")
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, n := range e.nodes {
		if n.Name == o.Name {
			return n
		}
	}
	n, err := c.join(o, ip)
	if n != nil {
		e.nodes = append(e.nodes, n)
	}
	if err != nil {
		t.Fatal(err)
	}
	n.Containerd = n.rt.Containerd2(t)
	if err := c.startKubelet(n, nsenter, kubeletBin); err != nil {
		t.Fatal(err)
	}
	return n
}

// join makes node o's network namespace, veth pair, relay and
// directories. The pair takes the first 10.252.i.0/30 that no address of
// this machine is in (another cluster's, or one a killed test left).
func (c *Cluster) join(o NodeOptions, ip string) (n *Node, err error) {
	if o.Name == "" || o.Name == c.NodeName {
		return nil, fmt.Errorf("clustertest: node name %q: empty or this machine's", o.Name)
	}
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("clustertest: %w", err)
	}
	id := hex.EncodeToString(b)
	i, err := freeSubnet()
	if err != nil {
		return nil, err
	}
	n = &Node{
		Name:   o.Name,
		nsName: "nsct-" + id,
		veth:   "nsct" + id,
		HostIP: fmt.Sprintf("10.252.%d.1", i),
		IP:     fmt.Sprintf("10.252.%d.2", i),
		Dir:    filepath.Join(c.Dir, "node-"+o.Name),
		ip:     ip,
	}
	n.NetNS = filepath.Join("/run/netns", n.nsName)
	n.KubeletRootDir = filepath.Join(n.Dir, "kubelet")
	for _, d := range []string{"kubelet", "pod-logs", "volume-plugins"} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("clustertest: %w", err)
		}
	}
	steps := [][]string{
		{"netns", "add", n.nsName},
		{"link", "add", n.veth, "type", "veth", "peer", "name", "eth0", "netns", n.nsName},
		{"addr", "add", n.HostIP + "/30", "dev", n.veth},
		{"link", "set", n.veth, "up"},
		{"-n", n.nsName, "addr", "add", n.IP + "/30", "dev", "eth0"},
		{"-n", n.nsName, "link", "set", "eth0", "up"},
		{"-n", n.nsName, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if out, err := exec.Command(ip, s...).CombinedOutput(); err != nil {
			return n, fmt.Errorf("clustertest: node %s: ip %s: %w: %s", o.Name, strings.Join(s, " "), err, strings.TrimSpace(string(out)))
		}
	}
	n.relay, err = relayInto(n.NetNS, fmt.Sprintf("127.0.0.1:%d", c.API.Port()))
	if err != nil {
		return n, fmt.Errorf("clustertest: node %s: %w", o.Name, err)
	}
	n.rt.Handlers2, n.rt.NetNS = o.Handlers2, n.NetNS
	return n, nil
}

// freeSubnet returns the first i for which no address of this machine is
// in 10.252.i.0/30.
func freeSubnet() (int, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return 0, fmt.Errorf("clustertest: %w", err)
	}
next:
	for i := range 256 {
		_, subnet, _ := net.ParseCIDR(fmt.Sprintf("10.252.%d.0/30", i))
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && subnet.Contains(ipn.IP) {
				continue next
			}
		}
		return i, nil
	}
	return 0, errors.New("clustertest: no free /30 in 10.252.0.0/16 for a node's veth pair")
}

// startKubelet starts n's kubelet in its namespace and waits for its Node
// to turn Ready.
func (c *Cluster) startKubelet(n *Node, nsenter, kubeletBin string) error {
	// Below the node runtime's per-Env cgroup, which its Close removes.
	n.CgroupRoot = filepath.Join(filepath.Dir(n.Containerd.CgroupRoot), "kubelet")
	if err := makeCgroup(n.CgroupRoot); err != nil {
		return err
	}
	// kubelet sets the machine's sysctls again; put back what the
	// cluster's kubelet set when this one stops, before the cluster
	// restores the machine's own.
	var err error
	if n.sysctls, err = readSysctls(); err != nil {
		return err
	}
	cfg := filepath.Join(n.Dir, "kubelet.yaml")
	k := kubelet{address: n.IP, port: 10250, endpoint: n.Containerd.Address, cgroupRoot: n.CgroupRoot, podLogsDir: filepath.Join(n.Dir, "pod-logs")}
	if err := os.WriteFile(cfg, []byte(kubeletConfig(k)), 0o600); err != nil {
		return fmt.Errorf("clustertest: %w", err)
	}
	p, err := testproc.Start(n.Dir, "kubelet", nsenter, "--net="+n.NetNS, "--", kubeletBin,
		"--config="+cfg,
		"--kubeconfig="+c.kubeconfig,
		"--hostname-override="+n.Name,
		"--node-ip="+n.IP,
		"--root-dir="+n.KubeletRootDir,
		"--cert-dir="+filepath.Join(n.Dir, "kubelet-pki"),
		"--volume-plugin-dir="+filepath.Join(n.Dir, "volume-plugins"),
		"--v=1")
	if err != nil {
		return fmt.Errorf("clustertest: node %s: %w", n.Name, err)
	}
	n.procs = append(n.procs, p)
	return c.waitReady(n.Name, n.Dir, p)
}

// Count is Cluster.Count for a Pod on n.
func (n *Node) Count(t testing.TB, pod, ctr string, count int) int {
	t.Helper()
	return countIn(t, n.Containerd, pod, ctr, count)
}

// ReadFile is Cluster.ReadFile for a Pod on n.
func (n *Node) ReadFile(t testing.TB, pod, ctr, path string) string {
	t.Helper()
	return readIn(t, n.Containerd, pod, ctr, path)
}

// close stops n's kubelet, removes its pods and runtime, puts back the
// sysctls and removes its namespace, veth pair and directory.
func (n *Node) close() error {
	var errs []error
	for i := len(n.procs) - 1; i >= 0; i-- {
		n.procs[i].Stop()
	}
	if n.Containerd != nil {
		errs = append(errs, removePods(n.Containerd))
	}
	errs = append(errs, n.rt.Close())
	if n.relay != nil {
		n.relay.Close()
	}
	errs = append(errs, restoreSysctls(n.sysctls))
	// Deleting the namespace deletes the pair's other end with it.
	if out, err := exec.Command(n.ip, "netns", "delete", n.nsName).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
		errs = append(errs, fmt.Errorf("clustertest: ip netns delete %s: %w: %s", n.nsName, err, strings.TrimSpace(string(out))))
	}
	errs = append(errs, unmountUnder(n.Dir))
	if err := os.RemoveAll(n.Dir); err != nil {
		errs = append(errs, fmt.Errorf("clustertest: %w", err))
	}
	return errors.Join(errs...)
}

// relay accepts connections in a network namespace and carries each to
// an address in this process's.
type relay struct {
	ln    net.Listener
	to    string
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// relayInto listens on to's address inside the namespace at netns and
// relays every connection to to here.
func relayInto(netns, to string) (*relay, error) {
	ln, err := listenIn(netns, to)
	if err != nil {
		return nil, err
	}
	r := &relay{ln: ln, to: to, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.serve()
	return r, nil
}

// listenIn listens on addr in the network namespace at netns. The socket
// is made on a thread that enters the namespace and is never used again:
// its goroutine ends locked, which ends the thread.
func listenIn(netns, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		fd, err := unix.Open(netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- result{err: fmt.Errorf("open %s: %w", netns, err)}
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			done <- result{err: fmt.Errorf("enter %s: %w", netns, err)}
			return
		}
		ln, err := net.Listen("tcp", addr)
		done <- result{ln, err}
	}()
	r := <-done
	return r.ln, r.err
}

func (r *relay) serve() {
	defer r.wg.Done()
	for {
		in, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.carry(in)
		}()
	}
}

// carry copies between in and a new connection to r.to until either
// side ends.
func (r *relay) carry(in net.Conn) {
	out, err := net.DialTimeout("tcp", r.to, 10*time.Second)
	if err != nil {
		in.Close()
		return
	}
	r.mu.Lock()
	if r.conns == nil { // closed meanwhile
		r.mu.Unlock()
		in.Close()
		out.Close()
		return
	}
	r.conns[in], r.conns[out] = struct{}{}, struct{}{}
	r.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	in.Close()
	out.Close()
	<-done
	r.mu.Lock()
	if r.conns != nil {
		delete(r.conns, in)
		delete(r.conns, out)
	}
	r.mu.Unlock()
}

// Close stops accepting, ends every relayed connection and waits for the
// relay's goroutines.
func (r *relay) Close() {
	r.ln.Close()
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.conns = nil
	r.mu.Unlock()
	r.wg.Wait()
}
