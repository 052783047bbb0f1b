// Package config is nodeshim's own configuration: the ShimConfiguration
// document and its drop-in directory, merged with kubelet's --config-dir
// semantics, and the lifecycle that keeps a configuration delivered at run
// time safe (assigned, active and last-known-good snapshots on disk, a
// soak period, rollback on a bad configuration), reported as a
// NodeConfigStatus.
package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/eviction"
	"github.com/nodeshim/nodeshim/shim/profiles/ociprofile"
)

// APIVersion and Kind identify a ShimConfiguration document.
const (
	APIVersion = "nodeshim.io/v1alpha1"
	Kind       = "ShimConfiguration"
)

// DefaultSoakPeriod is how long an assigned configuration must stay active
// before it becomes the last-known-good one.
const DefaultSoakPeriod = 10 * time.Minute

// ShimConfiguration is the configuration of nodeshim serve, in the style of
// KubeletConfiguration.
type ShimConfiguration struct {
	metav1.TypeMeta `json:",inline"`

	// RootDir holds nodeshim's state: config snapshots, the API socket.
	// It is a start-up setting (serve's --root-dir): a payload may restate
	// it, and one that names another directory is refused, since the
	// configuration's own state lives there.
	RootDir string `json:"rootDir,omitempty"`
	// KubeletRootDir is kubelet's --root-dir; plugins_registry lives under it.
	KubeletRootDir string `json:"kubeletRootDir,omitempty"`
	// LockFile is the single-instance lock. Like RootDir it is a start-up
	// setting (serve's --lock-file), restated or refused.
	LockFile string `json:"lockFile,omitempty"`
	// ConfigSoakPeriod is how long this configuration must stay active
	// after it is assigned before it becomes last-known-good (serve's
	// --config-soak-period overrides it).
	ConfigSoakPeriod metav1.Duration `json:"configSoakPeriod,omitzero"`
	// ContainerRuntimeEndpoint is the node's CRI runtime socket (kubelet's
	// containerRuntimeEndpoint), through which POST /checkpoint resolves a
	// container to its process.
	ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint,omitempty"`
	// FeatureGates switches optional behaviour on or off by name; a gate
	// that is not in KnownFeatureGates is refused, as kubelet refuses an
	// unrecognized gate.
	FeatureGates map[string]bool `json:"featureGates,omitempty"`
	// Kubelet names the node's kubelet configuration, whose eviction
	// thresholds, seccompDefault and containerRuntimeEndpoint nodeshim
	// then follows.
	Kubelet Kubelet `json:"kubelet,omitzero"`
	// Pressure configures the pressure conditions.
	Pressure Pressure `json:"pressure,omitzero"`
	// API configures the node API.
	API API `json:"api,omitzero"`
	// Checkpoint configures container checkpoints.
	Checkpoint Checkpoints `json:"checkpoint,omitzero"`
	// Plugins configures the plugin registry watcher.
	Plugins Plugins `json:"plugins,omitzero"`
	// Network configures the NetworkReady condition.
	Network Network `json:"network,omitzero"`
	// SeccompProfiles are the Localhost seccomp profiles nodeshim installs
	// under the kubelet's seccomp root (<kubeletRootDir>/seccomp): each key
	// is a profile's name as pods reference it in localhostProfile (e.g.
	// "nodeshim/audit.json"), each value the profile's JSON. The files of
	// the source's seccompProfiles/ directory are added to it by Load.
	SeccompProfiles map[string]string `json:"seccompProfiles,omitempty"`
	// SeccompComplain names profiles of SeccompProfiles to install in
	// complain mode: what they would deny is allowed and logged, and
	// nodeshim counts it per container (GET /status seccompComplaints).
	SeccompComplain []string `json:"seccompComplain,omitempty"`
	// SeccompRegistry configures profiles read from OCI registries: a
	// value of SeccompProfiles that is an oci:// reference, or a
	// baseProfileName that is one, is installed only when a cosign
	// signature of its manifest verifies under one of its PublicKeys.
	SeccompRegistry SeccompRegistry `json:"seccompRegistry,omitzero"`
}

