package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/criu/archive/seal/sealtest"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// cliKeys writes a node's age identity (into dir/ids, a directory of
// identities as --identity takes), signing key and a trust policy of that
// key into dir and returns the recipient and the three paths.
func cliKeys(t *testing.T, dir, node string) (recipient, identity, signingKey, policy string) {
	t.Helper()
	k := sealtest.NodeKeys(t, dir, node)
	identity = filepath.Join(dir, "ids", node+".age")
	if err := os.MkdirAll(filepath.Dir(identity), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(k.IdentityFile, identity); err != nil {
		t.Fatal(err)
	}
	return k.Recipient, identity, k.SigningKeyFile, k.PolicyFile
}

// TestSealedCheckpointRestoreCLI: checkpoint --recipient --signing-key
// writes an age file and its signature; restore refuses it without the
// identity or under a policy that does not trust the key, and restores it
// with both; checkpoint image refuses to write its plain text.
func TestSealedCheckpointRestoreCLI(t *testing.T) {
	testutil.RequireRoot(t)
	criutest.Require(t)
	dir, keys := t.TempDir(), t.TempDir()
	recipient, identity, signingKey, policy := cliKeys(t, keys, "node-a")
	_, otherIdentity, _, otherPolicy := cliKeys(t, keys, "node-b")
	pid := startSleep(t)

	out, _, err := runSplit(t, "checkpoint", "--pid", strconv.Itoa(pid), "--root-dir", dir, "--timeout", "1m", "-o", "json",
		"--recipient", recipient, "--signing-key", signingKey, "--node-name", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	var res checkpointOutput
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	b, err := os.ReadFile(res.Path)
	if err != nil || !bytes.HasPrefix(b, []byte("age-encryption.org/v1\n")) || int64(len(b)) != res.SizeBytes {
		t.Fatalf("archive %s is not an age file of %d bytes: %v", res.Path, res.SizeBytes, err)
	}
	if _, err := os.Stat(res.Path + seal.SignatureSuffix); err != nil {
		t.Fatalf("no signature file: %v", err)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no identity", []string{"restore", "--root-dir", dir, res.Path}, "no age identity is configured"},
		{"another node's identity", []string{"restore", "--root-dir", dir, "--identity", otherIdentity, res.Path}, "none of the 1 configured age identities"},
		{"untrusted key", []string{"restore", "--root-dir", dir, "--identity", identity, "--trust-policy", otherPolicy, res.Path}, "unknown key"},
		{"bad policy file", []string{"restore", "--root-dir", dir, "--trust-policy", identity, res.Path}, "--trust-policy"},
		{"image of an encrypted archive", []string{"checkpoint", "image", "--tag", "localhost/x:1", "--out-file", filepath.Join(dir, "img.tar"), "--trust-policy", policy, res.Path}, "is encrypted"},
		{"image under a policy that does not trust it", []string{"checkpoint", "image", "--tag", "localhost/x:1", "--out-file", filepath.Join(dir, "img.tar"), "--trust-policy", otherPolicy, res.Path}, "unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := runSplit(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "img.tar")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused checkpoint image left %s: %v", filepath.Join(dir, "img.tar"), err)
	}

	stop(t, pid)
	out, _, err = runSplit(t, "restore", "--root-dir", dir, "--identity", filepath.Join(keys, "ids"), "--trust-policy", policy, res.Path)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := strconv.Atoi(strings.TrimSpace(out)); err != nil || got != pid {
		t.Fatalf("restore printed %q, want the original pid %d", out, pid)
	}
}

func TestSealFlagsUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad recipient", []string{"checkpoint", "--pid", "1", "--recipient", "age1nope"}, "--recipient"},
		{"relative recipients file", []string{"checkpoint", "--pid", "1", "--recipient", "recipients.txt"}, "--recipient"},
		{"missing signing key", []string{"checkpoint", "--pid", "1", "--signing-key", "/nonexistent/node.key"}, "--signing-key"},
		{"encrypted image", []string{"checkpoint", "--pid", "1", "--recipient", "age1nope", "--image", "localhost/x:1", "--image-file", "/nonexistent/x.tar"}, "checkpoint image ARCHIVE --encryption-key jwe:PUBLIC.pem"},
		{"sealing a pod's container", []string{"checkpoint", "--namespace", "ns", "--pod", "p", "--container", "c", "--signing-key", "/k"}, "checkpoint.signing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runSplit(t, tc.args...)
			var ee *exitError
			if err == nil || !errors.As(err, &ee) || ee.code != exitUsage || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want a usage error naming %q", err, tc.want)
			}
		})
	}
}
