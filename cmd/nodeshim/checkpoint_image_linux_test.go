package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/downtime"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// node is a podman storage root (testenv/downtime's Root): the rt
// podman's, or a second one on the same machine that shares nothing with
// it but the files it is given.
type node downtime.Root

func (n node) run(t testing.TB, args ...string) string {
	t.Helper()
	return downtime.Root(n).Run(t, args...)
}

// waitCount waits until name has counted past min, and returns the count.
func (n node) waitCount(t testing.TB, name string, min int) int {
	t.Helper()
	return downtime.Root(n).WaitCount(t, name, min)
}

// waitAnswers waits until name's /count can be read, and returns it: on a
// loaded machine a container restored by podman may not answer podman exec
// the instant podman container restore returns.
func (n node) waitAnswers(t testing.TB, name string) int {
	t.Helper()
	var c int
	testutil.Eventually(t, fmt.Sprintf("container %s answers", name), func() error {
		var ok bool
		if c, ok = downtime.Root(n).Count(name); !ok {
			return errors.New("its /count cannot be read")
		}
		return nil
	})
	return c
}

// secondNode makes a second podman storage root beside p's, with the base
// image loaded from p, and cleans it up after t.
func secondNode(t testing.TB, p *runtimetest.Podman) node {
	t.Helper()
	return node(downtime.SecondRoot(t, p))
}

// moveByImage runs a counting container name on a, has makeImage
// checkpoint it into the checkpoint image file ref, removes it from a,
// loads file on b and restores ref there, and checks that the counter
// continues on b. It returns the image file.
func moveByImage(t *testing.T, a, b node, name, ref string, makeImage func(file string) (checkpointOutput, checkpointImageOutput)) string {
	t.Helper()
	if res := a.P.Run(t, runtimetest.RunOptions{Name: name, Detach: true, Runtime: runtimetest.RuntimeRunc, Command: []string{
		"sh", "-c", "i=0; while true; do i=$((i+1)); echo $i > /count; sleep 0.05; done"}}); res.ExitCode != 0 {
		t.Fatalf("podman run: exit %d: %s", res.ExitCode, res.Stderr)
	}
	before := a.waitCount(t, name, 20)

	file := filepath.Join(t.TempDir(), name+".oci.tar")
	start := time.Now()
	ck, img := makeImage(file)
	tImage := time.Since(start)
	// The move: A's container goes, only the file crosses to B.
	a.run(t, "rm", "--force", "--time", "0", name)

	start = time.Now()
	b.run(t, "load", "-i", file)
	tLoad := time.Since(start)
	start = time.Now()
	restoreOut := b.run(t, "--runtime", a.P.RuntimePath(runtimetest.RuntimeRunc), "container", "restore", ref)
	tRestore := time.Since(start)
	t.Logf("podman container restore on node B: %s", restoreOut)
	restored := b.waitAnswers(t, name)
	if restored < before {
		t.Fatalf("node B's container counts %d, below the %d seen before the checkpoint: it was not restored", restored, before)
	}
	next := b.waitCount(t, name, restored)
	t.Logf("count %d on A before the checkpoint, %d on B at restore, %d on B after", before, restored, next)
	t.Logf("timings: checkpoint and image %s (frozen %.3fs, archive %d bytes, manifest %s), podman load %s, podman restore %s",
		tImage.Round(time.Millisecond), ck.FrozenSeconds, ck.SizeBytes, img.Manifest, tLoad.Round(time.Millisecond), tRestore.Round(time.Millisecond))
	return file
}

// TestCheckpointImageMovesAPodmanContainer is the proof of nodeshim's
// checkpoint images: a podman container checkpointed by nodeshim, made
// into an image by nodeshim, loaded into a second podman storage root (a
// second node) and restored there from the image by `podman container
// restore IMAGE` counts on from where it was, not from 1.
func TestCheckpointImageMovesAPodmanContainer(t *testing.T) {
	p := rt.Podman(t)
	criutest.RequireOnPath(t)
	a := node{P: p}
	b := secondNode(t, p)
	const ref = "localhost/nodeshim-move:checkpoint"
	file := moveByImage(t, a, b, "nodeshim-move", ref, func(file string) (checkpointOutput, checkpointImageOutput) {
		// On node A: nodeshim checkpoints, then makes the image.
		out, _, err := runSplit(t, "checkpoint", "--container-id", "nodeshim-move", "--podman-root", p.Root, "--root-dir", t.TempDir(), "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var ck checkpointOutput
		if err := json.Unmarshal([]byte(out), &ck); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		out, _, err = runSplit(t, "checkpoint", "image", ck.Path, "--tag", ref, "--out-file", file, "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var img checkpointImageOutput
		if err := json.Unmarshal([]byte(out), &img); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return ck, img
	})

	// containerd takes the same file, under the name in its index.
	c := rt.Containerd(t)
	if out, err := c.Ctr("images", "import", file).CombinedOutput(); err != nil {
		t.Fatalf("ctr images import %s: %v: %s", file, err, out)
	}
	t.Cleanup(func() { _ = c.Ctr("images", "rm", ref).Run() })
	ls, err := c.Ctr("images", "ls", "-q").CombinedOutput()
	if err != nil || !strings.Contains(string(ls), ref) {
		t.Errorf("ctr images ls after the import: %v:\n%s", err, ls)
	}
}

// TestCheckpointToImageInOneStep: `nodeshim checkpoint --image REF
// --image-file FILE` checkpoints and writes the checkpoint image in one
// command, and podman restores the container from that image on a second
// node, counting on.
func TestCheckpointToImageInOneStep(t *testing.T) {
	p := rt.Podman(t)
	criutest.RequireOnPath(t)
	a := node{P: p}
	b := secondNode(t, p)
	const name, ref = "nodeshim-move-1", "localhost/nodeshim-move-1:checkpoint"
	moveByImage(t, a, b, name, ref, func(file string) (checkpointOutput, checkpointImageOutput) {
		out, _, err := runSplit(t, "checkpoint", "--container-id", name, "--podman-root", p.Root, "--root-dir", t.TempDir(),
			"--image", ref, "--image-file", file, "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var ck checkpointOutput
		if err := json.Unmarshal([]byte(out), &ck); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if ck.Image == nil || ck.Image.Ref != ref || ck.Image.Output != file {
			t.Fatalf("checkpoint --image %s --image-file %s: image %+v in %s", ref, file, ck.Image, out)
		}
		if _, err := os.Stat(ck.Path); err != nil {
			t.Errorf("the archive is not kept beside the image: %v", err)
		}
		return ck, *ck.Image
	})
}