// SeccompRegistry configures where oci:// seccomp profiles may come from
// (shim/profiles/ociprofile).
type SeccompRegistry struct {
	// PublicKeys are the trusted keys, each a PEM public key (cosign's
	// cosign.pub: ECDSA P-256). Without any, oci:// profiles are refused.
	PublicKeys []string `json:"publicKeys,omitempty"`
	// PlainHTTP lists registries (host:port, as in the references) on a
	// loopback address that are reached over plain HTTP; every other
	// registry is reached over HTTPS.
	PlainHTTP []string `json:"plainHTTP,omitempty"`
}

// API configures the node API listeners.
type API struct {
	// TCPAddress, when set, serves the API over TLS on host:port too.
	TCPAddress string `json:"tcpAddress,omitempty"`
	// TLSCertFile and TLSKeyFile are the TCP listener's certificate.
	TLSCertFile string `json:"tlsCertFile,omitempty"`
	TLSKeyFile  string `json:"tlsKeyFile,omitempty"`
	// ClientCAFile enables client-certificate authentication on TCP.
	ClientCAFile string `json:"clientCAFile,omitempty"`
	// TokenFile holds the bearer token accepted on TCP.
	TokenFile string `json:"tokenFile,omitempty"`
	// ReadOnlyUIDs and ReadOnlyGIDs name peers of the unix socket (by the
	// uid or gid SO_PEERCRED reports) that may read the status endpoints
	// (GET /status, /report, /healthz, /readyz, /metrics) and nothing
	// else: the reporter's identity. Root always has full access.
	ReadOnlyUIDs []uint32 `json:"readOnlyUIDs,omitempty"`
	ReadOnlyGIDs []uint32 `json:"readOnlyGIDs,omitempty"`
	// PodCheckpointUIDs are readers (each must be in ReadOnlyUIDs) that
	// may also ask for pod checkpoints and remove checkpoints (POST
	// /checkpoint/{namespace}/{pod}, DELETE /checkpoints/{name}): the
	// reporter, which serves the cluster's PodCheckpoint objects.
	PodCheckpointUIDs []uint32 `json:"podCheckpointUIDs,omitempty"`
	// Limits bounds what the API's peers can hold; an unset field keeps
	// its default (docs/security.md lists them).
	Limits APILimits `json:"limits,omitempty"`
}

// APILimits bounds what the peers of the node API can hold of nodeshim
// serve: time-outs on every listener, connections per local uid on the
// unix socket, connections per remote address on the TLS listener.
type APILimits struct {
	// ReadHeaderTimeout bounds the reading of a request's headers (and a
	// TLS handshake).
	ReadHeaderTimeout metav1.Duration `json:"readHeaderTimeout,omitempty"`
	// ReadTimeout bounds the reading of a whole request.
	ReadTimeout metav1.Duration `json:"readTimeout,omitempty"`
	// IdleTimeout closes a keep-alive connection that sends no request.
	IdleTimeout metav1.Duration `json:"idleTimeout,omitempty"`
	// ConnsPerPeer bounds the unix socket connections of one uid that is
	// neither root nor a reader; ConnsOthers those of all such uids.
	ConnsPerPeer int32 `json:"connsPerPeer,omitempty"`
	ConnsOthers  int32 `json:"connsOthers,omitempty"`
	// ConnsPerReader bounds the unix socket connections of one reader.
	ConnsPerReader int32 `json:"connsPerReader,omitempty"`
	// ConnsPerAddress bounds the TLS listener's connections from one
	// remote IP address; ConnsTCP those of all addresses together.
	ConnsPerAddress int32 `json:"connsPerAddress,omitempty"`
	ConnsTCP        int32 `json:"connsTCP,omitempty"`
}

