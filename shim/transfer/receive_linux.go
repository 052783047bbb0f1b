package transfer

import (
	"archive/tar"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/criu/pod"
	"github.com/nodeshim/nodeshim/criu/workentry"
	"github.com/nodeshim/nodeshim/internal/atomicfile"
	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// Defaults of ReceiverOptions.
const (
	// DefaultMaxBytes bounds one transfer: the stream as received, and
	// the pod checkpoint unpacked from it.
	DefaultMaxBytes = 16 << 30
	// DefaultMaxConcurrent transfers are received at once; more are
	// answered 429.
	DefaultMaxConcurrent = 2
	// DefaultTimeout bounds the reading of one transfer: 16 GiB at
	// 100 MB/s takes under 3 minutes.
	DefaultTimeout = 30 * time.Minute
	// maxFiles bounds the files of one pod checkpoint: a manifest and its
	// signature, and per container an archive, an image and signatures.
	maxFiles = 4096
)

// Errors the receiver answers with, by class.
var (
	// ErrTooLarge: the transfer is larger than the receiver's bound.
	ErrTooLarge = errdefs.New(errdefs.ErrInvalidArgument, "transfer larger than the receiver accepts")
	// ErrNoSpace: the checkpoint directory's filesystem lacks the room.
	ErrNoSpace = errdefs.New(errdefs.ErrUnavailable, "not enough free space for the transfer")
	// ErrUnauthenticated: no client certificate verified by the TLS
	// handshake names the sending node.
	ErrUnauthenticated = errdefs.New(errdefs.ErrInvalidArgument, "the sender presented no verified node certificate")
	// ErrExists: the checkpoint directory already holds that name.
	ErrExists = errdefs.New(errdefs.ErrBusy, "a checkpoint of that name exists")
)

// ReceiverOptions configure a Receiver.
type ReceiverOptions struct {
	// Dir is the node's checkpoint directory, where received pod
	// checkpoints are stored.
	Dir string
	// Open holds the trust policy every transfer's signature must
	// satisfy and the identities that decrypt it; both are required.
	Open seal.OpenOptions
	// MaxBytes bounds one transfer; DefaultMaxBytes when zero.
	MaxBytes int64
	// MinFreeBytes is the room the filesystem keeps beyond a transfer:
	// one that would leave less is refused before it is written.
	MinFreeBytes int64
	// MaxConcurrent bounds the transfers received at once;
	// DefaultMaxConcurrent when zero.
	MaxConcurrent int
	// Timeout bounds the reading of one transfer, which replaces the API
	// listener's read timeout (api.limits.readTimeout, made for small
	// requests) once the sender is authenticated; DefaultTimeout when
	// zero.
	Timeout time.Duration
	// Stored, when set, is called with the path of each pod checkpoint
	// stored: the daemon applies its retention policy there.
	Stored func(path string)
	// Logger; slog.Default() when nil.
	Logger *slog.Logger
}

// Receiver serves Pattern: it stores the pod checkpoints other nodes'
// shims send.
type Receiver struct {
	o   ReceiverOptions
	sem chan struct{}
}

// NewReceiver returns a Receiver for o; a trust policy and at least one
// identity are required: a transfer is always signed and encrypted.
func NewReceiver(o ReceiverOptions) (*Receiver, error) {
	switch {
	case o.Dir == "" || !filepath.IsAbs(o.Dir):
		return nil, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("transfer receiver: checkpoint directory %q is not an absolute path", o.Dir))
	case o.Open.Policy == nil:
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "transfer receiver: no trust policy (checkpoint.trustPolicy): a transfer's signer must be trusted")
	case len(o.Open.Identities) == 0:
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "transfer receiver: no age identity (checkpoint.encryption.identities): a transfer is encrypted to this node")
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Receiver{o: o, sem: make(chan struct{}, o.MaxConcurrent)}, nil
}

// Result is the answer to a transfer that was stored.
type Result struct {
	// Name is the pod checkpoint's name in the receiver's checkpoint
	// directory, Path its path there.
	Name string `json:"name"`
	Path string `json:"path"`
	// Received is the bytes of the sealed stream; Stored those of the pod
	// checkpoint unpacked.
	Received int64 `json:"received"`
	Stored   int64 `json:"stored"`
	// From is the sending node.
	From string `json:"from"`
}

