package reporter

import "time"

// Backoff is an exponential retry delay: Initial, doubled after every
// failure up to Max, back to Initial after a success. kubelet's node lease
// controller retries the same way (200 ms up to 7 s).
type Backoff struct {
	// Initial is the first delay.
	Initial time.Duration
	// Max caps the delay.
	Max time.Duration

	next time.Duration
}

// Next returns the delay before the next attempt after a failure.
func (b *Backoff) Next() time.Duration {
	if b.next == 0 {
		b.next = b.Initial
	}
	d := b.next
	b.next = min(2*b.next, b.Max)
	return min(d, b.Max)
}

// Reset starts the sequence again after a success.
func (b *Backoff) Reset() { b.next = 0 }