// Checkpoints configures container checkpoints (CRIU dumps taken through
// POST /checkpoint).
type Checkpoints struct {
	// Enabled turns POST /checkpoint on; off, it answers 404 as kubelet does.
	Enabled bool `json:"enabled,omitempty"`
	// Dir receives the checkpoint archives.
	Dir string `json:"dir,omitempty"`
	// DefaultTimeout bounds a checkpoint without ?timeout.
	DefaultTimeout metav1.Duration `json:"defaultTimeout,omitzero"`
	// Retention bounds the archives kept in Dir; the oldest go first.
	Retention CheckpointRetention `json:"retention,omitzero"`
	// Encryption encrypts archives at rest (age) and decrypts them for
	// restore; off by default: kubelet's archives are plain tars.
	Encryption CheckpointEncryption `json:"encryption,omitzero"`
	// Signing signs every archive this node writes.
	Signing CheckpointSigning `json:"signing,omitzero"`
	// TrustPolicy is the trust policy file (docs/security.md) that the
	// signatures of archives restored here must satisfy; unset, no
	// signature is checked.
	TrustPolicy string `json:"trustPolicy,omitempty"`
	// Transfer, when enabled, stores the pod checkpoints other nodes'
	// shims send (PUT /transfers/{name} on the TLS listener, client
	// certificates only; docs/migration.md).
	Transfer CheckpointTransfer `json:"transfer,omitzero"`
	// PreDumpRounds is the number of rounds of CRIU pre-dump (iterative
	// pre-copy) run before each container checkpoint while the container
	// runs on, so that the final dump freezes it only to write what
	// changed; 0 (the default) runs none, at most MaxPreDumpRounds. On a
	// node whose kernel does not track dirty memory the checkpoint runs
	// without them, and its record says why.
	PreDumpRounds int32 `json:"preDumpRounds,omitempty"`
}

// MaxPreDumpRounds bounds checkpoint.preDumpRounds: criu.MaxPreDump,
// which the configuration does not import (shim/checkpoint's tests hold
// the two equal).
const MaxPreDumpRounds = 8

// CheckpointEncryption configures the encryption of checkpoint archives.
type CheckpointEncryption struct {
	// Recipients are age recipients (age1...) or absolute paths of
	// recipients files: the nodes that can decrypt this node's archives.
	// Any turns encryption on.
	Recipients []string `json:"recipients,omitempty"`
	// Identities are absolute paths of age identity files, or of
	// directories of them (a mounted Secret); every one is tried, so old
	// keys kept there still decrypt old archives.
	Identities []string `json:"identities,omitempty"`
}

// CheckpointSigning configures the signing of checkpoint archives.
type CheckpointSigning struct {
	// KeyFile is the absolute path of the node's ed25519 private key
	// (PEM PKCS #8); set, every archive gets a signature file.
	KeyFile string `json:"keyFile,omitempty"`
	// NodeName is the name signatures record; empty means the host name.
	NodeName string `json:"nodeName,omitempty"`
}

// SealConfig returns the key files of c's encryption, signing and trust
// policy, for package seal.
func (c Checkpoints) SealConfig() seal.Config {
	return seal.Config{Recipients: c.Encryption.Recipients, Identities: c.Encryption.Identities,
		SigningKey: c.Signing.KeyFile, Node: c.Signing.NodeName, TrustPolicy: c.TrustPolicy}
}

// SealFieldNames name SealConfig's inputs in errors.
var SealFieldNames = seal.FieldNames{Recipients: "checkpoint.encryption.recipients", Identities: "checkpoint.encryption.identities",
	SigningKey: "checkpoint.signing.keyFile", Node: "checkpoint.signing.nodeName", TrustPolicy: "checkpoint.trustPolicy"}

// CheckpointTransfer configures the receiving of pod checkpoints from
// other nodes' shims.
type CheckpointTransfer struct {
	// Enabled serves PUT /transfers/{name}; it needs api.tcpAddress with
	// api.clientCAFile (the senders' node certificates), the trust policy
	// (the senders' keys) and this node's age identities.
	Enabled bool `json:"enabled,omitempty"`
	// Send lets root and the reporter (api.podCheckpointUIDs) have this
	// node send its pod checkpoints to other nodes' shims (POST
	// /transfers/{name}/send), with its certificate (api.tlsCertFile and
	// api.tlsKeyFile; receivers verified against api.clientCAFile), its
	// signing key, and only to checkpoint.encryption.recipients.
	Send bool `json:"send,omitempty"`
	// MaxBytes bounds one transfer (e.g. "16Gi", the default).
	MaxBytes *resource.Quantity `json:"maxBytes,omitempty"`
	// MinFreeBytes is the room the checkpoint directory's filesystem
	// keeps: a transfer that would leave less is refused before a byte is
	// written.
	MinFreeBytes *resource.Quantity `json:"minFreeBytes,omitempty"`
}