// ServeHTTP serves one transfer: 201 with a Result once the pod
// checkpoint is stored; 401 without a verified node certificate, 403 for
// a stream the trust policy refuses (or signed by another node than the
// certificate's), 400 for a malformed one, 409 for a name taken, 413 over
// the bound, 429 when busy, 507 without the room.
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	from := ""
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.PeerCertificates) > 0 {
		from = NodeOf(r.TLS.PeerCertificates[0].Subject.CommonName)
	}
	if from != "" {
		// Not every ResponseWriter has a connection (httptest's).
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(rc.o.Timeout))
	}
	res, err := rc.receive(r, name, from)
	if err != nil {
		code := codeOf(err)
		rc.o.Logger.Warn("transfer refused", "name", name, "from", from, "remote", r.RemoteAddr, "code", code, "err", err)
		w.Header().Set("Connection", "close")
		writeJSON(w, code, map[string]string{"error": err.Error()})
		return
	}
	rc.o.Logger.Info("transfer stored", "name", res.Name, "from", res.From, "received", res.Received, "stored", res.Stored)
	writeJSON(w, http.StatusCreated, res)
}

// codeOf maps a receive error to its status code.
func codeOf(err error) int {
	switch {
	case errors.Is(err, ErrUnauthenticated):
		return http.StatusUnauthorized
	case errors.Is(err, seal.ErrUntrusted), errors.Is(err, seal.ErrNoIdentity), errors.Is(err, errUntrustedSender):
		return http.StatusForbidden
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrNoSpace):
		return http.StatusInsufficientStorage
	case errors.Is(err, ErrExists):
		return http.StatusConflict
	case errors.Is(err, errBusy):
		return http.StatusTooManyRequests
	case errors.Is(err, errdefs.ErrInvalidArgument):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

var (
	errBusy            = errdefs.New(errdefs.ErrBusy, "too many transfers at once")
	errUntrustedSender = errdefs.New(errdefs.ErrInvalidArgument, "the stream is signed by another node than the sender's certificate names")
)

func (rc *Receiver) receive(r *http.Request, name, from string) (res Result, err error) {
	if from == "" {
		return res, ErrUnauthenticated
	}
	if !validName(name) {
		return res, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("%q is not a pod checkpoint's name", name))
	}
	select {
	case rc.sem <- struct{}{}:
		defer func() { <-rc.sem }()
	default:
		return res, errBusy
	}
	declared := r.ContentLength
	if v := r.Header.Get(HeaderSize); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return res, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("%s %q is not a size", HeaderSize, v))
		}
		declared = max(declared, n)
	}
	if declared > rc.o.MaxBytes {
		return res, fmt.Errorf("%s: %d bytes declared, at most %d: %w", name, declared, rc.o.MaxBytes, ErrTooLarge)
	}
	if err := rc.room(declared); err != nil {
		return res, fmt.Errorf("%s: %w", name, err)
	}
	if _, err := os.Lstat(filepath.Join(rc.o.Dir, name)); err == nil {
		return res, fmt.Errorf("%s: %w", filepath.Join(rc.o.Dir, name), ErrExists)
	}
	workName, err := workentry.NewName(workentry.WorkPrefix, "")
	if err != nil {
		return res, err
	}
	work := filepath.Join(rc.o.Dir, workName)
	if err := os.Mkdir(work, 0o700); err != nil {
		return res, fmt.Errorf("transfer %s: %w", name, err)
	}
	// Whatever happens below, the work entry goes: a refused or cut
	// transfer leaves nothing (a crash leaves it to retention's sweep).
	defer func() {
		if rmErr := os.RemoveAll(work); rmErr != nil && err == nil {
			rc.o.Logger.Warn("remove transfer work entry", "path", work, "err", rmErr)
		}
	}()
	stream := filepath.Join(work, "stream.age")
	res.Received, err = rc.save(r, stream)
	if err != nil {
		return res, fmt.Errorf("transfer %s from %s: %w", name, from, err)
	}
	sig, err := signatureOf(r.Trailer.Get(HeaderSignature))
	if err != nil {
		return res, fmt.Errorf("transfer %s from %s: %w", name, from, err)
	}
	if err := atomicfile.WriteNew(stream+seal.SignatureSuffix, sig, 0o600); err != nil {
		return res, err
	}
	podDir := filepath.Join(work, "pod")
	if res.Stored, err = rc.verifyAndUnpack(stream, podDir, name, from); err != nil {
		return res, fmt.Errorf("transfer %s from %s: %w", name, from, err)
	}
	final := filepath.Join(rc.o.Dir, name)
	if err := unix.Renameat2(unix.AT_FDCWD, podDir, unix.AT_FDCWD, final, unix.RENAME_NOREPLACE); err != nil {
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
			return res, fmt.Errorf("%s: %w", final, ErrExists)
		}
		return res, fmt.Errorf("rename %s to %s: %w", podDir, final, err)
	}
	if err := atomicfile.SyncDir(rc.o.Dir); err != nil {
		return res, err
	}
	res.Name, res.Path, res.From = name, final, from
	if rc.o.Stored != nil {
		rc.o.Stored(final)
	}
	return res, nil
}

