package criu

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"filippo.io/age"

	"github.com/nodeshim/nodeshim/criu/archive/archivetest"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

// counterMarker returns the first n bytes of the counter workload's
// ballast (testworkload.RunCounter's xorshift64 sequence): bytes of its
// memory that its pages image holds in the clear.
func counterMarker(n int) []byte {
	b := make([]byte, n)
	x := uint64(0x9E3779B97F4A7C15)
	for i := 0; i+8 <= n; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(b[i:], x)
	}
	return b
}

// sealKeys are a node's age identity and signing key, and a policy that
// trusts the key.
type sealKeys struct {
	id     *age.X25519Identity
	signer seal.Signer
	policy *seal.Policy
}

func newSealKeys(t testing.TB) sealKeys {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return sealKeys{id: id, signer: seal.Signer{Node: "node-a", Key: priv},
		policy: &seal.Policy{Keys: []seal.TrustedKey{{KeyID: seal.KeyID(pub), Node: "node-a"}}}}
}

// inMemoryProbe records, each time it is called, whether every
// directory in dir is memory-backed, and how many it saw.
type inMemoryProbe struct {
	mu     sync.Mutex
	seen   int
	onDisk []string
}

func (p *inMemoryProbe) check(t testing.TB, dir string) {
	ents, _ := os.ReadDir(dir)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		full := filepath.Join(dir, e.Name())
		mem, err := seal.InMemory(full)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		p.seen++
		if err != nil || !mem {
			p.onDisk = append(p.onDisk, full)
		}
	}
}

