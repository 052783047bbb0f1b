package vmtest

import (
	"errors"
	"strings"
	"testing"
)

func feed(lines ...string) *Console {
	var c Console
	for _, l := range lines {
		c.Line(l)
	}
	return &c
}

func TestConsoleEvaluate(t *testing.T) {
	ok := []string{
		"SeaBIOS (version 1.16.2-debian-1.16.2-1)\r",
		"NODESHIM-VMTEST: report 0\r",
		"NODESHIM-VMTEST: begin pkg_a\r",
		"--- PASS: TestA (0.01s)\r",
		"NODESHIM-VMTEST: end pkg_a 0\r",
		"NODESHIM-VMTEST: begin pkg_b\r",
		"NODESHIM-VMTEST: end pkg_b 0\r",
		"NODESHIM-VMTEST: done\r",
		"[    2.784500] reboot: Power down\r",
	}
	cases := []struct {
		name       string
		lines      []string
		hung       bool
		qemuErr    error
		wantErr    []error // every one must be wrapped; none means success
		wantStatus int
		wantText   []string
	}{
		{name: "all passed", lines: ok},
		{
			name:  "report found a problem",
			lines: replace(ok, "NODESHIM-VMTEST: report 0\r", "NODESHIM-VMTEST: report 3"),
		},
		{
			name:  "report absent",
			lines: replace(ok, "NODESHIM-VMTEST: report 0\r", "NODESHIM-VMTEST: report absent"),
		},
		{
			name:       "test binary failed with its status",
			lines:      replace(ok, "NODESHIM-VMTEST: end pkg_b 0\r", "NODESHIM-VMTEST: end pkg_b 2\r"),
			wantErr:    []error{ErrTestsFailed},
			wantStatus: 2,
			wantText:   []string{"pkg_b exited with status 2"},
		},
		{
			name:       "report failed",
			lines:      replace(ok, "NODESHIM-VMTEST: report 0\r", "NODESHIM-VMTEST: report 1"),
			wantErr:    []error{ErrTestsFailed},
			wantStatus: 1,
			wantText:   []string{"nodeshim report exited with status 1"},
		},
		{
			name: "marker after kernel text on the same line",
			lines: replace(ok, "NODESHIM-VMTEST: end pkg_b 0\r",
				"[   12.5] oom-kill:constraint=CONSTRAINT_MEMCG NODESHIM-VMTEST: end pkg_b 0"),
		},
		{
			name: "guest panicked",
			lines: []string{
				"NODESHIM-VMTEST: begin pkg_a",
				"[    3.1] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100",
				"[    3.2] ---[ end Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100 ]---",
			},
			wantErr:    []error{ErrGuestPanic},
			wantStatus: 1,
			wantText:   []string{"guest kernel panicked: Kernel panic - not syncing: Attempted to kill init!"},
		},
		{
			name:       "guest hung",
			lines:      ok[:4],
			hung:       true,
			wantErr:    []error{ErrGuestHung},
			wantStatus: 1,
			wantText:   []string{"last test binary started: pkg_a"},
		},
		{
			name:       "test binary missing",
			lines:      replace(replace(ok, "NODESHIM-VMTEST: begin pkg_b\r", "NODESHIM-VMTEST: missing pkg_b"), "NODESHIM-VMTEST: end pkg_b 0\r", ""),
			wantErr:    []error{ErrMissingBinary},
			wantStatus: 1,
			wantText:   []string{"test binary missing in the guest: pkg_b"},
		},
		{
			name:       "no result for an expected binary",
			lines:      replace(replace(ok, "NODESHIM-VMTEST: begin pkg_b\r", ""), "NODESHIM-VMTEST: end pkg_b 0\r", ""),
			wantErr:    []error{ErrGuestIncomplete},
			wantStatus: 1,
			wantText:   []string{"no result for pkg_b"},
		},
		{
			name:       "guest stopped before done",
			lines:      ok[:7],
			qemuErr:    errors.New("exit status 1"),
			wantErr:    []error{ErrGuestIncomplete},
			wantStatus: 1,
			wantText:   []string{"no NODESHIM-VMTEST: done line (qemu: exit status 1)"},
		},
		{
			name:       "setup failed",
			lines:      append([]string{"NODESHIM-VMTEST: setup-failed cgroup2"}, ok...),
			wantErr:    []error{ErrGuestSetup},
			wantStatus: 1,
			wantText:   []string{"guest setup failed: cgroup2"},
		},
		{
			name:       "unparsed marker",
			lines:      append([]string{"NODESHIM-VMTEST: end pkg_a minus-one"}, ok...),
			wantErr:    []error{ErrGuestSetup},
			wantStatus: 1,
			wantText:   []string{`unparsed console marker "NODESHIM-VMTEST: end pkg_a minus-one"`},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := feed(tc.lines...).Evaluate([]string{"pkg_a", "pkg_b"}, tc.hung, tc.qemuErr)
			if out.ExitStatus != tc.wantStatus {
				t.Errorf("exit status %d, want %d (err %v)", out.ExitStatus, tc.wantStatus, out.Err)
			}
			if len(tc.wantErr) == 0 && out.Err != nil {
				t.Fatalf("unexpected error: %v", out.Err)
			}
			if len(tc.wantErr) > 0 && out.Err == nil {
				t.Fatalf("no error, want %v", tc.wantErr)
			}
			for _, want := range tc.wantErr {
				if !errors.Is(out.Err, want) {
					t.Errorf("error %q does not wrap %q", out.Err, want)
				}
			}
			for _, want := range tc.wantText {
				if !strings.Contains(out.Err.Error(), want) {
					t.Errorf("error %q lacks %q", out.Err, want)
				}
			}
		})
	}
}

