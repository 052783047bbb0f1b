package seal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Config names a node's sealing keys as a configuration file or a command
// line gives them; Load reads them.
type Config struct {
	// Recipients are age recipient strings or recipients files; any
	// turns encryption on.
	Recipients []string
	// Identities are age identity files or directories of them.
	Identities []string
	// SigningKey is the node's ed25519 key file; set, archives are signed.
	SigningKey string
	// Node is the name to sign as; empty means the host name.
	Node string
	// TrustPolicy is the trust policy file; set, archives are verified.
	TrustPolicy string
}

// FieldNames are the names under which a Config's inputs were given
// ("checkpoint.encryption.recipients", "--recipient"), for errors.
type FieldNames struct {
	Recipients, Identities, SigningKey, Node, TrustPolicy string
}

// Check verifies c without reading a file: recipient strings parse, paths
// are absolute, the node name is a DNS subdomain. Errors name the field.
func (c Config) Check(n FieldNames) error {
	var errs []error
	for _, r := range c.Recipients {
		if strings.HasPrefix(strings.TrimSpace(r), "age1") {
			if _, err := ParseRecipients([]string{r}); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", n.Recipients, err))
			}
		} else if !filepath.IsAbs(r) {
			errs = append(errs, fmt.Errorf("%s: %q is neither an age recipient (age1...) nor an absolute path", n.Recipients, r))
		}
	}
	for _, f := range []struct {
		name  string
		paths []string
	}{{n.Identities, c.Identities}, {n.SigningKey, nonEmpty(c.SigningKey)}, {n.TrustPolicy, nonEmpty(c.TrustPolicy)}} {
		for _, p := range f.paths {
			if !filepath.IsAbs(p) {
				errs = append(errs, fmt.Errorf("%s: %q is not an absolute path", f.name, p))
			}
		}
	}
	if c.Node != "" && !nodeName.MatchString(c.Node) {
		errs = append(errs, fmt.Errorf("%s: %q is not a DNS subdomain", n.Node, c.Node))
	}
	return errors.Join(errs...)
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// Load reads the keys and the policy c names: the options to write
// archives with and those to open them with. Errors name the field.
func (c Config) Load(n FieldNames) (WriteOptions, OpenOptions, error) {
	var w WriteOptions
	var o OpenOptions
	if err := c.Check(n); err != nil {
		return w, o, err
	}
	var err error
	if len(c.Recipients) > 0 {
		if w.Recipients, err = ParseRecipients(c.Recipients); err != nil {
			return w, o, fmt.Errorf("%s: %w", n.Recipients, err)
		}
	}
	if len(c.Identities) > 0 {
		if o.Identities, err = LoadIdentities(c.Identities); err != nil {
			return w, o, fmt.Errorf("%s: %w", n.Identities, err)
		}
	}
	if c.SigningKey != "" {
		k, err := LoadSigningKey(c.SigningKey)
		if err != nil {
			return w, o, fmt.Errorf("%s: %w", n.SigningKey, err)
		}
		node := c.Node
		if node == "" {
			h, err := os.Hostname()
			if err != nil {
				return w, o, fmt.Errorf("%s: no node name and no host name: %w", n.Node, err)
			}
			node = strings.ToLower(h)
		}
		if !nodeName.MatchString(node) {
			return w, o, fmt.Errorf("%s: %q is not a DNS subdomain", n.Node, node)
		}
		w.Signer = &Signer{Node: node, Key: k}
	}
	if c.TrustPolicy != "" {
		if o.Policy, err = LoadPolicy(c.TrustPolicy); err != nil {
			return w, o, fmt.Errorf("%s: %w", n.TrustPolicy, err)
		}
	}
	return w, o, nil
}
