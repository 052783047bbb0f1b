package ociprofile_test

import (
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"github.com/nodeshim/nodeshim/shim/profiles"
	"github.com/nodeshim/nodeshim/shim/profiles/ociprofile"
	"github.com/nodeshim/nodeshim/testenv/registrytest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
)

func TestMain(m *testing.M) { os.Exit(rtEnv.Main(m)) }

// rtEnv runs the real container runtimes of the package's tests.
var rtEnv runtimetest.Env

var discard = slog.New(slog.DiscardHandler)

// denyMkdir is a profile as security-profiles-operator keeps it and spoc
// pushes it: everything allowed but mkdir, denied with EPERM.
const denyMkdir = `apiVersion: security-profiles-operator.x-k8s.io/v1beta1
kind: SeccompProfile
metadata:
  name: deny-mkdir
spec:
  defaultAction: SCMP_ACT_ALLOW
  syscalls:
  - action: SCMP_ACT_ERRNO
    names: [mkdir, mkdirat]
`

// stacked extends a base (%s) and denies symbolic links too.
const stacked = `{"defaultAction":"SCMP_ACT_ALLOW","baseProfileName":"%s",
	"syscalls":[{"names":["symlink","symlinkat"],"action":"SCMP_ACT_ERRNO"}]}`

func installer(t *testing.T, client *ociprofile.Client) *profiles.Installer {
	dir := t.TempDir()
	return &profiles.Installer{Root: filepath.Join(dir, "kubelet", "seccomp"), StateDir: filepath.Join(dir, "state"),
		Parse: seccomp.NodeParseOptions(nil), Logger: discard, Registry: client}
}