// room refuses a transfer of n bytes (the stream, then as much again
// unpacked) that would leave the filesystem with less than MinFreeBytes;
// with n unknown, MaxBytes is assumed.
func (rc *Receiver) room(n int64) error {
	if n <= 0 {
		n = rc.o.MaxBytes
	}
	var st unix.Statfs_t
	if err := unix.Statfs(rc.o.Dir, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", rc.o.Dir, err)
	}
	free := int64(st.Bavail) * st.Bsize
	if need := 2*n + rc.o.MinFreeBytes; free < need {
		return fmt.Errorf("%s has %d bytes free, the transfer needs %d: %w", rc.o.Dir, free, need, ErrNoSpace)
	}
	return nil
}

// save writes the request's body to path, created with O_EXCL and mode
// 0600, at most MaxBytes, and fsyncs it.
func (rc *Receiver) save(r *http.Request, path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := io.Copy(f, io.LimitReader(r.Body, rc.o.MaxBytes+1))
	if err != nil {
		return n, fmt.Errorf("receive: %w", err)
	}
	if n > rc.o.MaxBytes {
		return n, fmt.Errorf("more than %d bytes: %w", rc.o.MaxBytes, ErrTooLarge)
	}
	if err := f.Sync(); err != nil {
		return n, fmt.Errorf("fsync %s: %w", path, err)
	}
	return n, f.Close()
}

// signatureOf decodes the signature trailer into a signature file's bytes.
func signatureOf(v string) ([]byte, error) {
	if v == "" {
		return nil, fmt.Errorf("no %s trailer: %w", HeaderSignature, seal.ErrUntrusted)
	}
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("%s trailer: %v: %w", HeaderSignature, err, seal.ErrUntrusted)
	}
	return b, nil
}

// verifyAndUnpack opens the sealed stream through the trust policy (the
// signature, its digest and size against the bytes received, the
// identities), checks that from signed it and that it is encrypted, then
// unpacks the plain tar into dir and checks the pod checkpoint it holds.
func (rc *Receiver) verifyAndUnpack(stream, dir, name, from string) (int64, error) {
	f, err := os.Open(stream)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	a, err := seal.Open(f, stream, rc.o.Open)
	if err != nil {
		return 0, err
	}
	switch {
	case a.Signature == nil:
		return 0, fmt.Errorf("unsigned stream: %w", seal.ErrUntrusted)
	case a.Signature.Node != from:
		return 0, fmt.Errorf("signed as node %q, sent by node %q: %w", a.Signature.Node, from, errUntrustedSender)
	case !a.Encrypted:
		return 0, fmt.Errorf("plain stream: a transfer is encrypted to its receiver: %w", seal.ErrUntrusted)
	}
	plain, err := a.Stream()
	if err != nil {
		return 0, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return 0, err
	}
	n, err := Unpack(plain, dir, rc.o.MaxBytes)
	if err != nil {
		return n, err
	}
	m, err := pod.ReadManifest(dir)
	if err != nil {
		return n, err
	}
	ns, podName, _, _, _ := pod.ParseName(name)
	if m.Namespace != ns || m.Name != podName {
		return n, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("the manifest is of pod %s/%s, the name %s of %s/%s", m.Namespace, m.Name, name, ns, podName))
	}
	for _, c := range m.Containers {
		p, err := m.ArchivePath(dir, c.Name)
		if err != nil {
			return n, err
		}
		if _, err := os.Lstat(p); err != nil {
			return n, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("container %s: the manifest names %s, which the transfer lacks", c.Name, filepath.Base(p)))
		}
	}
	return n, atomicfile.SyncDir(dir)
}

