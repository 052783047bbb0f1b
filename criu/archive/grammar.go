package archive

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// The grammars every value taken from an archive is checked against before
// it becomes a name, an argument, an annotation or a path.

// maxNameLen bounds a name (a Kubernetes object name is at most 253).
const maxNameLen = 253

// CheckName checks v, the field what of member, against the name rules
// the runtimes share for containers, pods, namespaces and ids: 1 to 253
// ASCII letters, digits, '_', '.' and '-', starting with a letter or
// digit (podman's container names, libpod/define NameRegex; Kubernetes
// DNS labels and subdomains, CRI and containerd ids, and nodeshim's
// "pid-N" are all of this form). No such name starts with '-' or holds a
// '/', so none can become a flag or a path of more than one element.
func CheckName(member, what, v string) error {
	ok := len(v) > 0 && len(v) <= maxNameLen && alnum(v[0])
	for i := 1; ok && i < len(v); i++ {
		ok = alnum(v[i]) || v[i] == '_' || v[i] == '.' || v[i] == '-'
	}
	if !ok {
		return fmt.Errorf("%w: %s: %s %q is not a valid name", ErrInvalid, member, what, v)
	}
	return nil
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }

// referenceRE is the distribution reference grammar
// (github.com/distribution/reference, reference.go's comment):
//
//	reference := name [ ":" tag ] [ "@" digest ]
//	name      := [domain '/'] remote-name
//	domain    := host [':' port-number]
//	host      := domain-name | '[' IPv6address ']'
//	remote-name := path-component ['/' path-component]*
//	path-component := [a-z0-9]+ (separator [a-z0-9]+)*
//	separator := [_.] | '__' | '-'+
//	tag       := [\w][\w.-]{0,127}
//	digest    := algorithm ':' [0-9a-fA-F]{32,}
//
// A bare image id ("sha256:<hex>" or 64 hex digits), which config.dump
// carries as rootfsImageRef or rootfsImageID, is of this form too (name
// "sha256" with a tag; a name of hex digits).
var referenceRE = sync.OnceValue(func() *regexp.Regexp {
	const (
		alnum     = `[a-z0-9]+`
		separator = `(?:[._]|__|-+)`
		component = alnum + `(?:` + separator + alnum + `)*`
		domainCmp = `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
		host      = `(?:` + domainCmp + `(?:\.` + domainCmp + `)*|\[[a-fA-F0-9:]+\])`
		domain    = host + `(?::[0-9]+)?`
		name      = `(?:` + domain + `/)?` + component + `(?:/` + component + `)*`
		tag       = `[\w][\w.-]{0,127}`
		digest    = `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}`
	)
	return regexp.MustCompile(`^(` + name + `)(?::` + tag + `)?(?:@` + digest + `)?$`)
})

// maxRefNameLen is the distribution grammar's bound on a name.
const maxRefNameLen = 255

// CheckImageRef checks v, the field what of member, against the
// distribution reference grammar. A value starting with '-' is never
// valid, so a checked reference cannot be read as a flag.
func CheckImageRef(member, what, v string) error {
	m := referenceRE().FindStringSubmatch(v)
	if m == nil || len(m[1]) > maxRefNameLen {
		return fmt.Errorf("%w: %s: %s %q is not an image reference", ErrInvalid, member, what, v)
	}
	return nil
}

// Bounds on annotations, Kubernetes' own (apimachinery's
// ValidateAnnotations: 256 KiB in all; a qualified name's prefix is a DNS
// subdomain of at most 253 characters, its name at most 63).
const (
	maxAnnotationBytes = 256 << 10
	maxAnnotationKey   = 253 + 1 + 63
)

// CDIAnnotationPrefix starts the annotations through which a container
// asks for CDI devices (k8s.io/cri-api, tags.cncf.io/container-device-
// interface: "cdi.k8s.io/<name>" = "vendor/class=device,...").
const CDIAnnotationPrefix = "cdi.k8s.io/"

// CheckAnnotations checks the annotations of member: every key is an
// annotation key (letters, digits, '.', '_', '-' and '/', starting with a
// letter or digit, at most 317 bytes), the whole fits Kubernetes' 256 KiB,
// and a CDI annotation's value is a list of fully qualified CDI device
// names. It names the first offending key in sorted order.
func CheckAnnotations(member string, ann map[string]string) error {
	keys := make([]string, 0, len(ann))
	total := 0
	for k, v := range ann {
		keys = append(keys, k)
		total += len(k) + len(v)
	}
	if total > maxAnnotationBytes {
		return fmt.Errorf("%w: %s: annotations of %d bytes, more than %d", ErrInvalid, member, total, maxAnnotationBytes)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ok := len(k) > 0 && len(k) <= maxAnnotationKey && alnum(k[0])
		for i := 1; ok && i < len(k); i++ {
			ok = alnum(k[i]) || strings.IndexByte("._-/", k[i]) >= 0
		}
		if !ok {
			return fmt.Errorf("%w: %s: annotation key %q is not valid", ErrInvalid, member, k)
		}
		if strings.HasPrefix(k, CDIAnnotationPrefix) {
			if err := checkCDIDevices(ann[k]); err != nil {
				return fmt.Errorf("%w: %s: annotation %s: %w", ErrInvalid, member, k, err)
			}
		}
	}
	return nil
}

// checkCDIDevices checks a comma-separated list of qualified CDI device
// names, "vendor/class=name" (the CDI specification's parser.go: vendor
// and class start with a letter, end with a letter or digit and hold
// letters, digits, '_', '.' and '-'; a name starts and ends with a letter
// or digit and may also hold ':').
func checkCDIDevices(v string) error {
	if v == "" {
		return fmt.Errorf("empty CDI device list")
	}
	for _, dev := range strings.Split(v, ",") {
		kind, name, ok := strings.Cut(dev, "=")
		vendor, class, ok2 := strings.Cut(kind, "/")
		if !ok || !ok2 || !cdiPart(vendor, "_.-") || !cdiPart(class, "_.-") || !cdiName(name) {
			return fmt.Errorf("%q is not a qualified CDI device name", dev)
		}
	}
	return nil
}

func cdiPart(s, extra string) bool {
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') || !alnum(s[len(s)-1]) {
		return false
	}
	for i := range len(s) {
		if !alnum(s[i]) && strings.IndexByte(extra, s[i]) < 0 {
			return false
		}
	}
	return true
}

func cdiName(s string) bool {
	if s == "" || !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return false
	}
	for i := range len(s) {
		if !alnum(s[i]) && strings.IndexByte("_.:-", s[i]) < 0 {
			return false
		}
	}
	return true
}

// CheckRuntime checks a runtime's name as config.dump gives it ("runc",
// "io.containerd.runc.v2", "containerd/runc", "host", or podman's path of
// the binary, "/usr/sbin/runc"): letters, digits, '_', '.', ':', '/' and
// '-', starting with a letter, a digit or '/', without "..", at most 253.
func CheckRuntime(member, v string) error {
	ok := len(v) > 0 && len(v) <= maxNameLen && (alnum(v[0]) || v[0] == '/') && !strings.Contains(v, "..")
	for i := 1; ok && i < len(v); i++ {
		ok = alnum(v[i]) || strings.IndexByte("_.:/-", v[i]) >= 0
	}
	if !ok {
		return fmt.Errorf("%w: %s: runtime %q is not a valid name", ErrInvalid, member, v)
	}
	return nil
}

// Check checks every value of c that a restore or a checkpoint image
// passes on: the names (id, container, pod, namespace), the runtime and
// the image references. Empty values are allowed (not every runtime
// records each one); a consumer that needs one checks it is there.
func (c ContainerConfig) Check() error {
	for _, f := range []struct{ what, v string }{{"id", c.ID}, {"name", c.Name}, {"pod", c.Pod}, {"namespace", c.Namespace}} {
		if f.v != "" {
			if err := CheckName(ConfigDump, f.what, f.v); err != nil {
				return err
			}
		}
	}
	if c.OCIRuntime != "" {
		if err := CheckRuntime(ConfigDump, c.OCIRuntime); err != nil {
			return err
		}
	}
	for _, f := range []struct{ what, v string }{{"rootfsImageName", c.RootfsImage}, {"rootfsImageRef", c.RootfsImageRef}} {
		if f.v != "" {
			if err := CheckImageRef(ConfigDump, f.what, f.v); err != nil {
				return err
			}
		}
	}
	return nil
}
