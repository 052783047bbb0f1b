package restore

import "testing"

// BuildArchive is Archive for the package's external tests: a test-built
// archive of container name from image, with a core image of machine a.
func BuildArchive(t testing.TB, name, image string, a Arch) []byte {
	return Archive(t, name, image, a, "")
}
