package podman_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/criu/archive/seal/sealtest"
	"github.com/nodeshim/nodeshim/criu/image"
	"github.com/nodeshim/nodeshim/runtimes/podman"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
)

// TestPodman5RestoresEncryptedCheckpointImage is the proof of encrypted
// checkpoint images by their consumer. Podman 5 (4.3 has no pull
// --decryption-key) runs a counter; nodeshim checkpoints it into an
// archive encrypted to node A and signed by it, verifies and decrypts
// that archive in memory, and writes a checkpoint image whose layer is
// encrypted to node B's RSA key (OCI image layer encryption) and whose
// manifest A signs. The image verifies against A's trust policy; podman
// refuses to pull it with no key and with another key; with B's private
// key it pulls, and `podman container restore IMAGE` brings the counter
// back where it was.
func TestPodman5RestoresEncryptedCheckpointImage(t *testing.T) {
	bin := criutest.RequireOnPath(t) // before podman's environment is taken: restore runs criu from PATH
	p := newPodman5(t, "")
	img := rt.Images(t)
	out := p.mustRun(t, "load", "-i", img.Busybox)
	if p.cmd("image", "exists", runtimetest.BusyboxImage).Run() != nil {
		loaded := strings.TrimSpace(out[strings.LastIndex(out, ":")+1:])
		p.mustRun(t, "tag", loaded, runtimetest.BusyboxImage)
	}
	const name, ref = "ns-p5-encimage", "localhost/ns-p5-encimage:checkpoint"
	p.mustRun(t, "run", "--detach", "--name", name, "--network", "none", "--cgroup-parent", p.cgroupParent,
		runtimetest.BusyboxImage, "sh", "-c", counter[2])
	before := p.count(t, name, 20)
	t.Setenv("CONTAINERS_CONF", filepath.Join(p.dir, "containers.conf"))
	target, err := podman.Target("/proc", p.root, name, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	keys := t.TempDir()
	nodeA := sealtest.NodeKeys(t, keys, "node-a")
	keyB := sealtest.NewJWEKey(t, keys, "node-b", false)
	wrong := sealtest.NewJWEKey(t, keys, "wrong", true)
	recipients, err := seal.ParseRecipients([]string{nodeA.Recipient})
	if err != nil {
		t.Fatal(err)
	}
	signing, err := seal.LoadSigningKey(nodeA.SigningKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	signer := &seal.Signer{Key: signing, Node: "node-a"}
	res, err := criu.Checkpoint(context.Background(), target, criu.Options{Binary: bin, ArchiveDir: t.TempDir(),
		Seal: seal.WriteOptions{Recipients: recipients, Signer: signer}})
	if err != nil {
		t.Fatal(err)
	}
	p.mustRun(t, "rm", "--force", "--time", "0", name)

	// Node A: the sealed archive, verified and decrypted in memory, into
	// an image for node B.
	policy, err := seal.LoadPolicy(nodeA.PolicyFile)
	if err != nil {
		t.Fatal(err)
	}
	identities, err := seal.LoadIdentities([]string{nodeA.IdentityFile})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(res.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sealed, err := seal.Open(f, res.Path, seal.OpenOptions{Policy: policy, Identities: identities})
	if err != nil || !sealed.Encrypted {
		t.Fatalf("seal.Open: %+v, %v", sealed, err)
	}
	plain, err := sealed.Reader()
	if err != nil {
		t.Fatal(err)
	}
	rb, err := image.ParseRecipient(image.JWEScheme + keyB.PublicFile)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "encrypted.oci.tar")
	out2, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	written, err := image.WriteWith(plain, ref, out2, image.Options{Recipients: []image.Recipient{rb}, Signer: signer})
	if cerr := out2.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	tImage := time.Since(start)
	vf, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := image.Verify(bufio.NewReader(vf), file, policy)
	vf.Close()
	if err != nil || sig.Node != "node-a" {
		t.Fatalf("image.Verify: %+v, %v", sig, err)
	}

	// Node B's podman: refused without the key and with another one.
	for _, refused := range []struct {
		why, says string
		args      []string
	}{
		{"no key", "does not match config's DiffID " + `"` + written.DiffID.String(), nil},
		{"another key", "decrypting layer " + written.Layer.String(), []string{"--decryption-key", wrong.PrivateFile}},
	} {
		args := append(append([]string{"pull"}, refused.args...), "oci-archive:"+file)
		msg, err := p.cmd(args...).CombinedOutput()
		if err == nil {
			t.Fatalf("podman pull with %s succeeded: %s", refused.why, msg)
		}
		t.Logf("podman pull with %s: %s", refused.why, bytes.TrimSpace(msg))
		// Without a key, podman stores the ciphertext as the layer and
		// finds that it is not the plain layer the config names.
		if !strings.Contains(string(msg), refused.says) {
			t.Errorf("podman pull with %s fails without saying %q: %s", refused.why, refused.says, msg)
		}
		if p.cmd("image", "exists", ref).Run() == nil {
			t.Fatalf("after a pull with %s, podman has %s", refused.why, ref)
		}
	}
	start = time.Now()
	p.mustRun(t, "pull", "--decryption-key", keyB.PrivateFile, "oci-archive:"+file)
	tPull := time.Since(start)
	if err := p.cmd("image", "exists", ref).Run(); err != nil {
		t.Fatalf("no %s after the pull: %v (%s)", ref, err, p.mustRun(t, "images"))
	}
	start = time.Now()
	p.mustRun(t, "container", "restore", ref)
	tRestore := time.Since(start)
	restored := p.count(t, name, 0)
	if restored < before {
		t.Fatalf("restored container counts %d, below %d seen before the checkpoint: it was not restored", restored, before)
	}
	p.count(t, name, restored)
	t.Logf("podman 5: count %d at the checkpoint, %d restored from the encrypted image; image %s (%d bytes), pull %s, restore %s",
		before, restored, tImage.Round(time.Millisecond), written.Size, tPull.Round(time.Millisecond), tRestore.Round(time.Millisecond))
}
