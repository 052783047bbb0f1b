package restore

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/archive"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/criu/pod"
	"github.com/nodeshim/nodeshim/internal/atomicfile"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/runtimes/restoring"
)

// The CRI annotations containerd writes into every container's OCI spec
// (containerd's internal/cri/annotations).
const (
	annotationContainerType = "io.kubernetes.cri.container-type"
	annotationContainerName = "io.kubernetes.cri.container-name"
	annotationImageName     = "io.kubernetes.cri.image-name"
	containerTypeSandbox    = "sandbox"
)

// ErrRefused: the node cannot honour the checkpoint a container names
// (another machine, an older CRIU, a container that is not the
// checkpoint's, a path outside the checkpoint directory).
var ErrRefused = errdefs.New(errdefs.ErrInvalidArgument, "checkpoint refused")

// CriuVersion asks the CRIU at bin ("criu" on PATH when empty) its
// version; "" when it cannot say (the runtime then finds out).
func CriuVersion(bin string) string {
	if bin == "" {
		bin = "criu"
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return ""
	}
	return DumpVersion(out)
}

// sweepAge is how old an unlocked work directory must be before a sweep
// removes it: one a restore has just created is not locked yet.
const sweepAge = time.Minute

// SweepWorkDir removes what killed restores left in the work directory
// dir: a restore's directory is locked (flock) for as long as the restore
// runs, so one that is unlocked and older than a minute belongs to no
// restore. Errors are ignored: the next sweep tries again.
func SweepWorkDir(dir string, now time.Time) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		fi, err := e.Info()
		if err != nil || now.Sub(fi.ModTime()) < sweepAge {
			continue
		}
		p := filepath.Join(dir, e.Name())
		l, err := lockDir(p, true)
		if err != nil {
			continue
		}
		_ = os.RemoveAll(p)
		l.Close()
	}
}

// lockDir takes an exclusive flock(2) on directory p, failing at once
// when another holds it if nonblock.
func lockDir(p string, nonblock bool) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	how := syscall.LOCK_EX
	if nonblock {
		how |= syscall.LOCK_NB
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	return f, nil
}

// versionCache is the file in the work directory that keeps the CRIU
// version CachedCriuVersion found, with the binary it is of.
const versionCache = ".criu-version"

// CachedCriuVersion is CriuVersion, kept in dir (the work directory)
// keyed by the binary's path, size and modification time, so that a
// restore does not start a CRIU process to learn what the previous one
// learned.
func CachedCriuVersion(bin, dir string) string {
	if bin == "" {
		bin = "criu"
	}
	p, err := exec.LookPath(bin)
	if err != nil {
		return ""
	}
	fi, err := os.Stat(p)
	if err != nil {
		return ""
	}
	key := fmt.Sprintf("%s %d %d", p, fi.Size(), fi.ModTime().UnixNano())
	cache := filepath.Join(dir, versionCache)
	if b, err := os.ReadFile(cache); err == nil {
		k, v, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		if k == key && DumpVersion([]byte("Version: "+v)) == v {
			return v
		}
	}
	v := CriuVersion(p)
	if v != "" && os.MkdirAll(dir, 0o700) == nil {
		// Best effort: the next restore asks CRIU again.
		_ = atomicfile.WriteFile(cache, []byte(key+"\n"+v+"\n"), 0o600)
	}
	return v
}

// ErrUnsupported: the checkpoint asks for what this wrapper cannot do
// (a terminal, an engine's archive other than a CRI container's).
var ErrUnsupported = errdefs.New(errdefs.ErrNotSupported, "restore not supported")