func TestConsoleRecords(t *testing.T) {
	c := feed("x NODESHIM-VMTEST: begin a", "NODESHIM-VMTEST: end a 0", "NODESHIM-VMTEST: report 3", "NODESHIM-VMTEST: done")
	if len(c.Begun) != 1 || c.Begun[0] != "a" || c.Exit["a"] != 0 || !c.Done {
		t.Fatalf("console state %+v", c)
	}
	if code, ok := c.ReportStatus(); !ok || code != 3 {
		t.Fatalf("ReportStatus() = %d, %v, want 3, true", code, ok)
	}
	if _, ok := feed("NODESHIM-VMTEST: report absent").ReportStatus(); ok {
		t.Fatal("an absent report has a status")
	}
}

func replace(lines []string, old, new string) []string {
	out := make([]string, 0, len(lines))
	found := false
	for _, l := range lines {
		if l == old {
			found = true
			if new == "" {
				continue
			}
			l = new
		}
		out = append(out, l)
	}
	if !found {
		panic("replace: no line " + old)
	}
	return out
}

// FuzzConsole feeds arbitrary console text: the verdict must never panic and
// must be a failure exactly when it has a non-zero exit status.
func FuzzConsole(f *testing.F) {
	f.Add("NODESHIM-VMTEST: begin a\nNODESHIM-VMTEST: end a 0\nNODESHIM-VMTEST: done\n", false)
	f.Add("NODESHIM-VMTEST: end a -1\nKernel panic - not syncing: x\n", false)
	f.Add("NODESHIM-VMTEST: report 99999999999999999999\nNODESHIM-VMTEST: missing a\n", true)
	f.Add("\x1b[2JNODESHIM-VMTEST:\tsetup-failed  a b\r\n", false)
	f.Fuzz(func(t *testing.T, text string, hung bool) {
		var c Console
		for _, l := range strings.Split(text, "\n") {
			c.Line(l)
		}
		out := c.Evaluate([]string{"a"}, hung, nil)
		if (out.Err == nil) != (out.ExitStatus == 0) {
			t.Fatalf("error %v with exit status %d", out.Err, out.ExitStatus)
		}
		if out.Err == nil && (c.Exit["a"] != 0 || !c.Done || c.Panic != "" || hung) {
			t.Fatalf("passed with console state %+v, hung %v", c, hung)
		}
	})
}
