package criu

import (
	"encoding/binary"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// kernelTracksSoftDirty reports whether this kernel tracks soft-dirty pages
// (what CRIU's mem_dirty_track needs), found out the way CRIU's kerndat
// does: clear the soft-dirty bits, write a page, and look for bit 55 in its
// pagemap entry. Without CONFIG_MEM_SOFT_DIRTY the bit is never set.
func kernelTracksSoftDirty(t *testing.T) bool {
	t.Helper()
	page := os.Getpagesize()
	mem, err := unix.Mmap(-1, 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	mem[0] = 1
	if err := os.WriteFile("/proc/self/clear_refs", []byte("4"), 0); err != nil {
		t.Fatalf("clear soft-dirty bits: %v", err)
	}
	mem[0] = 2
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var entry [8]byte
	if _, err := f.ReadAt(entry[:], int64(uintptr(unsafe.Pointer(&mem[0]))/uintptr(page))*8); err != nil {
		t.Fatalf("read pagemap: %v", err)
	}
	return binary.LittleEndian.Uint64(entry[:])&(1<<55) != 0
}