// Restore is one create that restores: the shim's call, the bundle's
// spec, and where the runtime and the checkpoints are.
type Restore struct {
	Config restoring.Config
	// Runtime is the resolved path of Config.Runtime.
	Runtime string
	Call    restoring.Call
	// Spec is the bundle's config.json.
	Spec *specs.Spec
	// Checkpoint is restoring.AnnotationCheckpoint's value.
	Checkpoint string
	// Arch is this node's CRIU machine type.
	Arch Arch
	// CriuVersion returns the version of the CRIU that will restore (""
	// when unknown: not compared); nil is unknown. It is asked after the
	// archive is unpacked, so that a probe started before runs alongside.
	CriuVersion func() string
	// Readiness returns CRIU's checks of this node (the capability
	// report's criu.check and feature entries), compared with what the
	// checkpoint needs before it is unpacked; with run false only an
	// answer that costs no CRIU process (a cache) is wanted. nil, or an
	// error: not compared.
	Readiness func(run bool) (criu.Readiness, error)
	// Stdin, Stdout and Stderr are the shim's pipes, which the restored
	// process gets in place of the ones it was dumped with.
	Stdin, Stdout, Stderr *os.File
}

// Timings are the phases of a Run.
type Timings struct {
	Validate, Unpack, Rootfs, Runtime time.Duration
}