// CheckpointRetention bounds the checkpoint archives nodeshim keeps. It is
// applied at start, after every checkpoint and by `nodeshim checkpoint
// prune`; an archive being written, restored or turned into an image is
// never removed.
type CheckpointRetention struct {
	// MaxPerContainer is how many archives of one namespace/pod/container
	// are kept (default 10); a negative value keeps every one.
	MaxPerContainer int32 `json:"maxPerContainer,omitempty"`
	// MaxBytes bounds the archives' total size (e.g. "50Gi"); unset, zero
	// or negative is no bound. A checkpoint that would not fit in it after
	// pruning is refused before the container is frozen.
	MaxBytes *resource.Quantity `json:"maxBytes,omitempty"`
	// MaxAge removes archives older than this; zero keeps them.
	MaxAge metav1.Duration `json:"maxAge,omitzero"`
}

// Plugins configures the plugin registry watcher.
type Plugins struct {
	// AcceptedVersions lists, per plugin type (CSIPlugin, DevicePlugin,
	// DRAPlugin), the versions this node's kubelet accepts.
	AcceptedVersions map[string][]string `json:"acceptedVersions,omitempty"`
	// Expected names drivers that should register; their absence is reported.
	Expected []string `json:"expected,omitempty"`
}

// Kubelet locates the node's KubeletConfiguration, read with the
// drop-in rules kubelet itself applies (--config, then --config-dir).
type Kubelet struct {
	// ConfigFile is kubelet's --config file; empty when nodeshim does not
	// follow the kubelet's configuration.
	ConfigFile string `json:"configFile,omitempty"`
	// ConfigDir is kubelet's --config-dir drop-in directory, if any.
	ConfigDir string `json:"configDir,omitempty"`
}

// Pressure configures the pressure conditions.
type Pressure struct {
	// EvictionHard are the thresholds of MemoryPressure, DiskPressure and
	// PIDPressure, in KubeletConfiguration's evictionHard form (signal ->
	// quantity or percentage). When empty, the kubelet's own thresholds
	// are used (kubelet.configFile), else kubelet's defaults.
	EvictionHard map[string]string `json:"evictionHard,omitempty"`
}

// KnownFeatureGates returns the feature gates nodeshim understands, with
// their defaults. There are none yet: nodeshim has no optional behaviour,
// so every gate a configuration names is refused rather than ignored.
func KnownFeatureGates() map[string]bool { return map[string]bool{} }

// Network configures the NetworkReady condition.
type Network struct {
	// CNIConfDir is where CNI network configurations are expected.
	CNIConfDir string `json:"cniConfDir,omitempty"`
}

// Defaults returns the local default configuration, used when no source is
// assigned and none has been good before.
func Defaults() ShimConfiguration {
	return ShimConfiguration{
		TypeMeta:                 metav1.TypeMeta{APIVersion: APIVersion, Kind: Kind},
		RootDir:                  "/var/lib/nodeshim",
		KubeletRootDir:           "/var/lib/kubelet",
		LockFile:                 "/var/run/nodeshim.lock",
		ContainerRuntimeEndpoint: "unix:///run/containerd/containerd.sock",
		ConfigSoakPeriod:         metav1.Duration{Duration: DefaultSoakPeriod},
		Checkpoint: Checkpoints{
			Dir:            "/var/lib/nodeshim/checkpoints",
			DefaultTimeout: metav1.Duration{Duration: time.Minute},
			Retention:      CheckpointRetention{MaxPerContainer: 10},
		},
		Plugins: Plugins{
			AcceptedVersions: map[string][]string{
				"CSIPlugin":    {"1.0.0"},
				"DevicePlugin": {"v1beta1"},
				"DRAPlugin":    {"v1.DRAPlugin", "v1beta1.DRAPlugin"},
			},
		},
		Network: Network{CNIConfDir: "/etc/cni/net.d"},
	}
}

// ValidationError lists everything wrong with a configuration.
type ValidationError struct {
	Problems []string
}

// Error lists every problem in one message.
func (e *ValidationError) Error() string {
	return fmt.Sprintf("invalid %s: %s", Kind, joinProblems(e.Problems))
}

func joinProblems(p []string) string {
	s := ""
	for i, x := range p {
		if i > 0 {
			s += "; "
		}
		s += x
	}
	return s
}

