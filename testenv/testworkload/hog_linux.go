package testworkload

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
)

// RunHog joins the memory cgroup whose path is in dir/cgroup and allocates
// until the kernel kills it: the victim of the OOM tests.
func RunHog(dir string) {
	cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
	if err != nil {
		os.Exit(3)
	}
	if err := os.WriteFile(filepath.Join(string(cg), "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		os.Exit(4)
	}
	var chunks [][]byte
	for {
		b := make([]byte, 4<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		chunks = append(chunks, b)
		runtime.KeepAlive(chunks) // every chunk stays live until the kill
	}
}
