package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/criu/archive/seal/sealtest"
	"github.com/nodeshim/nodeshim/runtimes/cri"
	"github.com/nodeshim/nodeshim/shim/checkpoint/retention"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	nstestutil "github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

// TestServiceSealsArchives: with checkpoint.encryption and
// checkpoint.signing configured, the service's archives are age files with
// a signature that a trusting policy accepts; retention removes an
// archive's signature with it; a signing key that cannot be read fails
// the checkpoint naming the field, before anything is frozen.
func TestServiceSealsArchives(t *testing.T) {
	nstestutil.RequireRoot(t)
	bin := criutest.RequireChecked(t)
	pid, wdir := testworkload.Start(t, "count", 4)
	keys := t.TempDir()
	k := sealtest.NodeKeys(t, keys, "node-a")
	var cfg atomic.Pointer[seal.Config]
	cfg.Store(&seal.Config{Recipients: []string{k.Recipient}, SigningKey: k.SigningKeyFile, Node: "node-a"})
	dir := filepath.Join(t.TempDir(), "checkpoints")
	s := New(Options{
		Settings: func() Settings {
			return Settings{Enabled: true, Dir: dir, DefaultTimeout: time.Minute, RuntimeEndpoint: "unix:///run/test.sock",
				Retention: retention.Policy{MaxPerContainer: 1}, Seal: *cfg.Load()}
		},
		Dial: func(string) (cri.Resolver, func() error, error) {
			return resolverFunc(func(context.Context, cri.Target) (cri.Process, error) {
				return cri.Process{ContainerID: "c1", PID: pid}, nil
			}), func() error { return nil }, nil
		},
		FindCriu: func() (criu.Binary, error) { return bin, nil },
		Parallel: 1,
		Model:    status.New(nil),
	})
	t.Cleanup(func() { s.Close() })

	var paths []string
	for range 2 {
		res, err := s.Checkpoint(t.Context(), web, 0)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, res.Path)
	}
	// The first archive went to retention with its signature.
	for _, p := range []string{paths[0], paths[0] + seal.SignatureSuffix} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s outlived retention: %v", p, err)
		}
	}
	f, err := os.Open(paths[1])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	policy := &seal.Policy{Keys: []seal.TrustedKey{{KeyID: seal.KeyID(k.Public), Node: "node-a"}}}
	ids, err := seal.LoadIdentities([]string{k.IdentityFile})
	if err != nil {
		t.Fatal(err)
	}
	a, err := seal.Open(f, paths[1], seal.OpenOptions{Policy: policy, Identities: ids})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Encrypted || a.Signature == nil || a.Signature.Node != "node-a" {
		t.Fatalf("archive %s: encrypted %v, signature %+v", paths[1], a.Encrypted, a.Signature)
	}
	r, err := a.Reader()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := criu.ValidateArchive(r); err != nil {
		t.Fatal(err)
	}

	cfg.Store(&seal.Config{SigningKey: filepath.Join(keys, "missing.key")})
	_, err = s.Checkpoint(t.Context(), web, 0)
	if err == nil || !strings.Contains(err.Error(), "checkpoint.signing.keyFile") {
		t.Fatalf("checkpoint with a missing key: %v, want an error naming checkpoint.signing.keyFile", err)
	}
	testworkload.AssertRunning(t, pid, wdir)
	if b, err := os.ReadFile(paths[1]); err != nil || !bytes.HasPrefix(b, []byte("age-encryption.org/v1\n")) {
		t.Errorf("the kept archive changed: %v", err)
	}
}
