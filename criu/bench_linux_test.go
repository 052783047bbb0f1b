package criu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

// BenchmarkCheckpoint measures a checkpoint of a process with 64 MiB,
// 512 MiB and 2 GiB of touched memory three ways, side by side in one run:
//
//   - nodeshim: Checkpoint, the whole call (CRIU dump, archive built
//     around the pages image, fsynced and renamed into place);
//   - nodeshim-early-writeback: the same, starting the pages' writeback
//     every 100ms during the dump (Options.EarlyWriteback);
//   - nodeshim-copy: the same as nodeshim with Options.CopyArchive (the images copied
//     into a new archive with copy_file_range);
//   - criu-dump: a bare `criu dump --leave-running` to a directory;
//   - criu-dump+tar: the same followed by `tar -cf` of the directory.
//
// Each reports frozen-ms (CRIU's frozen_time) and archive-MiB beside ns/op.
// Both sides run the same criu with the same environment (no hardware
// breakpoints), and every run starts after a sync(2), so that no run pays
// for the writeback of the one before. nodeshim's time includes the fsync
// of the archive; the bare criu and tar runs do not fsync.
func BenchmarkCheckpoint(b *testing.B) {
	bin := requireCriu(b)
	for _, mib := range []int{64, 512, 2048} {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			pid, _ := testworkload.Start(b, "count", mib)
			tg, err := PIDTarget("/proc", pid, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			for _, v := range []struct {
				name        string
				copyArchive bool
				writeback   time.Duration
			}{
				{"nodeshim", false, 0},
				{"nodeshim-early-writeback", false, 100 * time.Millisecond},
				{"nodeshim-copy", true, 0},
			} {
				b.Run(v.name, func(b *testing.B) {
					b.ReportAllocs()
					root := b.TempDir()
					var frozen, dump, archive, fsync time.Duration
					var size int64
					for b.Loop() {
						b.StopTimer()
						unix.Sync() // every run starts with no dirty pages
						b.StartTimer()
						res, err := Checkpoint(context.Background(), tg, Options{Binary: bin, RootDir: root, CopyArchive: v.copyArchive, EarlyWriteback: v.writeback})
						if err != nil {
							b.Fatal(err)
						}
						frozen += res.Frozen
						dump += res.Dump
						archive += res.Archive
						fsync += res.Fsync
						size = res.Size
						b.StopTimer()
						if err := os.Remove(res.Path); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
					b.ReportMetric(float64(frozen.Milliseconds())/float64(b.N), "frozen-ms")
					b.ReportMetric(float64(dump.Milliseconds())/float64(b.N), "dump-ms")
					b.ReportMetric(float64(archive.Milliseconds())/float64(b.N), "archive-ms")
					b.ReportMetric(float64(fsync.Milliseconds())/float64(b.N), "fsync-ms")
					b.ReportMetric(float64(size)/(1<<20), "archive-MiB")
				})
			}
			for _, withTar := range []bool{false, true} {
				name := "criu-dump"
				if withTar {
					name = "criu-dump+tar"
				}
				b.Run(name, func(b *testing.B) {
					b.ReportAllocs()
					var frozen time.Duration
					var size int64
					for b.Loop() {
						b.StopTimer()
						unix.Sync()
						dir := b.TempDir()
						images := filepath.Join(dir, "images")
						if err := os.Mkdir(images, 0o700); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
						cmd := exec.Command(bin.Path, "dump", "-t", fmt.Sprint(pid), "-D", images, "--leave-running", "-v4", "-o", "dump.log")
						cmd.Env = append(os.Environ(), noBreakpointsEnv)
						if out, err := cmd.CombinedOutput(); err != nil {
							b.Fatalf("criu dump: %v: %s; %s", err, out, logErrors(filepath.Join(images, "dump.log")))
						}
						if withTar {
							tarPath := filepath.Join(dir, "out.tar")
							if out, err := exec.Command("tar", "-cf", tarPath, "-C", images, ".").CombinedOutput(); err != nil {
								b.Fatalf("tar: %v: %s", err, out)
							}
							b.StopTimer()
							if fi, err := os.Stat(tarPath); err == nil {
								size = fi.Size()
							}
							b.StartTimer()
						}
						b.StopTimer()
						if st, err := ReadDumpStats(filepath.Join(images, StatsDump)); err == nil {
							frozen += time.Duration(st.GetFrozenTime()) * time.Microsecond
						} else {
							b.Fatal(err)
						}
						if !withTar {
							size = dirSize(images)
						}
						if err := os.RemoveAll(dir); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
					b.ReportMetric(float64(frozen.Milliseconds())/float64(b.N), "frozen-ms")
					b.ReportMetric(float64(size)/(1<<20), "archive-MiB")
				})
			}
		})
	}
}
