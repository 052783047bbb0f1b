package config

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// BenchmarkMerge measures the drop-in merge of a base and two drop-ins,
// beside the baseline of strictly decoding the base document alone.
func BenchmarkMerge(b *testing.B) {
	base := []byte(goodConfig(1) + "rootDir: /var/lib/nodeshim\nplugins:\n  acceptedVersions:\n    CSIPlugin: [1.0.0]\n")
	d1 := []byte("apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\nplugins: {expected: [b]}\n")
	d2 := []byte("apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\nnetwork: {cniConfDir: /opt/cni}\n")
	b.Run("merge-base+2-dropins", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Merge(Defaults(), File{"config.yaml", base}, File{"10.conf", d1}, File{"20.conf", d2}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline-strict-decode-base", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var c ShimConfiguration
			if err := yaml.UnmarshalStrict(base, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRecordWrite measures the crash-safe record write (O_EXCL temp,
// write, fsync, rename, fsync of the directory) beside a plain
// os.WriteFile of the same bytes, to show what crash safety costs.
func BenchmarkRecordWrite(b *testing.B) {
	dir := b.TempDir()
	s := store{dir: dir}
	if err := s.init(); err != nil {
		b.Fatal(err)
	}
	ref := &SourceRef{UID: Payload{}.UID()}
	r := record{Assigned: ref, LastKnownGood: ref}
	b.Run("atomic-fsync", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := s.writeRecord(r); err != nil {
				b.Fatal(err)
			}
		}
	})
	data, _ := yaml.Marshal(r)
	b.Run("baseline-os.WriteFile", func(b *testing.B) {
		b.ReportAllocs()
		p := filepath.Join(dir, "plain.json")
		for b.Loop() {
			if err := os.WriteFile(p, data, 0o600); err != nil {
				b.Fatal(err)
			}
		}
	})
}
