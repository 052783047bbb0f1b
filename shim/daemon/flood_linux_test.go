package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/client"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// Environment of the test binary started as a flooding local user or as
// root's client.
const (
	envFloodConns = "NODESHIM_DAEMON_TEST_FLOOD_CONNS"
	envProbeReqs  = "NODESHIM_DAEMON_TEST_PROBE_REQUESTS"
)

// probeTimeout bounds each of root's requests: generous, the answer takes
// milliseconds.
const probeTimeout = 10 * time.Second

// runProbe is root's client in a process of its own, as `nodeshim status`
// is: it reads GET /status envProbeReqs times through shim/client, each
// bounded by probeTimeout, and prints the latencies in nanoseconds as a
// JSON array, or "error: ..." at the first failure.
func runProbe() {
	c := client.New(os.Getenv(envClientSock))
	n, _ := strconv.Atoi(os.Getenv(envProbeReqs))
	var lat []time.Duration
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		start := time.Now()
		_, err := c.Status(ctx)
		cancel()
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(0)
		}
		lat = append(lat, time.Since(start))
	}
	b, _ := json.Marshal(lat)
	fmt.Println(string(b))
	os.Exit(0)
}

// floodReport is what the flooding child reports once its connections
// are open.
type floodReport struct {
	// Answered counts the connections that got an answer (401) and that
	// the server left open: the ones it holds for the child.
	Answered int `json:"answered"`
	// Closed counts the connections the server closed: at accept (over
	// the peer's limit) or after a refusal.
	Closed int `json:"closed"`
	// DialErrors counts the connects that failed.
	DialErrors int `json:"dialErrors"`
	// Pending counts the connections without an answer nor a close when
	// the child stopped waiting (a server that no longer accepts).
	Pending int `json:"pending"`
}

// runFlood is the hostile local user: it switches to the uid and gid in
// envClientUID, opens envFloodConns connections to the socket, sends
// GET /status on each and keeps each one open, adds a request whose body
// never comes, prints a floodReport line, and holds everything until its
// stdin closes. It then prints whether the server closed the slow-body
// connection ("slow-body closed" or "slow-body held") and exits.
func runFlood() {
	id, _ := strconv.Atoi(os.Getenv(envClientUID))
	if err := syscall.Setgid(id); err != nil {
		fmt.Println("setgid:", err)
		os.Exit(1)
	}
	if err := syscall.Setuid(id); err != nil {
		fmt.Println("setuid:", err)
		os.Exit(1)
	}
	sock := os.Getenv(envClientSock)
	n, _ := strconv.Atoi(os.Getenv(envFloodConns))
	var rep floodReport
	var conns []net.Conn
	for range n {
		c, err := net.Dial("unix", sock)
		if err != nil {
			rep.DialErrors++
			continue
		}
		// A write to a connection the server already closed fails;
		// the read below counts it.
		io.WriteString(c, "GET /status HTTP/1.1\r\nHost: nodeshim\r\n\r\n")
		conns = append(conns, c)
	}
	// Read every answer at once, bounded, so that a server that stopped
	// accepting does not make the child wait for each in turn.
	deadline := time.Now().Add(20 * time.Second)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(deadline)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			var ne net.Error
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && !resp.Close:
				rep.Answered++
			case err == nil, !errors.As(err, &ne) || !ne.Timeout():
				rep.Closed++
			default:
				rep.Pending++
			}
			if err == nil {
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	// The slow body: 1000 bytes announced, 2 sent.
	slow := make(chan string, 1)
	if c, err := net.Dial("unix", sock); err != nil {
		slow <- "slow-body closed (connect: " + err.Error() + ")"
	} else {
		io.WriteString(c, "POST /checkpoint/a/b/c HTTP/1.1\r\nHost: nodeshim\r\nContent-Length: 1000\r\n\r\nab")
		go func() {
			io.Copy(io.Discard, c)
			slow <- "slow-body closed"
		}()
	}
	b, _ := json.Marshal(rep)
	fmt.Println(string(b))
	io.Copy(io.Discard, os.Stdin)
	select {
	case s := <-slow:
		fmt.Println(s)
	default:
		fmt.Println("slow-body held")
	}
	os.Exit(0)
}

// openSockets counts the sockets this process holds.
func openSockets(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// lowerFileLimit lowers this process's soft RLIMIT_NOFILE to the
// descriptors open now plus headroom, as a node's serve runs with a finite
// limit, and restores it when the test ends. Children of the test binary
// raise theirs again to the hard limit (Go's os package does at start).
func lowerFileLimit(t *testing.T, headroom uint64) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	lower := old
	lower.Cur = min(old.Cur, uint64(len(ents))+headroom)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lower); err != nil {
		t.Fatal(err)
	}
	t.Logf("RLIMIT_NOFILE soft %d (was %d), %d descriptors open", lower.Cur, old.Cur, len(ents))
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

