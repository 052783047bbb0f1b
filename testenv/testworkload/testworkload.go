// Package testworkload holds the processes that tests checkpoint: a test
// binary re-executes itself and, seeing its workload variable, becomes one
// of these instead of running tests.
package testworkload

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// RunCounter touches mib MiB of memory, writes its pid to dir/pid, then
// counts in memory, appending each count to dir/log, every 10ms.
// With tcp, it also holds an established TCP connection to itself, which
// CRIU refuses to dump without --tcp-established.
func RunCounter(dir, mib string, tcp bool) {
	n, _ := strconv.Atoi(mib)
	if tcp {
		// Plain TCP: Go listens with MPTCP by default since 1.24, which
		// CRIU 4.1 refuses outright ("Unsupported proto 262").
		var lc net.ListenConfig
		lc.SetMultipathTCP(false)
		l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			os.Exit(5)
		}
		var d net.Dialer
		d.SetMultipathTCP(false)
		c, err := d.Dial("tcp", l.Addr().String())
		if err != nil {
			os.Exit(5)
		}
		s, err := l.Accept()
		if err != nil {
			os.Exit(5)
		}
		defer c.Close()
		defer s.Close()
	}
	ballast := make([]byte, n<<20)
	// Pseudo-random bytes (xorshift64, faster than crypto/rand for GiBs):
	// every page is present and none is the zero page.
	x := uint64(0x9E3779B97F4A7C15)
	for i := 0; i+8 <= len(ballast); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(ballast[i:], x)
	}
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		os.Exit(3)
	}
	for i := 1; ; i++ {
		f, err := os.OpenFile(filepath.Join(dir, "log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			os.Exit(4)
		}
		fmt.Fprintf(f, "%d\n", i)
		f.Close()
		// Touch the ballast so it stays part of the live state.
		ballast[(i*4096)%max(len(ballast), 1)]++
		time.Sleep(10 * time.Millisecond)
	}
}
