package clustertest

import (
	"fmt"

	"github.com/nodeshim/nodeshim/testenv/testproc"
)

// startProc starts bin with args, its output in <name>.log in the cluster's
// directory (testenv/testproc), and remembers it for Close.
func (c *Cluster) startProc(name, bin string, args ...string) (*testproc.Proc, error) {
	p, err := testproc.Start(c.Dir, name, bin, args...)
	if err != nil {
		return nil, fmt.Errorf("clustertest: %w", err)
	}
	c.procs = append(c.procs, p)
	return p, nil
}