// Validate checks c and returns a *ValidationError naming every problem.
func (c *ShimConfiguration) Validate() error {
	var p []string
	if c.APIVersion != APIVersion {
		p = append(p, fmt.Sprintf("apiVersion %q, want %q", c.APIVersion, APIVersion))
	}
	if c.Kind != Kind {
		p = append(p, fmt.Sprintf("kind %q, want %q", c.Kind, Kind))
	}
	for _, f := range []struct{ name, v string }{
		{"rootDir", c.RootDir}, {"kubeletRootDir", c.KubeletRootDir}, {"lockFile", c.LockFile},
		{"checkpoint.dir", c.Checkpoint.Dir}, {"network.cniConfDir", c.Network.CNIConfDir},
	} {
		if f.v == "" || !filepath.IsAbs(f.v) {
			p = append(p, fmt.Sprintf("%s %q is not an absolute path", f.name, f.v))
		}
	}
	for _, f := range []struct{ name, v string }{
		{"kubelet.configFile", c.Kubelet.ConfigFile}, {"kubelet.configDir", c.Kubelet.ConfigDir},
	} {
		if f.v != "" && !filepath.IsAbs(f.v) {
			p = append(p, fmt.Sprintf("%s %q is not an absolute path", f.name, f.v))
		}
	}
	if c.Kubelet.ConfigDir != "" && c.Kubelet.ConfigFile == "" {
		p = append(p, "kubelet.configDir needs kubelet.configFile")
	}
	if len(c.Pressure.EvictionHard) > 0 {
		if _, err := eviction.ParseThresholds(EvictionString(c.Pressure.EvictionHard)); err != nil {
			p = append(p, fmt.Sprintf("pressure.evictionHard: %v", err))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.FeatureGates)) {
		if _, ok := KnownFeatureGates()[name]; !ok {
			p = append(p, fmt.Sprintf("featureGates: unrecognized feature gate %q", name))
		}
	}
	if c.ConfigSoakPeriod.Duration < 0 {
		p = append(p, fmt.Sprintf("configSoakPeriod %v is negative", c.ConfigSoakPeriod.Duration))
	}
	if c.Checkpoint.Enabled && c.ContainerRuntimeEndpoint == "" {
		p = append(p, "checkpoint.enabled needs containerRuntimeEndpoint")
	}
	if c.Checkpoint.DefaultTimeout.Duration <= 0 {
		p = append(p, fmt.Sprintf("checkpoint.defaultTimeout %v is not positive", c.Checkpoint.DefaultTimeout.Duration))
	}
	if r := c.Checkpoint.PreDumpRounds; r < 0 || r > MaxPreDumpRounds {
		p = append(p, fmt.Sprintf("checkpoint.preDumpRounds %d: want 0 to %d", r, MaxPreDumpRounds))
	}
	if c.Checkpoint.Retention.MaxAge.Duration < 0 {
		p = append(p, fmt.Sprintf("checkpoint.retention.maxAge %v is negative", c.Checkpoint.Retention.MaxAge.Duration))
	}
	if err := c.Checkpoint.SealConfig().Check(SealFieldNames); err != nil {
		p = append(p, strings.Split(err.Error(), "\n")...)
	}
	if t := c.Checkpoint.Transfer; t.Send {
		switch {
		case c.API.TLSCertFile == "" || c.API.TLSKeyFile == "" || c.API.ClientCAFile == "":
			p = append(p, "checkpoint.transfer.send needs api.tlsCertFile, api.tlsKeyFile and api.clientCAFile: the node's certificate, and the CA of the receivers'")
		case c.Checkpoint.Signing.KeyFile == "" || len(c.Checkpoint.Encryption.Recipients) == 0:
			p = append(p, "checkpoint.transfer.send needs checkpoint.signing.keyFile and checkpoint.encryption.recipients: a transfer is signed by this node and encrypted to a configured recipient")
		}
	}
	if t := c.Checkpoint.Transfer; t.Enabled {
		switch {
		case c.API.TCPAddress == "" || c.API.ClientCAFile == "":
			p = append(p, "checkpoint.transfer.enabled needs api.tcpAddress and api.clientCAFile: senders are nodes with certificates")
		case c.Checkpoint.TrustPolicy == "" || len(c.Checkpoint.Encryption.Identities) == 0:
			p = append(p, "checkpoint.transfer.enabled needs checkpoint.trustPolicy and checkpoint.encryption.identities: a transfer is signed by a trusted node and encrypted to this one")
		case c.Checkpoint.Dir == "":
			p = append(p, "checkpoint.transfer.enabled needs checkpoint.dir")
		}
		for _, q := range []struct {
			name string
			v    *resource.Quantity
		}{{"maxBytes", t.MaxBytes}, {"minFreeBytes", t.MinFreeBytes}} {
			if q.v != nil && q.v.Sign() < 0 {
				p = append(p, fmt.Sprintf("checkpoint.transfer.%s %s is negative", q.name, q.v.String()))
			}
		}
	}
	if c.API.TCPAddress != "" {
		if c.API.TLSCertFile == "" || c.API.TLSKeyFile == "" {
			p = append(p, "api.tcpAddress needs api.tlsCertFile and api.tlsKeyFile")
		}
		if c.API.TokenFile == "" && c.API.ClientCAFile == "" {
			p = append(p, "api.tcpAddress needs api.tokenFile or api.clientCAFile")
		}
	}
	for _, uid := range c.API.PodCheckpointUIDs {
		if !slices.Contains(c.API.ReadOnlyUIDs, uid) {
			p = append(p, fmt.Sprintf("api.podCheckpointUIDs: uid %d is not in api.readOnlyUIDs", uid))
		}
		if uid == 0 {
			p = append(p, "api.podCheckpointUIDs: uid 0 has full access already")
		}
	}
	l := c.API.Limits
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"readHeaderTimeout", l.ReadHeaderTimeout.Duration}, {"readTimeout", l.ReadTimeout.Duration}, {"idleTimeout", l.IdleTimeout.Duration},
	} {
		if f.v < 0 {
			p = append(p, fmt.Sprintf("api.limits.%s %v is negative", f.name, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    int32
	}{
		{"connsPerPeer", l.ConnsPerPeer}, {"connsOthers", l.ConnsOthers}, {"connsPerReader", l.ConnsPerReader},
		{"connsPerAddress", l.ConnsPerAddress}, {"connsTCP", l.ConnsTCP},
	} {
		if f.v < 0 {
			p = append(p, fmt.Sprintf("api.limits.%s %d is negative", f.name, f.v))
		}
	}
	p = append(p, c.checkSeccompRegistry()...)
	for typ, vs := range c.Plugins.AcceptedVersions {
		switch typ {
		case "CSIPlugin", "DevicePlugin", "DRAPlugin":
		default:
			p = append(p, fmt.Sprintf("plugins.acceptedVersions: unknown plugin type %q", typ))
		}
		if len(vs) == 0 {
			p = append(p, fmt.Sprintf("plugins.acceptedVersions[%s] is empty", typ))
		}
	}
	if len(p) > 0 {
		return &ValidationError{Problems: p}
	}
	return nil
}

// checkSeccompRegistry checks the trusted keys and plain-HTTP registries,
// and that an oci:// profile has a key to be verified with.
func (c *ShimConfiguration) checkSeccompRegistry() []string {
	var p []string
	r := c.SeccompRegistry
	for i, k := range r.PublicKeys {
		if _, err := ociprofile.ParsePublicKey([]byte(k)); err != nil {
			p = append(p, fmt.Sprintf("seccompRegistry.publicKeys[%d]: %v", i, err))
		}
	}
	for _, h := range r.PlainHTTP {
		host, _, err := net.SplitHostPort(h)
		ip := net.ParseIP(host)
		if err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
			p = append(p, fmt.Sprintf("seccompRegistry.plainHTTP: %q is not host:port on a loopback address; other registries are reached over HTTPS", h))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.SeccompProfiles)) {
		v := c.SeccompProfiles[name]
		if !ociprofile.IsReference(v) {
			continue
		}
		if _, err := ociprofile.ParseReference(v); err != nil {
			p = append(p, fmt.Sprintf("seccompProfiles[%s]: %v", name, err))
		} else if len(r.PublicKeys) == 0 {
			p = append(p, fmt.Sprintf("seccompProfiles[%s] is an oci:// reference, which needs seccompRegistry.publicKeys to verify it", name))
		}
	}
	return p
}

// ErrNoBase is returned when a configuration payload has no base document.
var ErrNoBase = errors.New("no base configuration file")

// ErrEmptyBase is returned, wrapped with the file's name, when the base
// document of a payload is empty or holds only whitespace or comments (a
// truncated write): it is refused like a missing one, never read as the
// defaults.
var ErrEmptyBase = errors.New("empty configuration file (only whitespace or comments): refused; it must at least say apiVersion nodeshim.io/v1alpha1 and kind ShimConfiguration")