// Run restores the container: it opens the archive beneath the
// checkpoint directory, validates it (archive.ValidateLimits), checks that
// the container is the checkpoint's (CheckContainer) and the node can
// restore its images (machine type, CRIU version), unpacks it into
// a private directory under WorkDir, applies its rootfs diff to the
// bundle's root, and runs `<runtime> restore --detach` with the shim's
// pid file and stdio, so that the process runs when create returns. The
// unpacked images are removed when Run returns, whatever happened: once
// CRIU has restored the pages they are not needed. A container of a lazy
// pod checkpoint (its manifest names a page server) is the exception: it
// restores with --lazy-pages while its memory is fetched over mutual TLS
// (Config.LazyTLS) by a `criu lazy-pages` daemon under a supervisor that
// outlives the create and removes the work directory once the memory is
// here; a fetch that fails before the container runs takes down the
// runtime, the tasks CRIU had half restored in the container's cgroups
// and the half-made container. A refusal writes nothing anywhere.
func (r *Restore) Run() (Timings, error) {
	var tm Timings
	start := time.Now()
	if r.Call.ConsoleSocket != "" {
		return tm, fmt.Errorf("%w: the container asks for a terminal, which a restore cannot attach", ErrUnsupported)
	}
	opts, err := r.openOptions()
	if err != nil {
		return tm, err
	}
	f, name, pageServer, err := OpenCheckpoint(r.Config.CheckpointDir, r.Checkpoint, r.Spec.Annotations[annotationContainerName])
	if errors.Is(err, ErrFinishedInit) {
		// Runs again only if the manifest that says so is trusted.
		if verr := verifyManifestFile(name, opts); verr != nil {
			return tm, verr
		}
		return tm, err
	}
	if err != nil {
		return tm, err
	}
	defer f.Close()
	if err := r.verifyManifest(name, opts); err != nil {
		return tm, err
	}
	// The signature and the decryption key are checked before a byte of
	// the archive is read; plain reads the tar (decrypting as it goes).
	sealed, err := seal.Open(f, name, opts)
	if err != nil {
		return tm, err
	}
	plain, err := sealed.Reader()
	if err != nil {
		return tm, err
	}
	l := archive.Limits{MaxBytes: r.Config.MaxBytes}
	entries, err := archive.ValidateLimits(plain, l)
	if err != nil {
		return tm, fmt.Errorf("%s: %w", name, err)
	}
	if _, err := plain.Seek(0, io.SeekStart); err != nil {
		return tm, fmt.Errorf("seek %s: %w", name, err)
	}
	meta, err := archive.ReadMeta(plain)
	if err != nil {
		return tm, fmt.Errorf("%s: %w", name, err)
	}
	if err := CheckContainer(meta, r.Spec); err != nil {
		return tm, fmt.Errorf("%s: %w", name, err)
	}
	if !hasCore(entries) {
		return tm, fmt.Errorf("%s: %w: no %s/core-*.img", name, ErrRefused, archive.ImagesDir)
	}
	if err := r.checkReadiness(entries); err != nil {
		return tm, fmt.Errorf("%s: %w", name, err)
	}
	var lazy *criu.PageServer
	if pageServer != "" {
		if lazy, err = r.lazySource(pageServer); err != nil {
			return tm, fmt.Errorf("%s: %w", name, err)
		}
	}
	tm.Validate = time.Since(start)

	start = time.Now()
	if err := os.MkdirAll(r.Config.WorkDir, 0o700); err != nil {
		return tm, fmt.Errorf("create %s: %w", r.Config.WorkDir, err)
	}
	SweepWorkDir(r.Config.WorkDir, time.Now())
	work, err := os.MkdirTemp(r.Config.WorkDir, r.Call.ID+"-")
	if err != nil {
		return tm, fmt.Errorf("create a work directory in %s: %w", r.Config.WorkDir, err)
	}
	// A lazy restore hands the work directory, with its lock and its
	// tmpfs, to the lazy-pages supervisor, which removes it once the
	// memory is here.
	handedOver := false
	defer func() {
		if !handedOver {
			if lazy != nil {
				// A CRIU restore stopped midway leaves its cgroup yard
				// mounted in its work directory.
				_ = removeWork(work)
			}
			os.RemoveAll(work)
		}
	}()
	// Held until the restore ends, so that a sweep never takes a live one.
	lock, err := lockDir(work, false)
	if err != nil {
		return tm, err
	}
	defer lock.Close()
	if sealed.Encrypted {
		// The plain images never reach a persistent disk.
		release, err := seal.EnsureInMemory(work)
		if err != nil {
			return tm, fmt.Errorf("restore %s: %w", name, err)
		}
		defer func() {
			if !handedOver {
				_ = release() // the work directory goes with it
			}
		}()
	}
	images := filepath.Join(work, "archive")
	if err := os.Mkdir(images, 0o700); err != nil {
		return tm, fmt.Errorf("create %s: %w", images, err)
	}
	stream, err := sealed.Stream()
	if err != nil {
		return tm, err
	}
	if err := archive.Unpack(stream, images, l); err != nil {
		return tm, fmt.Errorf("unpack %s: %w", name, err)
	}
	// The rest of the stream, so that a signed archive's bytes are
	// checked again to their end before the runtime reads the images.
	if _, err := io.Copy(io.Discard, stream); err != nil {
		return tm, fmt.Errorf("unpack %s: %w", name, err)
	}
	if err := r.checkNode(images); err != nil {
		return tm, fmt.Errorf("%s: %w", name, err)
	}
	tm.Unpack = time.Since(start)

	start = time.Now()
	rootfs := r.Spec.Root.Path
	if !filepath.IsAbs(rootfs) {
		rootfs = filepath.Join(r.bundle(), rootfs)
	}
	if err := gunzipRootfsDiff(images, r.Config.MaxBytes); err != nil {
		return tm, fmt.Errorf("%s: %w", name, err)
	}
	if err := archive.ApplyRootfsDiff(images, rootfs, l); err != nil {
		return tm, fmt.Errorf("%s: %w", name, err)
	}
	tm.Rootfs = time.Since(start)

	start = time.Now()
	var sup *lazySupervisor
	if lazy != nil {
		if sup, err = r.startLazyPages(*lazy, images, work, lock); err != nil {
			return tm, fmt.Errorf("%s: %w", name, err)
		}
		// Until it is told to go on, the supervisor stops the daemon
		// and removes the work directory when this process lets go of
		// it (returns, or dies).
		defer sup.abort()
	}
	if err := r.runtimeRestore(images, work, sup); err != nil {
		return tm, fmt.Errorf("%s: %w", name, err)
	}
	tm.Runtime = time.Since(start)
	if err := r.mark(name); err != nil {
		// The process runs but start would fail: take it down, so the
		// shim's create fails whole.
		_ = exec.Command(r.Runtime, append(r.globalArgs(), "delete", "--force", r.Call.ID)...).Run()
		return tm, err
	}
	if sup != nil {
		if err := sup.handOver(r.restoredPid()); err != nil {
			_ = exec.Command(r.Runtime, append(r.globalArgs(), "delete", "--force", r.Call.ID)...).Run()
			return tm, fmt.Errorf("%s: %w", name, err)
		}
		handedOver = true
	}
	return tm, nil
}

