package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/criu/archive/seal/sealtest"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
)

// TestEncryptedCheckpointImageCLI: `nodeshim checkpoint` of a podman
// container into an encrypted, signed archive, then `nodeshim checkpoint
// image` of it, which refuses without --encryption-key and with it
// writes an image whose layer is encrypted to node B's JWE key and whose
// manifest node A signs; `checkpoint image verify` accepts it under A's
// trust policy and refuses it changed or under another policy.
func TestEncryptedCheckpointImageCLI(t *testing.T) {
	p := rt.Podman(t)
	criutest.RequireOnPath(t)
	a := node{P: p}
	keys := t.TempDir()
	nodeA := sealtest.NodeKeys(t, keys, "node-a")
	keyB := sealtest.NewJWEKey(t, keys, "node-b", false)
	const name, ref = "nodeshim-enc-image", "localhost/nodeshim-enc-image:checkpoint"

	if res := a.P.Run(t, runtimetest.RunOptions{Name: name, Detach: true, Runtime: runtimetest.RuntimeRunc, Command: []string{
		"sh", "-c", "i=0; while true; do i=$((i+1)); echo $i > /count; sleep 0.05; done"}}); res.ExitCode != 0 {
		t.Fatalf("podman run: exit %d: %s", res.ExitCode, res.Stderr)
	}
	a.waitCount(t, name, 20)

	out, _, err := runSplit(t, "checkpoint", "--container-id", name, "--podman-root", p.Root, "--root-dir", t.TempDir(),
		"--recipient", nodeA.Recipient, "--signing-key", nodeA.SigningKeyFile, "--node-name", "node-a", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var ck checkpointOutput
	if err := json.Unmarshal([]byte(out), &ck); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if head := readHead(t, ck.Path, 22); head != "age-encryption.org/v1\n" {
		t.Fatalf("the archive %s is not encrypted: it starts %q", ck.Path, head)
	}
	file := filepath.Join(t.TempDir(), name+".oci.tar")
	imageArgs := []string{"checkpoint", "image", ck.Path, "--tag", ref, "--trust-policy", nodeA.PolicyFile, "--identity", nodeA.IdentityFile}

	// Without --encryption-key the encrypted archive is refused: its
	// image would hold its plain text.
	if _, _, err := runSplit(t, append(imageArgs, "--out-file", file)...); err == nil || !strings.Contains(err.Error(), "--encryption-key") {
		t.Fatalf("checkpoint image of an encrypted archive without --encryption-key: %v", err)
	}
	if _, err := os.Lstat(file); err == nil {
		t.Fatal("a refused checkpoint image left its file")
	}
	out, _, err = runSplit(t, append(imageArgs, "--out-file", file, "--encryption-key", "jwe:"+keyB.PublicFile,
		"--signing-key", nodeA.SigningKeyFile, "--node-name", "node-a", "-o", "json")...)
	if err != nil {
		t.Fatal(err)
	}
	var img checkpointImageOutput
	if err := json.Unmarshal([]byte(out), &img); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !img.Encrypted || img.SignedBy == "" || img.Layer == img.DiffID {
		t.Fatalf("checkpoint image: %s", out)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(`"rootfsImageName"`)) {
		t.Error("the image file holds config.dump in the clear")
	}
	out, _, err = runSplit(t, "checkpoint", "image", "verify", file, "--trust-policy", nodeA.PolicyFile, "-o", "json")
	if err != nil || !strings.Contains(out, `"node": "node-a"`) {
		t.Fatalf("checkpoint image verify: %v: %s", err, out)
	}

	// A changed byte, or a policy that trusts another node, and verify
	// refuses the image (podman's restore from it is in runtimes/podman,
	// with podman 5: podman 4.3's pull has no --decryption-key).
	bad := bytes.Clone(raw)
	bad[len(bad)/2] ^= 1
	badFile := filepath.Join(t.TempDir(), "changed.oci.tar")
	if err := os.WriteFile(badFile, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	other := sealtest.NodeKeys(t, keys, "node-c")
	for _, refused := range []struct{ file, policy, says string }{
		{badFile, nodeA.PolicyFile, "has digest"},
		{file, other.PolicyFile, "unknown key"},
	} {
		_, _, err := runSplit(t, "checkpoint", "image", "verify", refused.file, "--trust-policy", refused.policy)
		if err == nil || !strings.Contains(err.Error(), refused.says) {
			t.Errorf("checkpoint image verify %s with %s: %v; want a refusal saying %q", filepath.Base(refused.file), filepath.Base(refused.policy), err, refused.says)
		}
	}
}

// readHead returns the first n bytes of path.
func readHead(t *testing.T, path string, n int) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	m, _ := f.Read(b)
	return string(b[:m])
}
