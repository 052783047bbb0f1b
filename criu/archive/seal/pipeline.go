package seal

import (
	"hash"
	"io"
)

// pipeBlocks is how many ioChunk blocks a pipeline holds: one being
// filled, the others queued for or at the worker.
const pipeBlocks = 4

// pipeline is a writer that hands the bytes written to it, in whole
// blocks of ioChunk bytes, to a goroutine that hashes them and writes
// them to dst: the caller's goroutine goes on with the next block (age's
// encryption of it, or the read of it from a file) while the worker
// hashes and writes the last, so that on two cores a sealed archive
// costs about the slower of the two passes rather than their sum.
// Close must be called: it sends the last block and waits for the
// worker. The first error of dst is returned by every later Write and by
// Close.
type pipeline struct {
	dst io.Writer
	h   hash.Hash
	n   int64 // bytes accepted

	cur    []byte
	full   chan []byte   // filled blocks, to the worker
	free   chan []byte   // empty blocks, back from the worker
	failed chan struct{} // closed when the worker fails; err is set
	done   chan struct{} // closed when the worker has returned
	err    error         // the worker's error, read after failed or done
	closed bool
}

// newPipeline starts the worker of a pipeline that hashes into h and
// writes to dst.
func newPipeline(dst io.Writer, h hash.Hash) *pipeline {
	p := &pipeline{dst: dst, h: h, cur: make([]byte, 0, ioChunk),
		full: make(chan []byte, pipeBlocks), free: make(chan []byte, pipeBlocks),
		failed: make(chan struct{}), done: make(chan struct{})}
	for range pipeBlocks - 1 {
		p.free <- make([]byte, 0, ioChunk)
	}
	go p.work()
	return p
}

func (p *pipeline) work() {
	defer close(p.done)
	for b := range p.full {
		if p.err == nil {
			p.h.Write(b)
			if _, err := p.dst.Write(b); err != nil {
				p.err = err
				close(p.failed)
			}
		}
		p.free <- b[:0]
	}
}

func (p *pipeline) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		if p.cur == nil { // the worker failed in an earlier send
			return written, p.err
		}
		n := copy(p.cur[len(p.cur):cap(p.cur)], b)
		p.cur = p.cur[:len(p.cur)+n]
		b = b[n:]
		written += n
		p.n += int64(n)
		if len(p.cur) == cap(p.cur) {
			if err := p.send(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// send hands the current block to the worker and takes an empty one.
// After a failure the pipeline holds no block (cur is nil): the block
// handed over must not be handed over again by Close.
func (p *pipeline) send() error {
	select {
	case p.full <- p.cur:
		p.cur = nil
	case <-p.failed:
		p.cur = nil
		return p.err
	}
	select {
	case p.cur = <-p.free:
		return nil
	case <-p.failed:
		return p.err
	}
}

// ReadFrom reads r to its end into the pipeline, a block at a time
// (io.Copy's fast path: no intermediate buffer).
func (p *pipeline) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	for {
		if p.cur == nil {
			return total, p.err
		}
		n, err := r.Read(p.cur[len(p.cur):cap(p.cur)])
		p.cur = p.cur[:len(p.cur)+n]
		total += int64(n)
		p.n += int64(n)
		if len(p.cur) == cap(p.cur) {
			if serr := p.send(); serr != nil {
				return total, serr
			}
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// Close sends what is left and waits for the worker; it returns the
// worker's error. Calling it again returns the same.
func (p *pipeline) Close() error {
	if !p.closed {
		p.closed = true
		if len(p.cur) > 0 { // nil after a failure
			select {
			case p.full <- p.cur:
			case <-p.failed:
			}
		}
		close(p.full)
	}
	<-p.done
	return p.err
}

// hashPipelined hashes r to its end into h, reading the next block while
// the last is hashed, and returns the bytes read.
func hashPipelined(h hash.Hash, r io.Reader) (int64, error) {
	p := newPipeline(io.Discard, h)
	n, err := p.ReadFrom(r)
	if cerr := p.Close(); err == nil {
		err = cerr
	}
	return n, err
}