func (r *Restore) bundle() string {
	if r.Call.Bundle == "" {
		return "."
	}
	return r.Call.Bundle
}

// ErrFinishedInit is returned by OpenCheckpoint and Run for an init
// container that had finished in the pod checkpoint: it is not restored
// but runs again, as kubelet runs a new pod's init containers, so that
// what it prepares in the new pod's volumes is there before the
// containers are restored.
var ErrFinishedInit = errors.New("an init container that had finished runs again")

// OpenCheckpoint opens the archive of container that value names beneath
// dir: value is relative to dir, or an absolute path under it, and names
// a container archive, or a pod checkpoint (criu/pod: a directory with a
// manifest and one archive per container), whose archive of container is
// taken. Every component is resolved beneath dir (os.Root: no "..", no
// symlink leads out), and only a regular file is opened; anything else is
// refused with ErrRefused, so that a Pod's annotation never makes the node
// read an arbitrary host path. It returns the file, its path and, for a
// container of a lazy pod checkpoint, the page server that serves its
// memory (pod.Container.PageServer; "" otherwise). For an init container
// that had finished in a pod checkpoint it returns no file, the path of
// the manifest and an error wrapping ErrFinishedInit.
func OpenCheckpoint(dir, value, container string) (*os.File, string, string, error) {
	if value == "" {
		return nil, "", "", fmt.Errorf("%w: %s is empty", ErrRefused, restoring.AnnotationCheckpoint)
	}
	rel, pageServer := value, ""
	if filepath.IsAbs(value) {
		r, err := filepath.Rel(dir, filepath.Clean(value))
		if err != nil || r == ".." || strings.HasPrefix(r, "../") {
			return nil, "", "", fmt.Errorf("%w: %s %q is not under the checkpoint directory %s", ErrRefused, restoring.AnnotationCheckpoint, value, dir)
		}
		rel = r
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, "", "", fmt.Errorf("open the checkpoint directory %s: %w", dir, err)
	}
	defer root.Close()
	if fi, err := root.Stat(rel); err == nil && fi.IsDir() {
		mf, err := archive.OpenMember(root, filepath.Join(rel, pod.ManifestFile), 4<<20)
		if err != nil {
			return nil, "", "", fmt.Errorf("%w: pod checkpoint %q: %w", ErrRefused, value, err)
		}
		m, err := pod.DecodeManifest(mf)
		mf.Close()
		if err != nil {
			return nil, "", "", fmt.Errorf("%w: pod checkpoint %q: %w", ErrRefused, value, err)
		}
		i := slices.IndexFunc(m.Containers, func(c pod.Container) bool { return c.Name == container })
		if i < 0 && slices.ContainsFunc(m.InitContainers, func(c pod.InitContainer) bool { return c.Name == container && c.ExitCode == 0 }) {
			return nil, filepath.Join(dir, rel, pod.ManifestFile), "", fmt.Errorf("%w: %q in pod checkpoint %q", ErrFinishedInit, container, value)
		}
		if i < 0 {
			names := make([]string, len(m.Containers))
			for j, c := range m.Containers {
				names[j] = c.Name
			}
			return nil, "", "", fmt.Errorf("%w: pod checkpoint %q of %s/%s has no container %q, only %q", ErrRefused, value, m.Namespace, m.Name, container, names)
		}
		// A plain file name (Manifest.Validate), beside the manifest.
		rel = filepath.Join(rel, m.Containers[i].Archive)
		pageServer = m.Containers[i].PageServer
	}
	f, err := archive.OpenMember(root, rel, 1<<62)
	if err != nil {
		return nil, "", "", fmt.Errorf("%w: %s %q: %w", ErrRefused, restoring.AnnotationCheckpoint, value, err)
	}
	return f, filepath.Join(dir, rel), pageServer, nil
}

