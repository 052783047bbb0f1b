package auditlog

import (
	"encoding/binary"
	"slices"
	"testing"
)

// nlmsg builds an audit netlink message as the kernel sends it: nlmsg_len
// the header plus the text, not padded.
func nlmsg(typ uint16, text string) []byte {
	b := make([]byte, 16+len(text))
	binary.NativeEndian.PutUint32(b[0:4], uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:6], typ)
	copy(b[16:], text)
	return b
}

func TestNetlinkRecords(t *testing.T) {
	rec := `audit(1.5:7): pid=42 comm="a" arch=c000003e syscall=83 code=0x7ffc0000`
	one := nlmsg(TypeSeccomp, rec) // 16 + 69 bytes: not a multiple of 4
	if len(one)%4 == 0 {
		t.Fatal("the test needs an unpadded length")
	}
	pad := func(b []byte) []byte { return append(b, make([]byte, (4-len(b)%4)%4)...) }
	tests := []struct {
		name string
		in   []byte
		want []string
	}{
		{"one unpadded", one, []string{"type=1326 " + rec}},
		{"two, the first padded", append(pad(nlmsg(TypeSeccomp, rec)), one...), []string{"type=1326 " + rec, "type=1326 " + rec}},
		{"another type skipped", append(pad(nlmsg(1300, "audit(1.5:6): arch=c000003e")), one...), []string{"type=1326 " + rec}},
		{"truncated header", one[:10], nil},
		{"length beyond the buffer", one[:40], []string{"type=1326 " + rec[:24]}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := netlinkRecords(tc.in); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	if r, err := Parse(netlinkRecords(one)[0]); err != nil || r.PID != 42 || r.Syscall != 83 {
		t.Errorf("Parse = %+v, %v", r, err)
	}
}

func FuzzNetlinkRecords(f *testing.F) {
	f.Add(nlmsg(TypeSeccomp, `audit(1.5:7): pid=42 arch=c000003e syscall=83 code=0x7ffc0000`))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0e, 0x05})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, l := range netlinkRecords(b) {
			_, _ = Parse(l)
		}
	})
}