// TestSealedCheckpointRestore: a process checkpointed with encryption
// and a signature is restored from its archive, verified and decrypted;
// its memory is in the clear in a plain archive of it and nowhere in the
// sealed one, and CRIU's images on both sides were on a tmpfs although
// the checkpoint directory is on disk.
func TestSealedCheckpointRestore(t *testing.T) {
	bin := requireCriu(t)
	k := newSealKeys(t)
	pid, dir := testworkload.Start(t, "count", 4)
	testworkload.WaitCount(t, dir, 5)
	root := t.TempDir()
	archives := filepath.Join(root, CheckpointsDir)
	if mem, err := seal.InMemory(root); err != nil || mem {
		t.Fatalf("the test needs %s on disk: in memory %v, %v", root, mem, err)
	}
	marker := counterMarker(64)

	// The control: a plain archive holds the marker.
	plain, err := Checkpoint(t.Context(), pidTarget(t, pid), Options{Binary: bin, ArchiveDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(plain.Path); err != nil || !bytes.Contains(b, marker) {
		t.Fatalf("the plain archive does not hold the workload's memory (%v): the marker test proves nothing", err)
	}

	var ck inMemoryProbe
	res, err := Checkpoint(t.Context(), pidTarget(t, pid), Options{
		Binary: bin, RootDir: root,
		Seal: seal.WriteOptions{Recipients: []age.Recipient{k.id.Recipient()}, Signer: &k.signer},
		Progress: func(p Progress) {
			if p.Phase == PhaseArchiving || p.Phase == PhaseDumping {
				ck.check(t, archives)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sealed checkpoint: dump %v, archive %v, fsync %v, total %v; plain total %v", res.Dump, res.Archive, res.Fsync, res.Total, plain.Total)
	if ck.seen == 0 || len(ck.onDisk) > 0 {
		t.Errorf("checkpoint work dirs: %d seen, on disk: %v", ck.seen, ck.onDisk)
	}
	stored, err := os.ReadFile(res.Path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(stored, marker) || !bytes.HasPrefix(stored, []byte("age-encryption.org/v1\n")) {
		t.Fatal("the sealed archive is not an age file, or holds the workload's memory in the clear")
	}
	if res.Size != int64(len(stored)) {
		t.Errorf("Result.Size %d, archive has %d bytes", res.Size, len(stored))
	}
	if _, err := os.Stat(res.Path + seal.SignatureSuffix); err != nil {
		t.Fatalf("no signature file: %v", err)
	}

	testworkload.Kill(t, pid)
	stopped := testworkload.Counts(t, dir)
	var rs inMemoryProbe
	rr, err := Restore(t.Context(), res.Path, RestoreOptions{
		Binary: bin, RootDir: root,
		Open: seal.OpenOptions{Policy: k.policy, Identities: []age.Identity{k.id}},
		Progress: func(p Progress) {
			if p.Phase == PhaseRestoring {
				rs.check(t, archives)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testworkload.Kill(t, rr.Pid) })
	if rs.seen == 0 || len(rs.onDisk) > 0 {
		t.Errorf("restore work dirs: %d seen, on disk: %v", rs.seen, rs.onDisk)
	}
	testworkload.WaitCount(t, dir, len(stopped)+10)
	testworkload.AssertRunning(t, rr.Pid, dir)
	if _, err := os.Stat(rr.WorkDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("restore work dir %s left behind: %v", rr.WorkDir, err)
	}
}

// TestSealedRestoreRefusals: an archive the trust policy refuses, or that
// this node cannot decrypt, fails Restore before anything is unpacked:
// the work root stays empty, and the error is classed and names why.
func TestSealedRestoreRefusals(t *testing.T) {
	k, other := newSealKeys(t), newSealKeys(t)
	content := archivetest.Tar(t, archivetest.Minimal("{}", "{}"))
	sealed := seal.WriteOptions{Recipients: []age.Recipient{k.id.Recipient()}, Signer: &k.signer}
	for _, tc := range []struct {
		name   string
		w      seal.WriteOptions
		open   seal.OpenOptions
		change func(path string) error
		class  error
		want   string
	}{
		{name: "tampered byte", w: sealed, open: seal.OpenOptions{Policy: k.policy, Identities: []age.Identity{k.id}},
			change: func(p string) error {
				f, err := os.OpenFile(p, os.O_RDWR, 0)
				if err != nil {
					return err
				}
				defer f.Close()
				_, err = f.WriteAt([]byte{0xff}, 300)
				return err
			}, class: seal.ErrUntrusted, want: "digest mismatch"},
		{name: "unsigned", w: seal.WriteOptions{Recipients: sealed.Recipients}, open: seal.OpenOptions{Policy: k.policy, Identities: []age.Identity{k.id}}, class: seal.ErrUntrusted, want: "unsigned"},
		{name: "unknown key", w: sealed, open: seal.OpenOptions{Policy: other.policy, Identities: []age.Identity{k.id}}, class: seal.ErrUntrusted, want: "unknown key"},
		{name: "wrong identity", w: sealed, open: seal.OpenOptions{Policy: k.policy, Identities: []age.Identity{other.id}}, class: seal.ErrNoIdentity, want: "identities is a recipient"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "checkpoint-a_b-c-2026-01-01T00:00:00Z.tar")
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			w, err := seal.NewWriter(f, tc.w)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(content); err != nil {
				t.Fatal(err)
			}
			if err := errors.Join(w.Close(), f.Close(), w.Seal(path)); err != nil {
				t.Fatal(err)
			}
			if tc.change != nil {
				if err := tc.change(path); err != nil {
					t.Fatal(err)
				}
			}
			work := t.TempDir()
			_, err = Restore(t.Context(), path, RestoreOptions{Binary: Binary{Path: "/nonexistent/criu"}, WorkRoot: work, Open: tc.open})
			if !errors.Is(err, tc.class) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %v; want %v naming %s and %q", err, tc.class, path, tc.want)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) && !errors.Is(err, errdefs.ErrNotSupported) {
				t.Errorf("error %v has no errdefs class", err)
			}
			if ents, _ := os.ReadDir(work); len(ents) != 0 {
				t.Errorf("work root holds %d entries after a refusal", len(ents))
			}
		})
	}
}
