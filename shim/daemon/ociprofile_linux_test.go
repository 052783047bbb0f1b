package daemon

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"github.com/nodeshim/nodeshim/shim/profiles"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/registrytest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// spoDenyMkdir is a SeccompProfile as spoc pushes it.
const spoDenyMkdir = `apiVersion: security-profiles-operator.x-k8s.io/v1beta1
kind: SeccompProfile
spec:
  defaultAction: SCMP_ACT_ALLOW
  syscalls:
  - action: SCMP_ACT_ERRNO
    names: [mkdir, mkdirat]
`

// TestSeccompProfileFromRegistry: serve installs a configured profile read
// from a registry (loopback, plain HTTP) once its signature verifies
// under the configured key; a configuration naming an unsigned one is
// refused and the installed profile stays; one naming a registry that
// cannot be reached is put in force (it is not the configuration's fault)
// and SeccompProfilesReady says InstallFailed, naming the reference.
func TestSeccompProfileFromRegistry(t *testing.T) {
	testutil.RequireRoot(t)
	reg := registrytest.Start(t)
	key, pub := registrytest.NewKey(t)
	d := reg.PushSPOC(t, "profiles/app", "v1", registrytest.Layer{Title: "profile.yaml", Data: []byte(spoDenyMkdir)})
	reg.Sign(t, "profiles/app", d.Digest, key)
	reg.PushSPOC(t, "profiles/unsigned", "v1", registrytest.Layer{Title: "profile.yaml", Data: []byte(spoDenyMkdir)})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close()

	cfg := func(ref string) string {
		return typeMeta + fmt.Sprintf("seccompRegistry:\n  publicKeys: [%s]\n  plainHTTP: [%q, %q]\nseccompProfiles:\n  app.json: %q\n",
			strconv.Quote(pub), reg.Host, down, ref)
	}
	run := startDaemonWith(t, func(o *Options) {
		// Each payload is last-known-good as soon as it is active, so that
		// a refused one rolls back to the previous payload, not to the
		// defaults (which install no profile).
		o.SoakPeriod = time.Nanosecond
		writeSource(t, o.ConfigSource, cfg(reg.Ref("profiles/app", "v1")))
	})
	root := filepath.Join(run.opts.HostRoot, "var/lib/kubelet/seccomp")
	run.wait(t, func(doc status.Document) bool {
		c := doc.Config
		return installedNames(doc) == "app.json" && c != nil && c.Active != nil && c.LastKnownGood != nil && c.LastKnownGood.UID == c.Active.UID
	})
	data, err := os.ReadFile(filepath.Join(root, "app.json"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := seccomp.Parse(data, profiles.Node())
	if err != nil {
		t.Fatal(err)
	}
	if v := p.Evaluate("mkdir", [6]uint64{}).Verdict; v.Action != seccomp.ActErrno {
		t.Errorf("installed app.json: mkdir %s, want denied:\n%s", v, data)
	}

	unsigned := reg.Ref("profiles/unsigned", "v1")
	doc := run.assign(t, cfg(unsigned), false)
	if want := "seccomp profile app.json: " + unsigned + ": not signed"; !strings.Contains(doc.Config.Error, want) {
		t.Errorf("config error %q, want %q", doc.Config.Error, want)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "app.json")); string(b) != string(data) {
		t.Errorf("app.json after a refused configuration holds %q", b)
	}

	unreachable := "oci://" + down + "/profiles/app:v1"
	run.assign(t, cfg(unreachable), true)
	doc = run.wait(t, func(doc status.Document) bool {
		c, _ := cond(doc, status.TypeSeccompProfiles)
		return c.Reason == profiles.ReasonInstallFailed
	})
	if c, _ := cond(doc, status.TypeSeccompProfiles); c.Status != condition.False || !strings.Contains(c.Message, unreachable+": manifest: registry unavailable") {
		t.Errorf("%s = %+v", status.TypeSeccompProfiles, c)
	}
}