func client(t *testing.T, reg *registrytest.Registry, pub string) *ociprofile.Client {
	c, err := ociprofile.New([]string{pub}, []string{reg.Host})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestInstallFromRegistry installs a profile that spoc pushed and cosign
// signed, as serve's installer does: as a configured profile whose content
// is its reference, and as the oci:// base of another. Containers of
// containerd's CRI, under runc and crun, run under the installed files: the
// profile read from the registry denies mkdir, the stacked one mkdir and
// symbolic links, and everything else runs.
func TestInstallFromRegistry(t *testing.T) {
	reg := registrytest.Start(t)
	key, pub := registrytest.NewKey(t)
	desc := reg.PushSPOC(t, "profiles/deny-mkdir", "v1", registrytest.Layer{Title: ociprofile.DefaultProfileFile, Data: []byte(denyMkdir)})
	reg.Sign(t, "profiles/deny-mkdir", desc.Digest, key)

	in := installer(t, client(t, reg, pub))
	set := map[string]string{
		"shop/pulled.json":  reg.Ref("profiles/deny-mkdir", "v1"),
		"shop/stacked.json": strings.Replace(stacked, "%s", reg.Ref("profiles/deny-mkdir", desc.Digest.String()), 1),
	}
	installed, err := in.Apply(set)
	if err != nil {
		t.Fatal(err)
	}
	if len(installed) != 2 {
		t.Fatalf("installed %+v", installed)
	}
	paths := map[string]string{}
	for _, i := range installed {
		paths[i.Name] = i.Path
		data, err := os.ReadFile(i.Path)
		if err != nil {
			t.Fatal(err)
		}
		p, err := seccomp.Parse(data, profiles.Node())
		if err != nil {
			t.Fatalf("%s: %v\n%s", i.Name, err, data)
		}
		if p.BaseProfileName != "" || strings.Contains(string(data), "oci://") {
			t.Errorf("%s still names its source:\n%s", i.Name, data)
		}
		if v := p.Evaluate("mkdir", [6]uint64{}).Verdict; v.Action != seccomp.ActErrno {
			t.Errorf("%s: mkdir %s, want denied", i.Name, v)
		}
	}

	c := rtEnv.Containerd(t)
	for _, h := range []string{runtimetest.RuntimeRunc, runtimetest.RuntimeCrun} {
		t.Run(h, func(t *testing.T) {
			pod := c.RunPod(t, runtimetest.PodOptions{Namespace: "shop", Name: "oci-" + h, RuntimeHandler: h})
			for _, tc := range []struct{ profile, want string }{
				{"shop/pulled.json", "mkdir=1 ln=0 done"},
				{"shop/stacked.json", "mkdir=1 ln=1 done"},
			} {
				ctr := pod.Run(t, runtimetest.ContainerOptions{
					Name:             strings.TrimSuffix(filepath.Base(tc.profile), ".json"),
					Command:          []string{"sh", "-c", "mkdir /tmp/d 2>/dev/null; m=$?; ln -s /tmp /tmp/l 2>/dev/null; echo mkdir=$m ln=$? done"},
					SeccompLocalhost: paths[tc.profile],
				})
				code := ctr.Wait(t)
				if logs := ctr.Logs(t); code != 0 || !strings.Contains(logs, tc.want) {
					t.Errorf("%s under %s: exit %d, logs %q, want %q", h, tc.profile, code, logs, tc.want)
				}
			}
		})
	}
}

// TestInstallFromRegistryRefused: a profile that is not a signed profile
// artifact installs nothing of its configuration, not even the good
// profile beside it; the error names the profile and the reference and
// says why, and the condition's reason says whether another configuration
// is needed (InvalidProfile) or the same one is tried again
// (InstallFailed: the registry could not be reached).
func TestInstallFromRegistryRefused(t *testing.T) {
	reg := registrytest.Start(t)
	key, pub := registrytest.NewKey(t)
	otherKey, _ := registrytest.NewKey(t)
	good := reg.PushSPOC(t, "profiles/good", "v1", registrytest.Layer{Title: "profile.yaml", Data: []byte(denyMkdir)})
	reg.Sign(t, "profiles/good", good.Digest, key)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close()

	tests := []struct {
		name string
		// setup pushes what repo should hold and returns the reference.
		setup func(repo string) string
		// base: the reference is a baseProfileName, not the content.
		base    bool
		client  *ociprofile.Client
		wantErr error
		reason  string
	}{
		{name: "unsigned", setup: func(repo string) string {
			reg.PushSPOC(t, repo, "v1", registrytest.Layer{Title: "profile.yaml", Data: []byte(denyMkdir)})
			return reg.Ref(repo, "v1")
		}, wantErr: ociprofile.ErrUnsigned},
		{name: "unsigned base", base: true, setup: func(repo string) string {
			reg.PushSPOC(t, repo, "v1", registrytest.Layer{Title: "profile.yaml", Data: []byte(denyMkdir)})
			return reg.Ref(repo, "v1")
		}, wantErr: ociprofile.ErrUnsigned},
		{name: "signed by an untrusted key", setup: func(repo string) string {
			d := reg.PushSPOC(t, repo, "v1", registrytest.Layer{Title: "profile.yaml", Data: []byte(denyMkdir)})
			reg.Sign(t, repo, d.Digest, otherKey)
			return reg.Ref(repo, "v1")
		}, wantErr: ociprofile.ErrBadSignature},
		{name: "signature of another artifact", setup: func(repo string) string {
			d := reg.PushSPOC(t, repo, "v1", registrytest.Layer{Title: "profile.yaml", Data: []byte(strings.Replace(denyMkdir, "mkdir, ", "", 1))})
			reg.SignPayload(t, repo, d.Digest, registrytest.Payload(reg.Host+"/profiles/good", good.Digest), key)
			return reg.Ref(repo, "v1")
		}, wantErr: ociprofile.ErrOtherDigest},
		{name: "oversized layer", setup: func(repo string) string {
			d := reg.PushSPOC(t, repo, "v1", registrytest.Layer{Title: "profile.yaml", Data: []byte(denyMkdir + "#" + strings.Repeat("x", ociprofile.MaxProfileBytes) + "\n")})
			reg.Sign(t, repo, d.Digest, key)
			return reg.Ref(repo, "v1")
		}, wantErr: ociprofile.ErrTooLarge},
		{name: "not a profile", setup: func(repo string) string {
			d := reg.PushSPOC(t, repo, "v1", registrytest.Layer{Title: "README.md", Data: []byte("# hello\n")})
			reg.Sign(t, repo, d.Digest, key)
			return reg.Ref(repo, "v1")
		}, wantErr: ociprofile.ErrNotProfile},
		{name: "no trusted key configured", setup: func(string) string { return reg.Ref("profiles/good", "v1") },
			client: nil, wantErr: profiles.ErrOCIBase},
		{name: "registry down", setup: func(string) string { return "oci://" + down + "/profiles/good:v1" },
			wantErr: ociprofile.ErrUnavailable, reason: profiles.ReasonInstallFailed},
	}
	trusted, err := ociprofile.New([]string{pub}, []string{reg.Host, down})
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ref := tc.setup("refused/case" + string(rune('a'+i)))
			cl := trusted
			if tc.name == "no trusted key configured" {
				cl = tc.client
			}
			in := installer(t, cl)
			set := map[string]string{"shop/good.json": reg.Ref("profiles/good", "v1"), "shop/app.json": ref}
			if tc.base {
				set["shop/app.json"] = strings.Replace(stacked, "%s", ref, 1)
			}
			installed, err := in.Apply(set)
			t.Log(err)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if msg := err.Error(); !strings.Contains(msg, "seccomp profile shop/app.json: ") || !strings.Contains(msg, ref) {
				t.Errorf("err = %q does not name the profile and %s", msg, ref)
			}
			if len(installed) != 0 {
				t.Errorf("installed %+v", installed)
			}
			// Nothing under the seccomp root, not even the good profile.
			_ = filepath.WalkDir(filepath.Dir(in.Root), func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					t.Errorf("%s written", p)
				}
				return nil
			})
			want := tc.reason
			if want == "" {
				want = profiles.ReasonInvalidProfile
			}
			if c := profiles.Condition(in.Root, len(set), installed, err); c.Reason != want || !strings.Contains(c.Message, ref) {
				t.Errorf("condition %s: %s, want reason %s naming %s", c.Reason, c.Message, want, ref)
			}
			if profiles.Retryable(err) != (want == profiles.ReasonInstallFailed) {
				t.Errorf("Retryable = %v for %v", profiles.Retryable(err), err)
			}
		})
	}
}
