package vmtest

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

func TestMachineArgs(t *testing.T) {
	m := &Machine{QEMU: "qemu-system-x86_64", Kernel: "/k/vmlinuz", Initrd: "/i.cpio.gz", Label: "6.1", MemoryMB: 1024, ArtifactFile: "/a/serial1.tar"}
	args := strings.Join(m.Args(), " ")
	for _, want := range []string{
		"-nographic", "-no-reboot", "-machine accel=tcg", "-cpu max", "-m 1024M",
		"-kernel /k/vmlinuz", "-initrd /i.cpio.gz",
		"-append console=ttyS0 quiet panic=-1 psi=1 NODESHIM_GUEST=6.1",
		"-serial mon:stdio -serial file:/a/serial1.tar",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("QEMU arguments %q lack %q", args, want)
		}
	}
	if strings.Contains(args, "kvm") {
		t.Errorf("QEMU arguments %q ask for KVM", args)
	}
}

// fakeQEMU writes a shell script that plays a guest: body runs with $art set
// to the file behind the second serial port.
func fakeQEMU(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\nfor a in \"$@\"; do case $a in file:*) art=${a#file:};; esac; done\n" +
		"M=NODESHIM-VMTEST:\nwork=" + dir + "\n" + body + "\n"
	p := filepath.Join(dir, "qemu-system-x86_64")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// trip closes fire the first time something containing word is written to it.
type trip struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	word string
	fire chan time.Time
	once sync.Once
}

func (w *trip) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.word) {
		w.once.Do(func() { close(w.fire) })
	}
	return len(p), nil
}

const sendReport = `mkdir -p $work/a && printf '{"kernel":"6.1"}' > $work/a/report.json && tar -c -f "$art" -C $work/a .`

// TestBootVerdicts plays each way a guest can end through a fake QEMU and
// checks what the harness makes of it. The hung guest's timeout fires when
// the guest has started its test binary, not after a wall-clock delay.
func TestBootVerdicts(t *testing.T) {
	testutil.RequireBinary(t, "tar")
	cases := []struct {
		name       string
		guest      string
		hangAt     string // the timeout fires once the console shows this
		wantErr    error
		wantStatus int
		wantText   string
		wantReport bool
	}{
		{
			name:       "pass",
			guest:      "echo \"$M report 0\"; echo \"$M begin pkg\"; echo '--- PASS: TestX'; echo \"$M end pkg 0\"; " + sendReport + "; echo \"$M done\"",
			wantReport: true,
		},
		{
			name:       "test failure keeps its status",
			guest:      "echo \"$M report absent\"; echo \"$M begin pkg\"; echo \"$M end pkg 1\"; " + sendReport + "; echo \"$M done\"",
			wantErr:    ErrTestsFailed,
			wantStatus: 1,
			wantText:   "pkg exited with status 1",
		},
		{
			name:       "panic",
			guest:      "echo \"$M begin pkg\"; echo '[ 3.1] Kernel panic - not syncing: Attempted to kill init!'",
			wantErr:    ErrGuestPanic,
			wantStatus: 1,
			wantText:   "guest kernel panicked: Kernel panic - not syncing: Attempted to kill init!",
		},
		{
			name:       "missing test binary",
			guest:      "echo \"$M report absent\"; echo \"$M missing pkg\"; " + sendReport + "; echo \"$M done\"",
			wantErr:    ErrMissingBinary,
			wantStatus: 1,
			wantText:   "test binary missing in the guest: pkg",
		},
		{
			name:       "hang",
			guest:      "echo \"$M begin pkg\"; sleep 3600 & wait",
			hangAt:     "begin pkg",
			wantErr:    ErrGuestHung,
			wantStatus: 1,
			wantText:   "guest hung: QEMU killed after the timeout (last test binary started: pkg) (after 20m0s)",
		},
		{
			name:       "report is not JSON",
			guest:      "echo \"$M report 0\"; echo \"$M begin pkg\"; echo \"$M end pkg 0\"; mkdir $work/a; echo nope > $work/a/report.json; tar -c -f \"$art\" -C $work/a .; echo \"$M done\"",
			wantErr:    ErrTestsFailed,
			wantStatus: 1,
			wantText:   "report.json is not JSON",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			console := &trip{word: "\x00never", fire: make(chan time.Time)}
			if tc.hangAt != "" {
				console.word = tc.hangAt
			}
			cfg := Config{
				CacheDir: t.TempDir(), QEMU: fakeQEMU(t, tc.guest), MemoryMB: 1024, Timeout: 20 * time.Minute,
				Console: console,
				After:   func(time.Duration) <-chan time.Time { return console.fire },
			}
			k, _ := LookupKernel("6.1")
			r, err := boot(context.Background(), cfg, k, "linux-image-6.1.0-50-amd64", "/vmlinuz", "/initrd", []string{"pkg"}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if r.Outcome.ExitStatus != tc.wantStatus {
				t.Errorf("exit status %d, want %d (err %v)", r.Outcome.ExitStatus, tc.wantStatus, r.Outcome.Err)
			}
			switch {
			case tc.wantErr == nil && r.Outcome.Err != nil:
				t.Fatalf("unexpected error: %v", r.Outcome.Err)
			case tc.wantErr != nil && !errors.Is(r.Outcome.Err, tc.wantErr):
				t.Fatalf("error %v, want %v", r.Outcome.Err, tc.wantErr)
			case tc.wantErr != nil && !strings.Contains(r.Outcome.Err.Error(), tc.wantText):
				t.Fatalf("error %q lacks %q", r.Outcome.Err, tc.wantText)
			}
			log, err := os.ReadFile(filepath.Join(r.ArtifactDir, "console.log"))
			if err != nil || !strings.Contains(string(log), "NODESHIM-VMTEST:") {
				t.Fatalf("console.log %q, %v", log, err)
			}
			if !strings.Contains(console.buf.String(), "[6.1] NODESHIM-VMTEST:") {
				t.Errorf("console not streamed with its label: %q", console.buf.String())
			}
			report, err := os.ReadFile(filepath.Join(r.ArtifactDir, "report.json"))
			if tc.wantReport && (err != nil || string(report) != `{"kernel":"6.1"}`) {
				t.Errorf("report artifact %q, %v", report, err)
			}
		})
	}
}

// TestBootStartFailure checks that a QEMU that cannot start is an error, not a verdict.
func TestBootStartFailure(t *testing.T) {
	m := &Machine{QEMU: filepath.Join(t.TempDir(), "no-qemu"), Timeout: time.Minute}
	if _, _, err := m.Boot(context.Background(), func(string) {}); err == nil || !strings.Contains(err.Error(), "no-qemu") {
		t.Fatalf("Boot() error %v, want one naming the binary", err)
	}
}
