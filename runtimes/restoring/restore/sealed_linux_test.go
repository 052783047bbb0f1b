package restore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/criu/archive/seal/sealtest"
	"github.com/nodeshim/nodeshim/criu/pod"
	"github.com/nodeshim/nodeshim/runtimes/restoring"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
)

// sealedMarker stands for a secret in the workload's memory: the shell
// holds it in a variable (and in its command line).
const sealedMarker = "nodeshim-sealed-pod-marker-9f27c4"

// sealKeys writes a node's age identity, its signing key and a trust
// policy that trusts that key into dir.
func sealKeys(t *testing.T, dir string) (recipient, identity, signingKey, policy string) {
	t.Helper()
	k := sealtest.NodeKeys(t, dir, "node-a")
	return k.Recipient, k.IdentityFile, k.SigningKeyFile, k.PolicyFile
}

// editRestoreConfig rewrites the handler's config with edit; the test's
// end puts the one before back.
func editRestoreConfig(t *testing.T, edit func(*restoring.Config)) {
	t.Helper()
	p := restoring.ConfigPath(filepath.Join(bins, "nodeshim-runc"))
	old, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var cfg restoring.Config
	if err := json.Unmarshal(old, &cfg); err != nil {
		t.Fatal(err)
	}
	edit(&cfg)
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(p, old, 0o600); err != nil {
			t.Error(err)
		}
	})
}

// setRestoreConfig rewrites the handler's config with the trust policy
// and identities given until the test ends.
func setRestoreConfig(t *testing.T, policy string, identities ...string) {
	t.Helper()
	editRestoreConfig(t, func(c *restoring.Config) { c.TrustPolicy, c.Identities = policy, identities })
}

// refusedStart creates container name in a pod restoring from ckpt and
// checks that its start is refused with want in the error, nothing left.
func refusedStart(t *testing.T, c *runtimetest.Containerd, ckpt, name, want string) {
	t.Helper()
	p := restorePod(t, c, ckpt)
	ctr, err := createRaw(t, c, p, name, counter, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err = c.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ID})
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("start = %v; want a refusal naming %q", err, want)
	}
	t.Log(err)
	if err := p.Remove(); err != nil {
		t.Fatal(err)
	}
	checkNothingLeft(t)
}

// TestRestoresSealedPodCheckpoint: with checkpoint.encryption and
// checkpoint.signing configured, a pod checkpoint's archive is encrypted
// (the workload's memory marker is in none of its files) and signed, and
// so is its manifest; the handler restores it on a node with the
// identity and the trust policy, and refuses it, unpacking nothing, on a
// node without the identity and when a byte of it changed.
func TestRestoresSealedPodCheckpoint(t *testing.T) {
	c := rt.Containerd2(t)
	bin := criutest.Require(t)
	recipient, identity, signingKey, policy := sealKeys(t, t.TempDir())
	p := c.RunPod(t, runtimetest.PodOptions{})
	cmd := []string{"sh", "-c", "m=" + sealedMarker + "; " + counter[2]}
	ctr := p.Run(t, runtimetest.ContainerOptions{Name: "counter", Command: cmd})
	before := waitCount(t, ctr, 10)
	res := podCheckpoint(t, c, bin, p, seal.Config{Recipients: []string{recipient}, SigningKey: signingKey, Node: "node-a"})
	if err := p.Remove(); err != nil {
		t.Fatal(err)
	}
	archivePath := filepath.Join(res.Path, res.Manifest.Containers[0].Archive)
	checkSealedFiles(t, res.Path, archivePath, identity)
	ckpt := filepath.Base(res.Path)

	t.Run("no identity", func(t *testing.T) {
		setRestoreConfig(t, policy)
		refusedStart(t, c, ckpt, "counter", filepath.Base(archivePath)+" is encrypted and no age identity is configured")
	})
	t.Run("tampered byte", func(t *testing.T) {
		setRestoreConfig(t, policy, identity)
		flip(t, archivePath, 100)
		defer flip(t, archivePath, 100)
		refusedStart(t, c, ckpt, "counter", "digest mismatch")
	})
	t.Run("tampered manifest", func(t *testing.T) {
		setRestoreConfig(t, policy, identity)
		// Still valid JSON, one byte longer.
		mp := filepath.Join(res.Path, pod.ManifestFile)
		fi, err := os.Stat(mp)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(mp, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.WriteString("\n")
		if err := errors.Join(err, f.Close()); err != nil {
			t.Fatal(err)
		}
		defer os.Truncate(mp, fi.Size()) //nolint:errcheck // checked by the next subtest
		refusedStart(t, c, ckpt, "counter", pod.ManifestFile+": digest mismatch")
	})
	t.Run("manifest edited to make the container a finished init container", func(t *testing.T) {
		setRestoreConfig(t, policy, identity)
		// Were it trusted, the counter would start fresh, not restored.
		mp := filepath.Join(res.Path, pod.ManifestFile)
		orig, err := os.ReadFile(mp)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(orig, &m); err != nil {
			t.Fatal(err)
		}
		ctrs, _ := m["containers"].([]any)
		if len(ctrs) != 1 {
			t.Fatalf("manifest containers %v; want the counter alone", m["containers"])
		}
		ctrs[0].(map[string]any)["name"] = "renamed"
		m["initContainers"] = []any{map[string]any{"name": "counter", "exitCode": 0}}
		edited, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(mp, edited, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.WriteFile(mp, orig, 0o600) //nolint:errcheck // checked by the next subtest
		refusedStart(t, c, ckpt, "counter", pod.ManifestFile+": digest mismatch")
	})
	t.Run("identity", func(t *testing.T) {
		setRestoreConfig(t, policy, identity)
		restored := restorePod(t, c, ckpt)
		startRestored(t, restored, "counter", before)
		if err := restored.Remove(); err != nil {
			t.Fatal(err)
		}
		checkNothingLeft(t)
	})
}

// checkSealedFiles checks that every file of the pod checkpoint at dir
// lacks the marker, that the archive is an age file and that it and the
// manifest are signed, and that the archive holds the marker once
// decrypted with identity (so that its absence means something).
func checkSealedFiles(t *testing.T, dir, archivePath, identity string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(sealedMarker)) {
			t.Errorf("%s holds the workload's marker in the clear", e.Name())
		}
	}
	for _, p := range []string{archivePath, filepath.Join(dir, pod.ManifestFile)} {
		if _, err := os.Stat(p + seal.SignatureSuffix); err != nil {
			t.Errorf("no signature beside %s: %v", filepath.Base(p), err)
		}
	}
	ids, err := seal.LoadIdentities([]string{identity})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(archivePath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := seal.Open(f, archivePath, seal.OpenOptions{Identities: ids})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Encrypted {
		t.Fatalf("%s is not encrypted", archivePath)
	}
	s, err := a.Stream()
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(plain, []byte(sealedMarker)) {
		t.Errorf("the decrypted archive lacks the marker: the check above proves nothing")
	}
}

// flip inverts the byte at off in the file at p.
func flip(t *testing.T, p string, off int64) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}
