package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/config"
	"github.com/nodeshim/nodeshim/shim/lock"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

const typeMeta = "apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\n"

// assign delivers body as the configuration and waits until the lifecycle
// has taken it: active (want true) or refused and rolled back (false).
func (d *daemonRun) assign(t *testing.T, body string, active bool) status.Document {
	t.Helper()
	before := d.status(t)
	writeSource(t, d.opts.ConfigSource, body)
	return d.wait(t, func(doc status.Document) bool {
		c := doc.Config
		if c == nil || c.Assigned == nil || (before.Config != nil && before.Config.Assigned != nil && c.Assigned.UID == before.Config.Assigned.UID) {
			return false
		}
		if active {
			return c.Active != nil && c.Active.UID == c.Assigned.UID && c.Error == ""
		}
		return c.Error != ""
	})
}

// TestConfigInForce changes each field of the configuration through the
// lifecycle and observes its effect on the running daemon: a field that
// becomes active is in force, and one this daemon cannot put in force is
// refused with an error naming it, the previous configuration kept.
func TestConfigInForce(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/proc/pressure/memory")
	d := startDaemonWith(t, func(o *Options) {})
	host := d.opts.HostRoot
	if err := os.MkdirAll(filepath.Join(host, "var/lib/kubelet"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Every source restarted with new settings shows its effect in the
	// document; the daemon stays up through all of it.
	t.Run("plugins.expected", func(t *testing.T) {
		d.assign(t, typeMeta+"plugins: {expected: [csi.example.com]}\n", true)
		doc := d.wait(t, func(doc status.Document) bool {
			c, _ := cond(doc, "PluginsReady")
			return strings.Contains(c.Message, "csi.example.com")
		})
		if c, _ := cond(doc, "PluginsReady"); c.Status == condition.True {
			t.Errorf("PluginsReady with an expected driver missing = %+v", c)
		}
	})
	t.Run("network.cniConfDir", func(t *testing.T) {
		cni := filepath.Join(host, "opt/cni/net.d")
		if err := os.MkdirAll(cni, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cni, "10-test.conflist"), []byte(`{"cniVersion":"1.0.0","name":"t","plugins":[]}`), 0o644); err != nil {
			t.Fatal(err)
		}
		d.assign(t, typeMeta+"network: {cniConfDir: /opt/cni/net.d}\n", true)
		d.wait(t, func(doc status.Document) bool {
			c, _ := cond(doc, "NetworkReady")
			return c.Reason != "NoCNIConfig" && !strings.Contains(c.Message, "CNI network configuration")
		})
	})
	t.Run("kubeletRootDir", func(t *testing.T) {
		nodefs := func(doc status.Document) status.Signal {
			if doc.Pressure != nil {
				for _, s := range doc.Pressure.Signals {
					if s.Name == "nodefs.available" {
						return s
					}
				}
			}
			return status.Signal{}
		}
		// The pressure monitor's nodefs and the plugin registry follow the
		// new root (the registry watcher creates its plugins_registry).
		d.assign(t, typeMeta+"kubeletRootDir: /srv/kubelet\n", true)
		d.wait(t, func(doc status.Document) bool {
			s := nodefs(doc)
			return strings.Contains(s.Source+s.Unknown, "/srv/kubelet")
		})
		if _, err := os.Stat(filepath.Join(host, "srv/kubelet/plugins_registry")); err != nil {
			t.Errorf("plugin registry under the new kubelet root: %v", err)
		}
	})
	t.Run("pressure.evictionHard", func(t *testing.T) {
		d.assign(t, typeMeta+"pressure: {evictionHard: {memory.available: 1Ei}}\n", true)
		doc := d.wait(t, func(doc status.Document) bool {
			c, _ := cond(doc, "MemoryPressure")
			return c.Status == condition.True
		})
		if c, _ := cond(doc, status.TypePressureMonitor); !strings.Contains(c.Message, "memory.available<1Ei from nodeshim config") {
			t.Errorf("%s = %+v, want the thresholds and their origin", status.TypePressureMonitor, c)
		}
	})
	t.Run("kubelet.configFile", func(t *testing.T) {
		kc := filepath.Join(host, "etc/kubernetes/kubelet.yaml")
		dropins := filepath.Join(host, "etc/kubernetes/kubelet.conf.d")
		if err := os.MkdirAll(dropins, 0o755); err != nil {
			t.Fatal(err)
		}
		// The kubelet's own thresholds, with a drop-in overriding one: the
		// signals it does not name are disabled, as kubelet does.
		if err := os.WriteFile(kc, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard: {memory.available: 1Mi, pid.available: 1%}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dropins, "10-memory.conf"), []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard: {memory.available: 2Ei}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		d.assign(t, typeMeta+"kubelet: {configFile: /etc/kubernetes/kubelet.yaml, configDir: /etc/kubernetes/kubelet.conf.d}\n", true)
		doc := d.wait(t, func(doc status.Document) bool {
			c, _ := cond(doc, status.TypePressureMonitor)
			return strings.Contains(c.Message, "from kubelet config /etc/kubernetes/kubelet.yaml")
		})
		c, _ := cond(doc, status.TypePressureMonitor)
		if !strings.Contains(c.Message, "memory.available<2Ei") || !strings.Contains(c.Message, "pid.available<1%") ||
			strings.Contains(c.Message, "nodefs") {
			t.Errorf("%s = %+v, want the kubelet's merged thresholds only", status.TypePressureMonitor, c)
		}
		d.wait(t, func(doc status.Document) bool { c, _ := cond(doc, "MemoryPressure"); return c.Status == condition.True })

		// A kubelet configuration that does not decode is refused, naming
		// the file; the previous configuration stays in force.
		bad := filepath.Join(host, "etc/kubernetes/bad.yaml")
		if err := os.WriteFile(bad, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHardd: {}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		doc = d.assign(t, typeMeta+"kubelet: {configFile: /etc/kubernetes/bad.yaml}\n", false)
		if !strings.Contains(doc.Config.Error, "bad.yaml") || !strings.Contains(doc.Config.Error, "evictionHardd") {
			t.Errorf("config error = %q, want the kubelet file and its unknown field", doc.Config.Error)
		}
	})
	t.Run("api.readOnlyUIDs", func(t *testing.T) {
		d.assign(t, typeMeta+"api: {readOnlyUIDs: [65534]}\n", true)
		d.wait(t, func(status.Document) bool {
			fi, err := os.Stat(d.sock)
			di, derr := os.Stat(d.opts.RootDir)
			return err == nil && derr == nil && fi.Mode().Perm() == 0o666 && di.Mode().Perm() == 0o711
		})
		// The reporter's uid now reads the status over the new socket (the
		// test's temporary directories above the root dir are 0700).
		for p := filepath.Dir(d.opts.RootDir); p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if got := asUser(t, d.sock, 65534, "GET /status", "POST /checkpoint/a/b/c"); got != "200 403" {
			t.Errorf("reporter uid after the change = %q, want 200 403", got)
		}
	})
	t.Run("api.tcpAddress", func(t *testing.T) {
		dir := t.TempDir()
		cert, key, pool := selfSigned(t, dir)
		token := filepath.Join(dir, "token")
		if err := os.WriteFile(token, []byte("t0ken\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if d.lastTCP() != nil {
			t.Fatal("a TCP listener before one was configured")
		}
		d.assign(t, typeMeta+"api: {tcpAddress: '127.0.0.1:0', tlsCertFile: "+cert+", tlsKeyFile: "+key+", tokenFile: "+token+"}\n", true)
		var addr net.Addr
		d.wait(t, func(status.Document) bool { addr = d.lastTCP(); return addr != nil })
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		req, _ := http.NewRequest("GET", "https://"+addr.String()+"/healthz", nil)
		req.Header.Set("Authorization", "Bearer t0ken")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET /healthz over the new TCP listener: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET /healthz over TCP = %d", resp.StatusCode)
		}
		c.CloseIdleConnections()

		// A certificate that cannot be loaded is refused before it is
		// active; the listener of the previous configuration keeps serving.
		doc := d.assign(t, typeMeta+"api: {tcpAddress: '127.0.0.1:0', tlsCertFile: "+dir+"/missing.crt, tlsKeyFile: "+key+", tokenFile: "+token+"}\n", false)
		if !strings.Contains(doc.Config.Error, "missing.crt") {
			t.Errorf("config error = %q, want the missing certificate named", doc.Config.Error)
		}
		if got := d.lastTCP(); got.String() != addr.String() {
			t.Errorf("TCP listener restarted (%v -> %v) for a refused configuration", addr, got)
		}
	})
	t.Run("configSoakPeriod", func(t *testing.T) {
		doc := d.assign(t, typeMeta+"configSoakPeriod: 5s\n", true)
		if c, _ := cond(doc, config.ConditionConfigHealthy); c.Status != condition.True || c.Reason != config.ReasonConfigTrial {
			t.Errorf("ConfigHealthy on trial = %+v, want True %s", c, config.ReasonConfigTrial)
		}
		if r, _ := cond(doc, condition.TypeReady); r.Reason == config.ReasonConfigTrial {
			t.Errorf("Ready names the trial: %+v", r)
		}
		d.wait(t, func(doc status.Document) bool {
			c := doc.Config
			return c.LastKnownGood != nil && c.LastKnownGood.UID == c.Assigned.UID
		})
	})
	for _, tt := range []struct {
		name, body, want string
	}{
		{"rootDir", "rootDir: /var/lib/elsewhere\n", `rootDir "/var/lib/elsewhere" differs from serve's --root-dir`},
		{"lockFile", "lockFile: /run/elsewhere.lock\n", `lockFile "/run/elsewhere.lock" differs from serve's --lock-file`},
		{"featureGates", "featureGates: {SomeGate: true}\n", `unrecognized feature gate "SomeGate"`},
	} {
		t.Run(tt.name+" refused", func(t *testing.T) {
			doc := d.assign(t, typeMeta+tt.body, false)
			if !strings.Contains(doc.Config.Error, tt.want) {
				t.Errorf("config error = %q, want %q", doc.Config.Error, tt.want)
			}
			if c, _ := cond(doc, config.ConditionConfigHealthy); c.Status != condition.False || c.Reason != config.ReasonConfigRolledBack {
				t.Errorf("ConfigHealthy = %+v", c)
			}
		})
	}
	// The restated start-up settings are accepted.
	t.Run("rootDir restated", func(t *testing.T) {
		d.assign(t, typeMeta+"rootDir: "+d.opts.RootDir+"\nlockFile: "+d.opts.LockFile+"\n", true)
	})
	if code, _ := d.do(t, "GET", "/healthz"); code != 200 {
		t.Errorf("/healthz after every change = %d", code)
	}
}

// TestTCPAddressInUse: a TLS listener that cannot start at start-up (its
// address taken) stops the daemon with an error naming the address, and
// leaves neither socket nor lock behind.
func TestTCPAddressInUse(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	cert, key, _ := selfSigned(t, dir)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	opts := Options{
		RootDir:      filepath.Join(dir, "root"),
		LockFile:     filepath.Join(dir, "nodeshim.lock"),
		ConfigSource: filepath.Join(dir, "source"),
		HostRoot:     filepath.Join(dir, "host"),
		Logger:       slog.New(slog.DiscardHandler),
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	writeSource(t, opts.ConfigSource, typeMeta+"api: {tcpAddress: '"+taken.Addr().String()+"', tlsCertFile: "+cert+", tlsKeyFile: "+key+", tokenFile: "+dir+"/token}\n")
	err = Run(context.Background(), opts)
	if err == nil || !strings.Contains(err.Error(), taken.Addr().String()) {
		t.Fatalf("Run = %v, want an error naming %s", err, taken.Addr())
	}
	if _, err := os.Stat(filepath.Join(opts.RootDir, "nodeshim.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left: %v", err)
	}
	l, err := lock.Acquire(opts.LockFile, lock.Options{})
	if err != nil {
		t.Fatalf("lock not released: %v", err)
	}
	l.Release()
}
