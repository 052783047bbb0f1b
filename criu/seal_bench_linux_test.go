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
// (default 1024) of touched, incompressible memory, side by side in one
// run:
//
//   - plain: Checkpoint and Restore with no sealing (the archive built
//     around CRIU's pages image, nodeshim's default);
//   - signed: the archive streamed through seal's writer and signed;
//     Restore verifies the signature and the digest first;
//   - sealed: encrypted to one age recipient and signed; CRIU's images and
//     the restore's work directory on a tmpfs.
//
// Each iteration checkpoints the running counter, kills it, restores it
// from the archive and waits for it to count again; only the checkpoint
// and the restore are timed, every one after a sync(2). It reports
// ckpt-ms (of which dump-ms is CRIU's and archive-ms the archive's,
// fsync-ms of it the fsync), restore-ms (of which unpack-ms verifies,
// decrypts, validates and unpacks), frozen-ms and archive-MiB beside
// ns/op (their sum).
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
	for _, v := range []struct {
		name string
		w    seal.WriteOptions
		o    seal.OpenOptions
	}{
		{"plain", seal.WriteOptions{}, seal.OpenOptions{}},
		{"signed", seal.WriteOptions{Signer: &k.signer}, seal.OpenOptions{Policy: k.policy}},
		{"sealed", seal.WriteOptions{Recipients: []age.Recipient{k.id.Recipient()}, Signer: &k.signer},
			seal.OpenOptions{Policy: k.policy, Identities: []age.Identity{k.id}}},
	} {
		b.Run(fmt.Sprintf("%dMiB/%s", mib, v.name), func(b *testing.B) {
			b.ReportAllocs()
			root := b.TempDir()
			var ckpt, rst, frozen, dump, archive, fsync, unpack time.Duration
			var size int64
			for b.Loop() {
				b.StopTimer()
				unix.Sync()
				b.StartTimer()
				start := time.Now()
				tg, err := PIDTarget("/proc", pid, time.Now())
				if err != nil {
					b.Fatal(err)
				}
				res, err := Checkpoint(context.Background(), tg, Options{Binary: bin, RootDir: root, Seal: v.w})
				if err != nil {
					b.Fatal(err)
				}
				ckpt += time.Since(start)
				frozen += res.Frozen
				dump, archive, fsync = dump+res.Dump, archive+res.Archive, fsync+res.Fsync
				size = res.Size
				b.StopTimer()
				testworkload.Kill(b, pid)
				unix.Sync()
				n := len(testworkload.Counts(b, dir))
				b.StartTimer()
				start = time.Now()
				rr, err := Restore(context.Background(), res.Path, RestoreOptions{Binary: bin, RootDir: root, Open: v.o})
				if err != nil {
					b.Fatal(err)
				}
				rst += time.Since(start)
				unpack += rr.Unpack
				b.StopTimer()
				pid = rr.Pid
				testworkload.WaitCount(b, dir, n+2)
				if err := os.Remove(res.Path); err != nil {
					b.Fatal(err)
				}
				if err := seal.RemoveSignature(res.Path); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(ckpt.Milliseconds())/float64(b.N), "ckpt-ms")
			b.ReportMetric(float64(rst.Milliseconds())/float64(b.N), "restore-ms")
			b.ReportMetric(float64(frozen.Milliseconds())/float64(b.N), "frozen-ms")
			b.ReportMetric(float64(dump.Milliseconds())/float64(b.N), "dump-ms")
			b.ReportMetric(float64(archive.Milliseconds())/float64(b.N), "archive-ms")
			b.ReportMetric(float64(fsync.Milliseconds())/float64(b.N), "fsync-ms")
			b.ReportMetric(float64(unpack.Milliseconds())/float64(b.N), "unpack-ms")
			b.ReportMetric(float64(size)/(1<<20), "archive-MiB")
		})
	}
}
