package criu

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

func TestConntrackAnswer(t *testing.T) {
	errMsg := func(seq uint32, errno int32) syscall.NetlinkMessage {
		d := make([]byte, 4)
		binary.NativeEndian.PutUint32(d, uint32(errno))
		return syscall.NetlinkMessage{Header: syscall.NlMsghdr{Type: unix.NLMSG_ERROR, Seq: seq}, Data: d}
	}
	stats := syscall.NetlinkMessage{Header: syscall.NlMsghdr{Type: unix.NFNL_SUBSYS_CTNETLINK<<8 | ipctnlMsgCtGetStatsCPU, Seq: 1}, Data: make([]byte, 8)}
	done := syscall.NetlinkMessage{Header: syscall.NlMsghdr{Type: unix.NLMSG_DONE, Seq: 1}}
	for _, tc := range []struct {
		name     string
		msgs     []syscall.NetlinkMessage
		wantDone bool
		wantErr  error
	}{
		{"stats then done", []syscall.NetlinkMessage{stats, done}, true, nil},
		{"stats, more to come", []syscall.NetlinkMessage{stats}, false, nil},
		{"EINVAL", []syscall.NetlinkMessage{errMsg(1, -int32(syscall.EINVAL))}, true, syscall.EINVAL},
		{"other request's error", []syscall.NetlinkMessage{errMsg(7, -int32(syscall.EINVAL))}, false, nil},
		{"ack", []syscall.NetlinkMessage{errMsg(1, 0)}, true, nil},
		{"short error", []syscall.NetlinkMessage{{Header: syscall.NlMsghdr{Type: unix.NLMSG_ERROR, Seq: 1}, Data: []byte{1}}}, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := ctAnswer(tc.msgs, 1)
			if d != tc.wantDone {
				t.Errorf("done %v, want %v", d, tc.wantDone)
			}
			switch {
			case tc.name == "short error":
				if err == nil {
					t.Error("short error message accepted")
				}
			case tc.wantErr == nil && err != nil:
				t.Errorf("err %v, want nil", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Errorf("err %v, want %v", err, tc.wantErr)
			}
		})
	}
}

// machineCtNetlink reads, apart from the probe's code, what this machine's
// kernel says of ctnetlink: loaded or built in (the kernel must answer), a
// module not loaded, or not built.
func machineCtNetlink(t *testing.T) (present, module bool) {
	t.Helper()
	if _, err := os.Stat("/sys/module/nf_conntrack_netlink"); err == nil {
		return true, false
	}
	if b, err := os.ReadFile("/proc/modules"); err == nil {
		if l := "\n" + string(b); strings.Contains(l, "\nnf_conntrack_netlink ") {
			return true, false
		}
	}
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		testutil.Skip(t, "no /proc/config.gz to tell what the kernel has: %v", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case bytes.Contains(cfg, []byte("\nCONFIG_NF_CT_NETLINK=y\n")):
		return true, false
	case bytes.Contains(cfg, []byte("\nCONFIG_NF_CT_NETLINK=m\n")):
		return false, true
	}
	return false, false
}

// rootHost reads the node's own files.
type rootHost struct{}

func (rootHost) Path(p string) string                     { return p }
func (rootHost) Describe(context.Context) capability.Node { return capability.Node{} }

// TestConntrackLive runs the ctnetlink sub-check against this kernel and
// checks its verdict against what the machine says of ctnetlink; where the
// module is on disk and not loaded, it checks that the probe left it so.
func TestConntrackLive(t *testing.T) {
	testutil.RequireRoot(t)
	present, module := machineCtNetlink(t)
	f := probeConntrack(rootHost{}, func() error { return askConntrack(context.Background()) })
	t.Logf("ctnetlink: %s: %s", f.Verdict, f.Evidence)
	switch {
	case present:
		if f.Verdict != capability.Supported || !strings.Contains(f.Evidence, "answered") {
			t.Errorf("ctnetlink is in this kernel; got %s %q, want Supported", f.Verdict, f.Evidence)
		}
	default:
		if f.Verdict != capability.Unsupported || !strings.Contains(f.Evidence, "modprobe "+ConntrackModule) {
			t.Errorf("ctnetlink is not in this kernel; got %s %q, want Unsupported naming the modprobe", f.Verdict, f.Evidence)
		}
		if _, err := os.Stat("/sys/module/nf_conntrack_netlink"); module && err == nil {
			t.Errorf("the probe loaded %s", ConntrackModule)
		}
	}
}

// TestConntrackInCriuCheckLive checks that criu.check on this node carries
// the ctnetlink sub-check, and is Supported only where ctnetlink answers.
func TestConntrackInCriuCheckLive(t *testing.T) {
	requireCriu(t)
	testutil.RequireRoot(t)
	present, _ := machineCtNetlink(t)
	var f capability.Finding
	found := false
	for _, r := range RequirementsWith(ReportOptions{}) {
		if r.ID == "criu.check" {
			f, found = r.Probe(context.Background(), rootHost{}), true
		}
	}
	if !found {
		t.Fatal("no criu.check requirement")
	}
	t.Logf("criu.check: %s: %s", f.Verdict, f.Evidence)
	// requireCriu ran `criu check` and it passed, so the verdict is
	// ctnetlink's.
	if !strings.Contains(f.Evidence, "ctnetlink") {
		t.Errorf("criu.check evidence %q says nothing of ctnetlink", f.Evidence)
	}
	if want := map[bool]capability.Verdict{true: capability.Supported, false: capability.Unsupported}[present]; f.Verdict != want {
		t.Errorf("criu.check %s (%q), want %s (ctnetlink in this kernel: %v)", f.Verdict, f.Evidence, want, present)
	}
}

// TestConntrackAskFreshNetns asks ctnetlink from a network namespace of
// its own, as CRIU does for a pod's.
func TestConntrackAskFreshNetns(t *testing.T) {
	testutil.RequireRoot(t)
	present, _ := machineCtNetlink(t)
	errc := make(chan error, 1)
	go func() {
		// The thread ends with the goroutine, in its namespace: it is
		// never unlocked.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- askConntrack(context.Background())
	}()
	err := <-errc
	if present && err != nil {
		t.Errorf("ctnetlink is in this kernel; asking it from a new netns: %v", err)
	}
	if !present && err == nil {
		t.Error("ctnetlink answered, yet this machine does not have it")
	}
}
