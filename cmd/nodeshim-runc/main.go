// Command nodeshim-runc is the OCI runtime of nodeshim's RuntimeClass:
// containerd's runc shim runs it as the handler's BinaryName with runc's
// command line. It passes every call to runc (or crun) by exec(2), and
// hands the create of a container whose spec names a checkpoint
// (restore.nodeshim.io/checkpoint) to nodeshim-runc-restore beside it. It
// imports the standard library only: it runs before every runtime call of
// the handler, and Go runs every linked package's init at each start. See
// runtimes/restoring and docs/runtimeclass.md.
//
// `nodeshim-runc --nodeshim-install DIR` copies it and
// nodeshim-runc-restore from beside it into DIR: the DaemonSet's init
// container installs them on the node so.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodeshim/nodeshim/runtimes/restoring"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == restoring.InstallFlag {
		exe, err := os.Executable()
		if err == nil {
			err = restoring.Install(filepath.Dir(exe), os.Args[2])
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "nodeshim-runc:", err)
			os.Exit(1)
		}
		fmt.Printf("nodeshim-runc: installed %v into %s\n", restoring.Binaries, os.Args[2])
		return
	}
	w, err := restoring.NewWrapper(os.Args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodeshim-runc:", err)
		os.Exit(1)
	}
	os.Exit(w.Main(os.Args[1:]))
}
