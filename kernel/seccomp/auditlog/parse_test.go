package auditlog

import (
	"errors"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	const kmsg = `5,1234,9856620521,-;audit: type=1326 audit(1795836419.010:232): auid=4294967295 uid=0 gid=0 ses=4294967295 pid=6430 comm="mkdir" exe="/usr/bin/mkdir" sig=0 arch=c000003e syscall=83 compat=0 ip=0x7fcea6fdaf37 code=0x7ffc0000`
	want := Record{Time: time.Unix(1795836419, 10e6).UTC(), Serial: 232, PID: 6430, Comm: "mkdir", Exe: "/usr/bin/mkdir",
		Arch: 0xc000003e, Syscall: 83, Code: RetLog}
	tests := []struct {
		name    string
		line    string
		want    Record
		wantErr error
	}{
		{name: "kmsg", line: kmsg, want: want},
		{name: "dmesg", line: `[ 9856.620521] audit: type=1326 audit(1795836419.010:232): auid=4294967295 uid=0 gid=0 ses=4294967295 pid=6430 comm="mkdir" exe="/usr/bin/mkdir" sig=0 arch=c000003e syscall=83 compat=0 ip=0x7fcea6fdaf37 code=0x7ffc0000`, want: want},
		{name: "audit.log", line: `type=SECCOMP msg=audit(1795836419.010:232): auid=4294967295 uid=0 gid=0 ses=4294967295 subj=unconfined pid=6430 comm="mkdir" exe="/usr/bin/mkdir" sig=0 arch=c000003e syscall=83 compat=0 ip=0x7fcea6fdaf37 code=0x7ffc0000`, want: want},
		{name: "hex comm, errno, uid", line: `audit: type=1326 audit(1.5:7): uid=1000 pid=42 comm=6D79206170 exe="/a b/c" arch=40000003 syscall=5 compat=1 code=0x50001`,
			want: Record{Time: time.Unix(1, 500e6).UTC(), Serial: 7, PID: 42, UID: 1000, Comm: "my ap", Exe: "/a b/c", Arch: 0x40000003, Syscall: 5, Compat: true, Code: 0x50001}},
		{name: "another audit type", line: `audit: type=1400 audit(1.5:7): apparmor="DENIED"`, wantErr: ErrNotSeccomp},
		{name: "not audit", line: `6,99,1,-;eth0: link up`, wantErr: ErrNotSeccomp},
		{name: "no pid", line: `audit: type=1326 audit(1.5:7): arch=c000003e syscall=83 code=0x7ffc0000`, wantErr: ErrMalformed},
		{name: "bad stamp", line: `audit: type=1326 audit(x:7): pid=1 arch=c000003e syscall=83 code=0x7ffc0000`, wantErr: ErrMalformed},
		{name: "bad code", line: `audit: type=1326 audit(1.5:7): pid=1 arch=c000003e syscall=83 code=0xzz`, wantErr: ErrMalformed},
		{name: "unterminated quote", line: `audit: type=1326 audit(1.5:7): pid=1 comm="x arch=c000003e syscall=83 code=0x7ffc0000`, wantErr: ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.line)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
	if r, _ := Parse(kmsg); r.Action() != RetLog {
		t.Errorf("action %#x, want LOG", r.Action())
	}
}

func FuzzParse(f *testing.F) {
	f.Add(`5,1234,9856620521,-;audit: type=1326 audit(1795836419.010:232): auid=4294967295 uid=0 gid=0 ses=4294967295 pid=6430 comm="mkdir" exe="/usr/bin/mkdir" sig=0 arch=c000003e syscall=83 compat=0 ip=0x7fcea6fdaf37 code=0x7ffc0000`)
	f.Add(`audit: type=1326 audit(1.5:7): pid=42 comm=6D79 arch=40000003 syscall=5 code=0x50001`)
	f.Add(`type=SECCOMP msg=audit(1.5:7): pid=1`)
	f.Fuzz(func(t *testing.T, line string) {
		r, err := Parse(line)
		if err != nil {
			if !errors.Is(err, ErrNotSeccomp) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if r.PID < 0 {
			t.Fatalf("negative pid %d", r.PID)
		}
	})
}

func TestSuppressed(t *testing.T) {
	for line, want := range map[string]uint64{
		"4,2,3,-;kauditd_printk_skb: 1238 callbacks suppressed":     1238,
		"[10900.690314] kauditd_printk_skb: 7 callbacks suppressed": 7,
		"kauditd_printk_skb: x callbacks suppressed":                0,
		"eth0: link up": 0,
	} {
		if got, _ := suppressed(line); got != want {
			t.Errorf("%q: %d, want %d", line, got, want)
		}
	}
}
