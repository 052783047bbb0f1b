package criu

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"filippo.io/age"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

// BenchmarkSeal measures the cost of encryption and signatures on a
// checkpoint and a restore of a process holding NODESHIM_SEAL_MIB MiB
// (default 1024) of touched, incompressible memory, three ways:
//
//   - plain: Checkpoint and Restore with no sealing (the archive built
//     around CRIU's pages image, nodeshim's default);
//   - signed: the same archive, hashed after it is built and signed;
//     Restore verifies the signature and the digest first;
//   - sealed: encrypted to one age recipient and signed; CRIU's images and
//     the restore's work directory on a tmpfs.
//
// After one untimed plain cycle (the first dump of a freshly started
// process was measured slower than later ones), each iteration runs one
// cycle of each way in turn, so that the three share whatever load the
// machine has: checkpoint the running counter, kill it, restore it from
// the archive and wait for it to count again. Only the checkpoint and the
// restore are timed, each after a sync(2). Per way it reports
// <way>-ckpt-ms, <way>-restore-ms and <way>-frozen-ms, and the ratios of
// the signed and the sealed totals to the plain one; ns/op is the three
// cycles together.
func BenchmarkSeal(b *testing.B) {
	bin := requireCriu(b)
	mib := 1024
	if s := os.Getenv("NODESHIM_SEAL_MIB"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("NODESHIM_SEAL_MIB=%q is not a positive number", s)
		}
		mib = n
	}
	k := newSealKeys(b)
	pid, dir := testworkload.Start(b, "count", mib)
	testworkload.WaitCount(b, dir, 2)
	ways := []struct {
		name string
		w    seal.WriteOptions
		o    seal.OpenOptions
	}{
		{"plain", seal.WriteOptions{}, seal.OpenOptions{}},
		{"signed", seal.WriteOptions{Signer: &k.signer}, seal.OpenOptions{Policy: k.policy}},
		{"sealed", seal.WriteOptions{Recipients: []age.Recipient{k.id.Recipient()}, Signer: &k.signer},
			seal.OpenOptions{Policy: k.policy, Identities: []age.Identity{k.id}}},
	}
	b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
		b.ReportAllocs()
		b.StopTimer()
		pid, _ = sealCycle(b, bin, pid, dir, seal.WriteOptions{}, seal.OpenOptions{})
		b.StartTimer()
		var ckpt, rst, frozen [3]time.Duration
		var size int64
		for b.Loop() {
			for i, w := range ways {
				var c cycleTimes
				pid, c = sealCycle(b, bin, pid, dir, w.w, w.o)
				ckpt[i] += c.ckpt
				rst[i] += c.restore
				frozen[i] += c.frozen
				size = c.size
			}
		}
		for i, w := range ways {
			b.ReportMetric(float64(ckpt[i].Milliseconds())/float64(b.N), w.name+"-ckpt-ms")
			b.ReportMetric(float64(rst[i].Milliseconds())/float64(b.N), w.name+"-restore-ms")
			b.ReportMetric(float64(frozen[i].Milliseconds())/float64(b.N), w.name+"-frozen-ms")
			if i > 0 {
				b.ReportMetric(float64(ckpt[i]+rst[i])/float64(ckpt[0]+rst[0]), w.name+"/plain")
			}
		}
		b.ReportMetric(float64(size)/(1<<20), "archive-MiB")
	})
}

// cycleTimes are the timed parts of one sealCycle.
type cycleTimes struct {
	ckpt, restore, frozen time.Duration
	size                  int64
}

// sealCycle checkpoints pid as w says, kills it, restores it as o says and
// waits for it to count again; it returns the restored pid and the times
// of the checkpoint and the restore, with the timer running only for
// those two calls.
func sealCycle(b *testing.B, bin Binary, pid int, dir string, w seal.WriteOptions, o seal.OpenOptions) (int, cycleTimes) {
	b.StopTimer()
	defer b.StartTimer()
	var c cycleTimes
	root := b.TempDir()
	tg, err := PIDTarget("/proc", pid, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	unix.Sync() // no run pays for the writeback of the one before
	b.StartTimer()
	start := time.Now()
	res, err := Checkpoint(context.Background(), tg, Options{Binary: bin, RootDir: root, Seal: w})
	c.ckpt = time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	c.frozen, c.size = res.Frozen, res.Size
	testworkload.Kill(b, pid)
	n := len(testworkload.Counts(b, dir))
	unix.Sync()
	b.StartTimer()
	start = time.Now()
	rr, err := Restore(context.Background(), res.Path, RestoreOptions{Binary: bin, RootDir: root, Open: o})
	c.restore = time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	testworkload.WaitCount(b, dir, n+2)
	if err := os.Remove(res.Path); err != nil {
		b.Fatal(err)
	}
	if err := seal.RemoveSignature(res.Path); err != nil {
		b.Fatal(err)
	}
	return rr.Pid, c
}
