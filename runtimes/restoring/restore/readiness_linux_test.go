package restore

import (
	"archive/tar"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/archive"
	"github.com/nodeshim/nodeshim/criu/archive/archivetest"
	"github.com/nodeshim/nodeshim/runtimes/restoring"
	"github.com/nodeshim/nodeshim/testenv/criutest"
)

func TestNeededFeatures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		names []string
		want  map[string]string
	}{
		{"none", []string{"checkpoint/core-1.img", "checkpoint/pstree.img", "config.dump"}, map[string]string{}},
		{"a time namespace", []string{"checkpoint/core-1.img", "checkpoint/timens-12.img", "checkpoint/timens-13.img"}, map[string]string{"timens": "checkpoint/timens-12.img"}},
		{"outside the images", []string{"timens-1.img", "rootfs-diff/checkpoint/timens-1.img", "checkpoint/sub/timens-1.img"}, map[string]string{}},
		{"not an image", []string{"checkpoint/timens-1.log"}, map[string]string{}},
		{"the root time namespace's clocks", []string{"checkpoint/core-1.img", "checkpoint/timens-0.img"}, map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var es []archive.Entry
			for _, n := range tc.names {
				es = append(es, archive.Entry{Name: n, Type: tar.TypeReg})
			}
			got := NeededFeatures(es)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("NeededFeatures = %v; want %v", got, tc.want)
			}
		})
	}
}

