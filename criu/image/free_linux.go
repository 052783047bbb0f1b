package image

import (
	"io"
	"os"

	"github.com/nodeshim/nodeshim/criu/archive"
)

// freeBytes returns the free bytes of the filesystem w writes to, when w
// is a file.
func freeBytes(w io.Writer) (int64, bool) {
	f, ok := w.(*os.File)
	if !ok {
		return 0, false
	}
	free, err := archive.FreeBytes(f)
	return free, err == nil
}