// CheckContainer refuses a checkpoint that is not of the container spec
// describes: the archive must be a CRI container's (nodeshim's or
// containerd's), of a container of the same name, from the same image.
func CheckContainer(meta archive.Meta, spec *specs.Spec) error {
	if meta.Engine != archive.EngineContainerd {
		return fmt.Errorf("%w: an archive of engine %q; only CRI containers' archives (nodeshim's, kubelet's on containerd) restore here", ErrUnsupported, meta.Engine)
	}
	want := spec.Annotations[annotationContainerName]
	// The CRI name: spec.dump's annotation, as both nodeshim and
	// containerd write it (containerd's config.dump has its own longer
	// name).
	got := meta.Annotations[annotationContainerName]
	if got == "" && meta.Status != nil {
		got = meta.Status.GetMetadata().GetName()
	}
	if got == "" {
		got = meta.Config.Name
	}
	if got != want {
		return fmt.Errorf("%w: the checkpoint is of container %q, this container is %q", ErrRefused, got, want)
	}
	img := spec.Annotations[annotationImageName]
	ckpt := meta.Config.RootfsImage
	if ckpt == "" && meta.Status != nil {
		ckpt = meta.Status.GetImage().GetImage()
	}
	if ckpt == "" {
		return fmt.Errorf("%w: the checkpoint names no image", ErrRefused)
	}
	if NormalizeImage(ckpt) != NormalizeImage(img) {
		return fmt.Errorf("%w: the checkpoint is of image %q, this container runs %q", ErrRefused, ckpt, img)
	}
	return nil
}

// NormalizeImage is ref as containerd names it in full: docker.io's
// library/ and a :latest tag added where the short form leaves them out.
func NormalizeImage(ref string) string {
	name, digest, _ := strings.Cut(ref, "@")
	first, _, hasSlash := strings.Cut(name, "/")
	if !hasSlash || !strings.ContainsAny(first, ".:") && first != "localhost" {
		if !hasSlash {
			name = "library/" + name
		}
		name = "docker.io/" + name
	}
	if digest == "" && !strings.Contains(path.Base(name), ":") {
		name += ":latest"
	}
	if digest != "" {
		return name + "@" + digest
	}
	return name
}

func hasCore(entries []archive.Entry) bool {
	for _, e := range entries {
		if isCore(e.Name) {
			return true
		}
	}
	return false
}

func isCore(name string) bool {
	b, ok := strings.CutPrefix(name, archive.ImagesDir+"/core-")
	return ok && strings.HasSuffix(b, ".img") && !strings.Contains(b, "/")
}

// gunzipRootfsDiff replaces a gzip-compressed rootfs-diff.tar in the
// unpacked images (containerd's CRI writes it so, kubelet's archives on
// containerd carry it so) by the tar it holds, at most max bytes
// (archive.DefaultMaxBytes when max <= 0), so that archive.ApplyRootfsDiff
// reads either.
func gunzipRootfsDiff(images string, max int64) error {
	if max <= 0 {
		max = archive.DefaultMaxBytes
	}
	root, err := os.OpenRoot(images)
	if err != nil {
		return fmt.Errorf("open %s: %w", images, err)
	}
	defer root.Close()
	f, err := archive.OpenMember(root, archive.RootfsDiffTar, 1<<62)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	var magic [2]byte
	if n, _ := io.ReadFull(f, magic[:]); n < 2 || magic != [2]byte{0x1f, 0x8b} {
		return nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("seek %s: %w", archive.RootfsDiffTar, err)
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", archive.ErrInvalid, archive.RootfsDiffTar, err)
	}
	tmp := archive.RootfsDiffTar + ".plain"
	out, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create %s in %s: %w", tmp, images, err)
	}
	n, err := io.Copy(out, io.LimitReader(zr, max+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > max {
		err = fmt.Errorf("%w: %s expands to more than %d bytes", archive.ErrTooLarge, archive.RootfsDiffTar, max)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("gunzip %s: %w", archive.RootfsDiffTar, err), root.Remove(tmp))
	}
	if err := root.Rename(tmp, archive.RootfsDiffTar); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return nil
}

// maxCoreImage bounds a core image as it is read.
const maxCoreImage = 16 << 20

