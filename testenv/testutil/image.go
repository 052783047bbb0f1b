package testutil

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// InstallAsImage copies the executable src into dir under its own name
// with plain write(2) calls, as a container runtime unpacks an image layer,
// and returns the copy's path. A benchmark that runs a binary it has just
// built runs this copy: the kernel may cache the linker's output file in
// large folios that every process running it maps whole (30 MiB of file
// pages for `nodeshim version` at 31.3 MB, against 19 for a copy), which no
// node's runtime leaves.
func InstallAsImage(tb testing.TB, src, dir string) string {
	tb.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		tb.Fatal(err)
	}
	defer in.Close()
	dst := filepath.Join(dir, filepath.Base(src))
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		tb.Fatal(err)
	}
	// Through a plain io.Writer: *os.File's ReadFrom would copy in the
	// kernel (copy_file_range) instead.
	if _, err := io.CopyBuffer(struct{ io.Writer }{out}, in, make([]byte, 1<<20)); err != nil {
		out.Close()
		tb.Fatalf("copy %s to %s: %v", src, dst, err)
	}
	if err := out.Close(); err != nil {
		tb.Fatalf("copy %s to %s: %v", src, dst, err)
	}
	return dst
}
