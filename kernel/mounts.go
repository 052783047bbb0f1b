package kernel

import (
	"fmt"
	"os"

	"github.com/nodeshim/nodeshim/internal/mountinfo"
)

// readMountInfo reads and parses a mountinfo file (proc(5)).
func readMountInfo(path string) ([]mountinfo.Entry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	m, err := mountinfo.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return m, nil
}
