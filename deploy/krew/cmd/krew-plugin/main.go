// Command krew-plugin writes the kubectl plugin's krew archive and
// manifest (package deploy/krew) for one built binary: `make
// krew-plugin`.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/nodeshim/nodeshim/deploy/krew"
)

func main() {
	var version, binary, goos, goarch, uriBase, out string
	flag.StringVar(&version, "version", "", "the plugin's version (v0.1.0)")
	flag.StringVar(&binary, "binary", "", "the built kubectl-nodeshim")
	flag.StringVar(&goos, "os", runtime.GOOS, "the binary's GOOS")
	flag.StringVar(&goarch, "arch", runtime.GOARCH, "the binary's GOARCH")
	flag.StringVar(&uriBase, "uri-base", "", "where the archive is published; its URI is this, a slash and its name")
	flag.StringVar(&out, "out", "dist", "directory of the archive and nodeshim.yaml")
	flag.Parse()
	if err := run(version, binary, goos, goarch, uriBase, out); err != nil {
		fmt.Fprintln(os.Stderr, "krew-plugin:", err)
		os.Exit(1)
	}
}

func run(version, binary, goos, goarch, uriBase, out string) error {
	if binary == "" || uriBase == "" {
		return fmt.Errorf("-binary and -uri-base are required")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	name := fmt.Sprintf("%s_%s_%s_%s.tar.gz", krew.Binary, version, goos, goarch)
	f, err := os.Create(filepath.Join(out, name))
	if err != nil {
		return err
	}
	sum, err := krew.Archive(f, binary)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	m, err := krew.Manifest(version, []krew.Platform{{OS: goos, Arch: goarch, URI: uriBase + "/" + name, SHA256: sum}})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, krew.Name+".yaml"), m, 0o644); err != nil {
		return err
	}
	fmt.Printf("%s/%s\n%s/%s.yaml\n", out, name, out, krew.Name)
	return nil
}
