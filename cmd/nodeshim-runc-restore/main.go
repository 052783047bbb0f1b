// Command nodeshim-runc-restore restores a container for nodeshim-runc:
// nodeshim-runc execs it with containerd's runc shim's create command
// line when the bundle's spec names a checkpoint. It validates the
// archive, checks that the node and the container are the checkpoint's,
// and has runc restore the process tree with CRIU. See
// runtimes/restoring/restore and docs/runtimeclass.md.
package main

import (
	"os"

	"github.com/nodeshim/nodeshim/runtimes/restoring/restore"
)

func main() {
	os.Exit(restore.Main(os.Args[0], os.Args[1:]))
}
