package transfer

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeshim/nodeshim/shim/transfer/transfertest"
)

// BenchmarkTransfer sends a pod checkpoint of 64 MiB from one node API to
// another on loopback, as TestTransfer does: sealed (age to the receiver,
// ed25519 by the sender) as it streams over mutual TLS, written, verified
// (the SHA-256 of the stream), decrypted and unpacked, fsynced and
// renamed into place. The bytes are the pod checkpoint's.
func BenchmarkTransfer(b *testing.B) {
	root := b.TempDir()
	ca := transfertest.NewCA(b, root, "cluster-ca")
	a, r := transfertest.NewNode(b, root, ca, "node-a"), transfertest.NewNode(b, root, ca, "node-b")
	recv, err := NewReceiver(ReceiverOptions{Dir: r.Dir, Open: r.Trusting(b, a), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	r.Serve(b, recv, nil)
	name, _ := transfertest.PodCheckpoint(b, a.Dir, "shop", "cart", 64<<20)
	o := SendOptions{Client: a.Client(b), URL: r.URL, Seal: a.SealTo(b, r.Keys.Recipient)}
	b.SetBytes(64 << 20)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := Send(context.Background(), a.Dir, name, o); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := os.RemoveAll(filepath.Join(r.Dir, name)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