// TestCheckReadiness: a node whose CRIU checks fail, or lack a feature
// the checkpoint's images need, is refused naming the image, the feature
// and CRIU's message; CRIU runs only for a checkpoint that needs a
// feature, and a readiness that cannot be had compares nothing.
func TestCheckReadiness(t *testing.T) {
	failed := func(msg string) error { return fmt.Errorf("criu check: %w: %s", criu.ErrCheckFailed, msg) }
	plain := []archive.Entry{{Name: "checkpoint/core-1.img"}}
	timens := append([]archive.Entry{{Name: "checkpoint/timens-1.img"}}, plain...)
	for _, tc := range []struct {
		name    string
		entries []archive.Entry
		rd      criu.Readiness
		rdErr   error
		wantRun bool
		want    string
	}{
		{name: "ready", entries: timens, rd: criu.Readiness{Features: map[string]error{"timens": nil}}, wantRun: true},
		{name: "check fails", entries: plain, rd: criu.Readiness{CheckErr: failed("Looks bad: no ptrace")}, want: "say it cannot restore: criu check: criu check failed: Looks bad: no ptrace"},
		{name: "a needed feature missing", entries: timens, rd: criu.Readiness{Features: map[string]error{"timens": failed("timens isn't supported")}}, wantRun: true,
			want: "checkpoint/timens-1.img needs CRIU feature timens, which CRIU's checks of this node (cached 2026-11-28T06:00:00Z) say this node lacks"},
		{name: "a feature missing that is not needed", entries: plain, rd: criu.Readiness{Features: map[string]error{"timens": failed("no")}}},
		{name: "not asked", entries: timens, rd: criu.Readiness{Features: map[string]error{}}, wantRun: true},
		{name: "no readiness", entries: timens, rdErr: criu.ErrNoCachedCheck, wantRun: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.Contains(tc.want, "cached") {
				tc.rd.CachedAt = time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
			}
			var ran []bool
			r := &Restore{Readiness: func(run bool) (criu.Readiness, error) {
				ran = append(ran, run)
				return tc.rd, tc.rdErr
			}}
			err := r.checkReadiness(tc.entries)
			if len(ran) != 1 || ran[0] != tc.wantRun {
				t.Errorf("Readiness called with %v; want [%v]", ran, tc.wantRun)
			}
			if tc.want == "" {
				if err != nil {
					t.Fatalf("checkReadiness = %v; want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("checkReadiness = %v; want ErrRefused naming %q", err, tc.want)
			}
		})
	}
}

// TestRunRefusesUnreadyNode: a checkpoint with a time namespace, on a
// node whose CRIU lacks timens, is refused by Run before anything is
// unpacked or the runtime runs.
func TestRunRefusesUnreadyNode(t *testing.T) {
	const img = "localhost/nodeshim/busybox:test"
	here := ArchOfGOARCH(runtime.GOARCH)
	base := t.TempDir()
	ckpt, work, bundle := filepath.Join(base, "ckpt"), filepath.Join(base, "work"), filepath.Join(base, "bundle")
	for _, d := range []string{ckpt, filepath.Join(bundle, "rootfs")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	b := Archive(t, "counter", img, here, "", archivetest.Member{Name: "checkpoint/timens-1.img", Type: tar.TypeReg, Body: "x"})
	if err := os.WriteFile(filepath.Join(ckpt, "x.tar"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	r := &Restore{
		Config:  restoring.Config{CheckpointDir: ckpt, WorkDir: work},
		Runtime: "/nonexistent/runc", Call: restoring.Call{Command: "create", Bundle: bundle, ID: "abc"},
		Spec: specFor("counter", img), Checkpoint: "x.tar", Arch: here,
		Readiness: func(bool) (criu.Readiness, error) {
			return criu.Readiness{Features: map[string]error{"timens": fmt.Errorf("criu check --feature timens: %w: timens isn't supported", criu.ErrCheckFailed)}}, nil
		},
	}
	_, err := r.Run()
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "x.tar: checkpoint refused: checkpoint/timens-1.img needs CRIU feature timens") {
		t.Fatalf("Run = %v; want the timens refusal", err)
	}
	for _, d := range []string{work, filepath.Join(bundle, "rootfs")} {
		if ents, _ := os.ReadDir(d); len(ents) > 0 {
			t.Errorf("%s keeps %s after the refusal", d, ents[0].Name())
		}
	}
}

// TestNodeReadiness runs this node's CRIU: without any cache and without
// run nothing is known; with run CRIU's checks run and are kept in the
// work directory for the next restore; serve's report cache, when it has
// this boot's answers for the same criu, is read first.
func TestNodeReadiness(t *testing.T) {
	bin := criutest.Require(t)
	base := t.TempDir()
	cfg := restoring.Config{Criu: bin.Path, WorkDir: filepath.Join(base, "work"), ReportCache: filepath.Join(base, "report-cache")}
	if _, err := NodeReadiness(cfg, false); !errors.Is(err, criu.ErrNoCachedCheck) {
		t.Fatalf("NodeReadiness(run=false) with no cache = %v; want ErrNoCachedCheck", err)
	}
	rd, err := NodeReadiness(cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	if rd.Binary.Path != bin.Path || rd.Version.Major == 0 || !rd.CachedAt.IsZero() {
		t.Fatalf("NodeReadiness(run=true) = %+v; want a fresh answer of %s", rd, bin.Path)
	}
	if _, known := rd.Feature("timens"); !known {
		t.Errorf("timens not asked: %v", rd.Features)
	}
	again, err := NodeReadiness(cfg, false)
	if err != nil {
		t.Fatalf("NodeReadiness(run=false) after a run = %v", err)
	}
	if again.CachedAt.IsZero() || fmt.Sprint(again.CheckErr) != fmt.Sprint(rd.CheckErr) || again.Version != rd.Version {
		t.Fatalf("cached %+v; ran %+v", again, rd)
	}
	if _, err := os.Stat(filepath.Join(cfg.WorkDir, ownCheckCache, criu.CheckCacheFile)); err != nil {
		t.Fatalf("the restore's own cache: %v", err)
	}
	// serve's report cache is read first: the same answers, from there.
	if err := os.Rename(filepath.Join(cfg.WorkDir, ownCheckCache), cfg.ReportCache); err != nil {
		t.Fatal(err)
	}
	fromReport, err := NodeReadiness(cfg, false)
	if err != nil || fromReport.CachedAt != again.CachedAt {
		t.Fatalf("NodeReadiness from the report cache = %+v, %v; want the record made at %s", fromReport, err, again.CachedAt)
	}
}

// TestRuntimeEnv: with criu configured, its directory comes first on the
// runtime's PATH, where runc finds it (runc 1.5 has no --criu flag); the
// rest of the environment is the shim's.
func TestRuntimeEnv(t *testing.T) {
	for _, tc := range []struct {
		name, criu string
		env, want  []string
	}{
		{"no criu", "", []string{"PATH=/usr/bin", "A=1"}, []string{"PATH=/usr/bin", "A=1"}},
		{"criu first on PATH", "/opt/criu/bin/criu", []string{"A=1", "PATH=/usr/sbin:/usr/bin"}, []string{"A=1", "PATH=/opt/criu/bin:/usr/sbin:/usr/bin"}},
		{"an empty PATH", "/opt/criu/bin/criu", []string{"PATH="}, []string{"PATH=/opt/criu/bin"}},
		{"no PATH", "/usr/sbin/criu", []string{"A=1"}, []string{"A=1", "PATH=/usr/sbin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Restore{Config: restoring.Config{Criu: tc.criu}}
			if got := r.runtimeEnv(tc.env); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("runtimeEnv(%q) = %q; want %q", tc.env, got, tc.want)
			}
			if g := r.globalArgs(); len(g) != 0 {
				t.Fatalf("globalArgs = %q; want none: runc 1.5 has no --criu", g)
			}
		})
	}
}
