// Package archivetest builds checkpoint archives for tests, hostile ones
// among them, byte by byte where archive/tar cannot write them (it writes
// no sparse members).
package archivetest

import (
	"archive/tar"
	"bytes"
	"fmt"
	"strconv"
	"testing"
)

// Member is one member of a test archive.
type Member struct {
	Name, Link string
	Type       byte
	Body       string
}

// Tar returns the tar of ms, each with mode 0600.
func Tar(t testing.TB, ms []Member) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range ms {
		h := &tar.Header{Name: m.Name, Typeflag: m.Type, Mode: 0o600, Linkname: m.Link, Size: int64(len(m.Body))}
		if m.Type != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(m.Body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Minimal returns the members of the smallest archive that passes
// validation, with config and spec as config.dump and spec.dump.
func Minimal(config, spec string) []Member {
	return []Member{
		{Name: "checkpoint/", Type: tar.TypeDir},
		{Name: "checkpoint/inventory.img", Type: tar.TypeReg, Body: "inv"},
		{Name: "config.dump", Type: tar.TypeReg, Body: config},
		{Name: "spec.dump", Type: tar.TypeReg, Body: spec},
	}
}

// TarWith returns a tar of before, then the raw member bytes, then after.
func TarWith(t testing.TB, before []Member, raw []byte, after []Member) []byte {
	t.Helper()
	b := Tar(t, before)
	b = b[:len(b)-2*512] // archive/tar's end of archive
	b = append(b, raw...)
	return append(b, Tar(t, after)...)
}

// RawHeader returns a USTAR header block for name.
func RawHeader(name string, typ byte, size int64) []byte {
	b := make([]byte, 512)
	copy(b[0:100], name)
	copy(b[100:108], "0000600\x00")
	copy(b[108:116], "0000000\x00")
	copy(b[116:124], "0000000\x00")
	copy(b[124:136], fmt.Sprintf("%011o\x00", size))
	copy(b[136:148], "00000000000\x00")
	b[156] = typ
	copy(b[257:263], "ustar\x00")
	copy(b[263:265], "00")
	for i := 148; i < 156; i++ {
		b[i] = ' '
	}
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// paxRecord formats one PAX record, "<length> key=value\n", whose length
// counts itself.
func paxRecord(k, v string) string {
	rest := " " + k + "=" + v + "\n"
	n := len(rest) + 1
	for len(strconv.Itoa(n))+len(rest) != n {
		n++
	}
	return strconv.Itoa(n) + rest
}

func padBlock(b []byte) []byte {
	if r := len(b) % 512; r != 0 {
		b = append(b, make([]byte, 512-r)...)
	}
	return b
}

// Sparse returns a PAX 1.0 GNU sparse member named name that expands to
// size bytes from a single data byte at its end: four blocks in the
// archive, size bytes once written out.
func Sparse(name string, size int64) []byte {
	recs := paxRecord("GNU.sparse.major", "1") + paxRecord("GNU.sparse.minor", "0") +
		paxRecord("GNU.sparse.name", name) + paxRecord("GNU.sparse.realsize", strconv.FormatInt(size, 10))
	var out []byte
	out = append(out, RawHeader("PaxHeaders/sparse", tar.TypeXHeader, int64(len(recs)))...)
	out = append(out, padBlock([]byte(recs))...)
	sparseMap := padBlock(fmt.Appendf(nil, "1\n%d\n1\n", size-1))
	out = append(out, RawHeader("GNUSparseFile.0/sparse", tar.TypeReg, int64(len(sparseMap))+1)...)
	out = append(out, sparseMap...)
	out = append(out, padBlock([]byte{'x'})...)
	return out
}

// ChainOut returns the symlinks of a chain that climbs up directories
// out of the archive's root and then follows rest, ending in the symlink
// name: each link taken alone stays inside the archive; followed through
// each other, as the kernel does, they lead outside it.
func ChainOut(name string, up int, rest string) []Member {
	ms := []Member{{Name: "checkpoint/up", Type: tar.TypeSymlink, Link: ".."}} // the root
	prev := "checkpoint/up"
	for i := 1; i <= up; i++ {
		// From checkpoint/ one level up, into prev, one more up: alone,
		// it ends in checkpoint/; through prev, one level above prev.
		n := fmt.Sprintf("checkpoint/l%d", i)
		ms = append(ms, Member{Name: n, Type: tar.TypeSymlink, Link: "../" + prev + "/.."})
		prev = n
	}
	return append(ms, Member{Name: name, Type: tar.TypeSymlink, Link: prev + "/" + rest})
}

// Case is an archive and what validation says of it.
type Case struct {
	Name    string
	Members []Member
	WantErr string // "" means valid
}

// With returns the minimal archive (empty config.dump and spec.dump) with
// extra members after it.
func With(extra ...Member) []Member { return append(Minimal("{}", "{}"), extra...) }

// Without returns the minimal archive without the member name.
func Without(name string) []Member {
	var out []Member
	for _, m := range Minimal("{}", "{}") {
		if m.Name != name {
			out = append(out, m)
		}
	}
	return out
}

// Cases are the archives that validation accepts (WantErr "") and those it
// refuses, with a part of the refusal: the archive package's own test and
// criu's restore run the same table.
func Cases() []Case {
	return []Case{
		{"minimal archive", Minimal("{}", "{}"), ""},
		{"tar's ./ prefix", []Member{
			{Name: "./checkpoint/", Type: tar.TypeDir},
			{Name: "./checkpoint/inventory.img", Type: tar.TypeReg},
			{Name: "./config.dump", Type: tar.TypeReg}, {Name: "./spec.dump", Type: tar.TypeReg},
		}, ""},
		{"symlink inside the archive", With(Member{Name: "checkpoint/link", Type: tar.TypeSymlink, Link: "inventory.img"}), ""},
		{"missing checkpoint/", Without("checkpoint/"), "no checkpoint/ directory entry"},
		{"missing config.dump", Without("config.dump"), "no regular file config.dump"},
		{"missing spec.dump", Without("spec.dump"), "no regular file spec.dump"},
		{"missing inventory.img", Without("checkpoint/inventory.img"), "no regular file checkpoint/inventory.img"},
		{"absolute path", With(Member{Name: "/etc/cron.d/evil", Type: tar.TypeReg, Body: "x"}), "absolute path"},
		{"dot-dot entry", With(Member{Name: "checkpoint/../../evil", Type: tar.TypeReg, Body: "x"}), `contains ".."`},
		{"symlink to an absolute path", With(Member{Name: "checkpoint/out", Type: tar.TypeSymlink, Link: "/etc"}), "outside the archive"},
		{"symlink up and out", With(Member{Name: "checkpoint/out", Type: tar.TypeSymlink, Link: "../../etc"}), "outside the archive"},
		{"entry through a symlink", With(
			Member{Name: "checkpoint/dir", Type: tar.TypeSymlink, Link: "."},
			Member{Name: "checkpoint/dir/x", Type: tar.TypeReg, Body: "x"},
		), "not a directory"},
		{"hard link", With(Member{Name: "checkpoint/hard", Type: tar.TypeLink, Link: "config.dump"}), "only directories, regular files and symlinks"},
		{"device", With(Member{Name: "checkpoint/dev", Type: tar.TypeChar}), "only directories, regular files and symlinks"},
		{"duplicate entry", With(Member{Name: "config.dump", Type: tar.TypeReg, Body: "again"}), "appears twice"},
	}
}