// checkNode refuses images this node cannot restore: tasks of another
// machine type, or a dump by a newer CRIU than the one that restores
// (CRIU reads the images of its own and older versions).
func (r *Restore) checkNode(images string) error {
	root, err := os.OpenRoot(images)
	if err != nil {
		return fmt.Errorf("open %s: %w", images, err)
	}
	defer root.Close()
	ents, err := os.ReadDir(filepath.Join(images, archive.ImagesDir))
	if err != nil {
		return fmt.Errorf("read %s: %w", archive.ImagesDir, err)
	}
	for _, e := range ents {
		name := archive.ImagesDir + "/" + e.Name()
		if !isCore(name) {
			continue
		}
		f, err := archive.OpenMember(root, name, maxCoreImage)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		a, err := CoreArch(b)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if a != r.Arch {
			return fmt.Errorf("%w: %s is a task of machine %s; this node is %s", ErrRefused, name, a, r.Arch)
		}
	}
	local := ""
	if r.CriuVersion != nil {
		local = r.CriuVersion()
	}
	if local == "" {
		return nil
	}
	f, err := archive.OpenMember(root, archive.DumpLog, archive.MaxMetaSize)
	if err != nil {
		// kubelet's archives on containerd carry no dump.log.
		return nil
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("read %s: %w", archive.DumpLog, err)
	}
	dumped := DumpVersion(b)
	if dumped != "" && CompareVersions(dumped, local) > 0 {
		return fmt.Errorf("%w: CRIU %s dumped the checkpoint; this node's CRIU %s is older and may not read its images", ErrRefused, dumped, local)
	}
	return nil
}

var versionRE = regexp.MustCompile(`Version:\s+([0-9]+(?:\.[0-9]+){1,3})`)

// DumpVersion is the CRIU version a dump.log (or `criu --version`) names
// in its "Version: X.Y[.Z]" line; "" when there is none.
func DumpVersion(log []byte) string {
	if len(log) > 64<<10 {
		log = log[:64<<10]
	}
	m := versionRE.FindSubmatch(log)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// CompareVersions compares dotted numeric versions: -1, 0 or 1.
func CompareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) || i < len(bs); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
	}
	return 0
}

// globalArgs are the shim's global flags.
func (r *Restore) globalArgs() []string {
	return append([]string(nil), r.Call.Global...)
}

// runtimeEnv is env for the runtime's restore: with Config.Criu set, its
// directory first on PATH, where runc finds criu (runc 1.5 has no --criu
// flag, and fails a restore given one; runc 1.1 looks criu up on PATH
// without it); crun restores through libcriu and reads no PATH for it.
func (r *Restore) runtimeEnv(env []string) []string {
	if r.Config.Criu == "" {
		return env
	}
	dir := filepath.Dir(r.Config.Criu)
	out := make([]string, 0, len(env)+1)
	found := false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok && !found {
			found = true
			kv = "PATH=" + dir
			if v != "" {
				kv += string(os.PathListSeparator) + v
			}
		}
		out = append(out, kv)
	}
	if !found {
		out = append(out, "PATH="+dir+string(os.PathListSeparator)+"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	return out
}

// runtimeRestore runs `<runtime> restore --detach` of the bundle from the
// images. runc maps the dumped process's stdio pipes to its own stdio
// (descriptors.json, CRIU's inherit-fd), which are the shim's pipes, and
// the pod's namespaces named by path in the spec to the checkpoint's
// external ones (extRootNetNS, extRootPidNS).
func (r *Restore) runtimeRestore(images, work string, sup *lazySupervisor) error {
	lazy := sup != nil
	args := append(r.globalArgs(), "restore", "--detach", "--bundle", r.bundle(),
		"--image-path", filepath.Join(images, archive.ImagesDir), "--work-path", filepath.Join(work, "work"))
	if lazy {
		// CRIU's restore hands the memory's userfaultfds to the
		// lazy-pages daemon through lazy-pages.socket in its work
		// directory, where startLazyPages has it listen.
		args = append(args, "--lazy-pages")
	}
	if r.Call.PidFile != "" {
		args = append(args, "--pid-file", r.Call.PidFile)
	}
	if r.Call.NoPivot {
		args = append(args, "--no-pivot")
	}
	if r.Call.NoNewKeyring {
		args = append(args, "--no-new-keyring")
	}
	args = append(args, r.Call.ID)
	cmd := exec.Command(r.Runtime, args...)
	cmd.Env = r.runtimeEnv(os.Environ())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r.Stdin, r.Stdout, r.Stderr
	var err error
	if lazy {
		err = r.runLazy(cmd, sup)
	} else {
		err = cmd.Run()
	}
	if err != nil {
		msg := ""
		if b, rerr := os.ReadFile(filepath.Join(work, "work", archive.RestoreLog)); rerr == nil {
			msg = ": " + criuErrors(string(b))
		}
		return fmt.Errorf("%s restore %s: %w%s", filepath.Base(r.Runtime), r.Call.ID, err, msg)
	}
	return nil
}

// mark writes MarkerName into the runtime's state directory of the
// container.
func (r *Restore) mark(checkpoint string) error {
	b, err := json.Marshal(restoring.Marker{Checkpoint: checkpoint, RestoredAt: time.Now().UTC(), Pid: r.restoredPid()})
	if err != nil {
		return err
	}
	p := restoring.MarkerPath(r.Call.Root, r.Runtime, r.Call.ID)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", p, err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errors.Join(fmt.Errorf("write %s: %w", p, err), os.Remove(p))
	}
	return nil
}

