package kernel

import (
	"encoding/binary"
	"testing"
)

// genMsg builds the payload of an NFT_MSG_NEWGEN message: nfgenmsg, then
// netlink attributes.
func genMsg(attrs ...[]byte) []byte {
	b := []byte{0, 0, 0, 0} // nfgenmsg: family, version, res_id
	for _, a := range attrs {
		b = append(b, a...)
	}
	return b
}

func attr(typ uint16, payload []byte) []byte {
	b := make([]byte, 4, 4+len(payload)+3)
	binary.NativeEndian.PutUint16(b[0:2], uint16(4+len(payload)))
	binary.NativeEndian.PutUint16(b[2:4], typ)
	b = append(b, payload...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func TestParseGenID(t *testing.T) {
	be := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	tests := []struct {
		name string
		in   []byte
		want uint32
		ok   bool
	}{
		{"gen id alone", genMsg(attr(1, be(42))), 42, true},
		{"after other attributes", genMsg(attr(2, be(7)), attr(3, []byte("nft\x00")), attr(1, be(9))), 9, true},
		{"missing", genMsg(attr(2, be(7))), 0, false},
		{"short header", []byte{0, 0}, 0, false},
		{"attribute length past the end", append(genMsg(), 0xff, 0, 1, 0), 0, false},
		{"zero attribute length", append(genMsg(), 0, 0, 1, 0, 0, 0, 0, 0), 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseGenID(tc.in)
			if got != tc.want || ok != tc.ok {
				t.Errorf("parseGenID = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func FuzzParseGenID(f *testing.F) {
	f.Add(genMsg(attr(1, []byte{0, 0, 0, 5})))
	f.Add(genMsg(attr(2, []byte{1}), attr(1, []byte{0, 0, 1, 0})))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		parseGenID(b) // must not panic or loop on any answer
	})
}