// Unpack writes the plain files of the tar stream r into the empty
// directory dir, each created with O_EXCL and mode 0600 and fsynced, and
// returns their total size. It refuses (ErrInvalidArgument) any member
// that is not a regular file, a name that is not a plain file name (no
// slash, not hidden), a name twice, more than maxFiles members, and more
// than max bytes in all (ErrTooLarge). It reads r to its end, so that a
// sealed stream's last chunk is authenticated before the files are used.
func Unpack(r io.Reader, dir string, max int64) (int64, error) {
	tr := tar.NewReader(r)
	var total int64
	for files := 0; ; files++ {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return total, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("read the transfer's tar: %v", err))
		}
		if files >= maxFiles {
			return total, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("more than %d files", maxFiles))
		}
		if h.Typeflag != tar.TypeReg || !plainName(h.Name) {
			return total, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("member %q (type %q): only plain files are transferred", h.Name, h.Typeflag))
		}
		if h.Size < 0 || h.Size > max-total {
			return total, fmt.Errorf("member %s: %d bytes after %d, at most %d in all: %w", h.Name, h.Size, total, max, ErrTooLarge)
		}
		n, err := writeMember(filepath.Join(dir, h.Name), tr)
		total += n
		if err != nil {
			return total, err
		}
	}
	// Past the tar's end: the rest of the stream (padding), read so that
	// age authenticates its last chunk.
	if _, err := io.Copy(io.Discard, io.LimitReader(r, 1<<20)); err != nil {
		return total, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("read the transfer's end: %v", err))
	}
	return total, nil
}

// plainName: a non-empty file name with no slash, not hidden, at most 255
// bytes, without NUL.
func plainName(s string) bool {
	return s != "" && !strings.ContainsAny(s, "/\x00") && !strings.HasPrefix(s, ".") && len(s) <= 255
}

func writeMember(path string, r io.Reader) (int64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return 0, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("member %s appears twice", filepath.Base(path)))
		}
		return 0, err
	}
	defer f.Close()
	n, err := io.Copy(f, r)
	if err != nil {
		return n, fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return n, fmt.Errorf("fsync %s: %w", path, err)
	}
	return n, f.Close()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// ErrNotEnabled is returned by a Handler's load when this node receives
// no transfers: the route answers 404, as with the feature off.
var ErrNotEnabled = errdefs.New(errdefs.ErrNotFound, "this node receives no transfers (checkpoint.transfer.enabled)")

// Handler serves Pattern with the options load returns at each request,
// so that a configuration put in force applies to the next transfer; at
// most DefaultMaxConcurrent are received at once, across loads. A load
// error is the answer (ErrNotEnabled: 404).
func Handler(load func() (ReceiverOptions, error)) http.Handler {
	sem := make(chan struct{}, DefaultMaxConcurrent)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o, err := load()
		var rc *Receiver
		if err == nil {
			rc, err = NewReceiver(o)
		}
		if err != nil {
			code := http.StatusServiceUnavailable
			if errors.Is(err, errdefs.ErrNotFound) {
				code = http.StatusNotFound
			}
			writeJSON(w, code, map[string]string{"error": err.Error()})
			return
		}
		rc.sem = sem
		rc.ServeHTTP(w, r)
	})
}