// restoredPid is the pid the runtime wrote into the shim's pid file; 0
// when there is none.
func (r *Restore) restoredPid() int {
	if r.Call.PidFile == "" {
		return 0
	}
	b, err := os.ReadFile(r.Call.PidFile)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// criuErrors picks CRIU's error lines from a log, the last five.
func criuErrors(log string) string {
	var errs []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "Error (") && !strings.Contains(l, "RLIMIT_NOFILE") {
			errs = append(errs, strings.TrimSpace(l))
		}
	}
	if len(errs) > 5 {
		errs = errs[len(errs)-5:]
	}
	return strings.Join(errs, "; ")
}

// openOptions loads the trust policy and the identities the config
// names; none: plain archives open as before, an encrypted one is
// refused (seal.ErrNoIdentity).
func (r *Restore) openOptions() (seal.OpenOptions, error) {
	var o seal.OpenOptions
	if r.Config.TrustPolicy != "" {
		p, err := seal.LoadPolicy(r.Config.TrustPolicy)
		if err != nil {
			return o, fmt.Errorf("%w: trustPolicy: %w", restoring.ErrConfig, err)
		}
		o.Policy = p
	}
	if len(r.Config.Identities) > 0 {
		ids, err := seal.LoadIdentities(r.Config.Identities)
		if err != nil {
			return o, fmt.Errorf("%w: identities: %w", restoring.ErrConfig, err)
		}
		o.Identities = ids
	}
	return o, nil
}

// verifyManifest checks, under a trust policy, the signature of the pod
// checkpoint's manifest beside the archive at name, when the checkpoint
// named is a pod checkpoint: the manifest maps the pod's containers to
// their archives. A manifest that is gone by now is refused.
func (r *Restore) verifyManifest(name string, o seal.OpenOptions) error {
	v := r.Checkpoint
	if !filepath.IsAbs(v) {
		v = filepath.Join(r.Config.CheckpointDir, v)
	}
	// OpenCheckpoint names the archive itself unless the value named a
	// pod checkpoint's directory.
	if o.Policy == nil || filepath.Clean(v) == name {
		return nil
	}
	return verifyManifestFile(filepath.Join(filepath.Dir(name), pod.ManifestFile), o)
}

// verifyManifestFile verifies the pod checkpoint manifest at mp under
// o's trust policy; without a policy there is nothing to verify.
func verifyManifestFile(mp string, o seal.OpenOptions) error {
	if o.Policy == nil {
		return nil
	}
	mf, err := os.OpenFile(mp, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", mp, err)
	}
	defer mf.Close()
	_, err = seal.Open(mf, mp, seal.OpenOptions{Policy: o.Policy})
	return err
}
