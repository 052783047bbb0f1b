package daemon

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/fakecri"
	"github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

// BenchmarkCheckpoint compares a checkpoint through the node API (HTTP over
// the unix socket, CRI resolution over gRPC, the status model and metrics
// around criu.Checkpoint) with criu.Checkpoint called directly on the same
// live 64 MiB process, side by side. frozen-ms is CRIU's frozen_time.
func BenchmarkCheckpoint(b *testing.B) {
	requireCriu(b)
	pid, _ := testworkload.Start(b, "count", 64)
	endpoint := "unix://" + fakecri.Serve(b, &criServer{containers: map[string]int{"default/bench-0/app": pid}})
	ckDir := filepath.Join(b.TempDir(), "archives")
	d := startDaemon(b, checkpointConfig(endpoint, ckDir, ""))
	bin, err := criu.Find("", nil)
	if err != nil {
		b.Fatal(err)
	}
	clean := func() {
		ents, _ := os.ReadDir(ckDir)
		for _, e := range ents {
			os.Remove(filepath.Join(ckDir, e.Name()))
		}
	}
	b.Run("api", func(b *testing.B) {
		b.ReportAllocs()
		var frozen time.Duration
		for i := 0; i < b.N; i++ {
			resp, err := d.c.Post("http://nodeshim/checkpoint/default/bench-0/app", "", nil)
			if err != nil {
				b.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("%d %s", resp.StatusCode, body)
			}
			b.StopTimer()
			var doc status.Document
			r, err := d.c.Get("http://nodeshim/status")
			if err != nil {
				b.Fatal(err)
			}
			if err := json.NewDecoder(r.Body).Decode(&doc); err != nil {
				b.Fatal(err)
			}
			r.Body.Close()
			frozen += time.Duration(doc.Checkpoints[len(doc.Checkpoints)-1].FrozenSeconds * float64(time.Second))
			clean()
			b.StartTimer()
		}
		b.ReportMetric(float64(frozen.Milliseconds())/float64(b.N), "frozen-ms")
	})
	b.Run("criu.Checkpoint", func(b *testing.B) {
		b.ReportAllocs()
		var frozen time.Duration
		for i := 0; i < b.N; i++ {
			tg, err := criu.PIDTarget("/proc", pid, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			tg.Ref = criu.ContainerRef{Namespace: "default", Pod: "bench-0", Container: "app"}
			res, err := criu.Checkpoint(context.Background(), tg, criu.Options{Binary: bin, ArchiveDir: ckDir})
			if err != nil {
				b.Fatal(err)
			}
			frozen += res.Frozen
			b.StopTimer()
			clean()
			b.StartTimer()
		}
		b.ReportMetric(float64(frozen.Milliseconds())/float64(b.N), "frozen-ms")
	})
}

// BenchmarkStatus measures GET /status over the unix socket from a real
// daemon (pressure, OOM watcher, network, plugins, config), against the
// baseline of encoding the same document without HTTP.
func BenchmarkStatus(b *testing.B) {
	testutil.RequireRoot(b)
	d := startDaemon(b, "")
	doc := d.statusB(b)
	for doc.Pressure == nil {
		time.Sleep(10 * time.Millisecond)
		doc = d.statusB(b)
	}
	b.Run("GET /status", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			resp, err := d.c.Get("http://nodeshim/status")
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	b.Run("snapshot+encode", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			enc := json.NewEncoder(io.Discard)
			enc.SetIndent("", "  ")
			if err := enc.Encode(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func (d *daemonRun) statusB(b *testing.B) status.Document {
	resp, err := d.c.Get("http://nodeshim/status")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var doc status.Document
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		b.Fatal(err)
	}
	return doc
}
