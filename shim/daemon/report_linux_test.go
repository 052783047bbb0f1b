package daemon

import (
	"path/filepath"
	"testing"

	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/report"
)

// TestReportOptions: serve collects its report against the host under its
// own roots and keeps the per-boot records under <root-dir>/report-cache,
// where a restarted serve finds them; what the command sets is kept.
func TestReportOptions(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   Options
		want   report.Options
		wantOK bool
	}{
		{name: "no report", opts: Options{RootDir: "/var/lib/nodeshim", HostRoot: "/"}},
		{
			name:   "defaults from serve's roots",
			opts:   Options{RootDir: "/var/lib/nodeshim", HostRoot: "/host", ProcRoot: "/proc", Report: &report.Options{ProbeTimeout: 3}},
			want:   report.Options{Host: *kernel.HostUnder("/host", "/proc"), CacheDir: filepath.Join("/var/lib/nodeshim", "report-cache"), ProbeTimeout: 3},
			wantOK: true,
		},
		{
			name:   "the command's own host and cache",
			opts:   Options{RootDir: "/var/lib/nodeshim", HostRoot: "/", Report: &report.Options{Host: kernel.Host{ProcRoot: "/p", SysRoot: "/s"}, CacheDir: "/c"}},
			want:   report.Options{Host: kernel.Host{ProcRoot: "/p", SysRoot: "/s"}, CacheDir: "/c"},
			wantOK: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.opts.reportOptions()
			if ok != tc.wantOK || got.CacheDir != tc.want.CacheDir || got.ProbeTimeout != tc.want.ProbeTimeout ||
				got.Host.ProcRoot != tc.want.Host.ProcRoot || got.Host.SysRoot != tc.want.Host.SysRoot ||
				got.Host.BootRoot != tc.want.Host.BootRoot || got.Host.ModulesRoot != tc.want.Host.ModulesRoot {
				t.Errorf("reportOptions() = %+v, %v; want %+v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