// TestAPIUnderLocalFlood runs serve with a reporter uid configured, as the
// shipped ConfigMap does (the socket is then 0666: every local user can
// connect), and has an unprivileged user (nobody) open hundreds of
// connections and hold them, plus a request whose body never comes. Root
// and the reporter uid must still be answered, serve must not hold the
// flood's connections, the slow body must not hold its connection, and
// the log must not grow with the number of refusals.
func TestAPIUnderLocalFlood(t *testing.T) {
	testutil.RequireRoot(t)
	const (
		reporter = 65532
		nobody   = 65534
		flood    = 400
	)
	d := startDaemon(t, typeMeta+"api: {readOnlyUIDs: ["+strconv.Itoa(reporter)+"]}\n")
	testutil.Eventually(t, "a 0666 socket with the reporter uid configured", func() error {
		fi, err := os.Stat(d.sock)
		if err != nil {
			return err
		}
		if fi.Mode().Perm() != 0o666 {
			return fmt.Errorf("socket mode %v", fi.Mode().Perm())
		}
		return nil
	})
	// Let other uids reach the root dir (the test's temporary
	// directories are 0700).
	for p := filepath.Dir(filepath.Dir(d.sock)); p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got := asUser(t, d.sock, reporter, "GET /status"); got != "200" {
		t.Fatalf("reporter before the flood = %q, want 200", got)
	}
	// Serve (this process) may open 256 more descriptors: fewer than the
	// flood's connections.
	lowerFileLimit(t, 256)
	baseline := openSockets(t)
	logsBefore := len(d.logs.String())

	// Root sends a body that never comes: the request is answered and
	// the connection closed once the read time-out is over.
	rootSlow := make(chan string, 1)
	go func() {
		c, err := net.Dial("unix", d.sock)
		if err != nil {
			rootSlow <- "connect: " + err.Error()
			return
		}
		defer c.Close()
		start := time.Now()
		// Generous: ten times the default read time-out.
		c.SetDeadline(start.Add(10 * api.DefaultReadTimeout))
		io.WriteString(c, "POST /checkpoint/a/b/c HTTP/1.1\r\nHost: nodeshim\r\nContent-Length: 1000\r\n\r\nab")
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			rootSlow <- "no answer: " + err.Error()
			return
		}
		resp.Body.Close()
		if _, err := io.Copy(io.Discard, r); err != nil {
			rootSlow <- fmt.Sprintf("answered %d but the connection is held: %v", resp.StatusCode, err)
			return
		}
		rootSlow <- fmt.Sprintf("answered %d, closed after %v", resp.StatusCode, time.Since(start).Round(time.Millisecond))
	}()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorkload+"=flood", envClientSock+"="+d.sock,
		envClientUID+"="+strconv.Itoa(nobody), envFloodConns+"="+strconv.Itoa(flood))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		t.Fatalf("flood: no report: %v", lines.Err())
	}
	var rep floodReport
	if err := json.Unmarshal(lines.Bytes(), &rep); err != nil {
		t.Fatalf("flood: %q: %v", lines.Text(), err)
	}
	t.Logf("flood of %d connections as uid %d: %+v", flood, nobody, rep)

	// While nobody holds what it could open, root's client (another
	// process, as `nodeshim status`) is answered.
	probe := exec.Command(os.Args[0], "-test.run=^$")
	probe.Env = append(os.Environ(), envWorkload+"=probe", envClientSock+"="+d.sock, envProbeReqs+"=10")
	out, err := probe.CombinedOutput()
	if err != nil {
		t.Fatalf("root's client: %v: %s", err, out)
	}
	var lat []time.Duration
	if err := json.Unmarshal(out, &lat); err != nil {
		t.Fatalf("root's GET /status during the flood (each bounded by %v): %s", probeTimeout, out)
	}
	slices.Sort(lat)
	t.Logf("root's GET /status during the flood, %d requests: median %v, max %v", len(lat), lat[len(lat)/2], lat[len(lat)-1])
	// And so is the reporter, from its own reserve.
	if got := asUser(t, d.sock, reporter, "GET /status"); got != "200" {
		t.Errorf("reporter during the flood = %q, want 200", got)
	}
	// Serve holds none of the flood's connections for long: the sockets
	// it holds come back near the baseline (a few may still be closing).
	bound := baseline + 2*api.DefaultConnsPerPeer + 8
	var held int
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		if held = openSockets(t); held <= bound {
			break
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("serve holds %d sockets during the flood, baseline %d, want at most %d", held, baseline, bound)
		}
	}
	t.Logf("serve holds %d sockets during the flood (baseline %d)", held, baseline)

	stdin.Close()
	if !lines.Scan() {
		t.Fatalf("flood: no slow-body line: %v", lines.Err())
	}
	if got := lines.Text(); !strings.HasPrefix(got, "slow-body closed") {
		t.Errorf("nobody's request with a body that never comes: %s, want the connection closed", got)
	}
	if got := <-rootSlow; !strings.HasPrefix(got, "answered 404, closed") {
		t.Errorf("root's request with a body that never comes: %s", got)
	} else {
		t.Logf("root's request with a body that never comes: %s", got)
	}

	// One line per peer and interval, however many refusals.
	logs := d.logs.String()[logsBefore:]
	var refusals []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "refused") {
			refusals = append(refusals, l)
		}
	}
	t.Logf("%d refusal lines for %d connections", len(refusals), flood)
	if len(refusals) > 6 {
		t.Errorf("%d refusal lines for one peer's flood, want one per peer and interval:\n%s", len(refusals), strings.Join(refusals[:6], "\n"))
	}
}
