// Package config layers Anvil's settings: command-line flags win over
// ANVIL_* environment variables, which win over the config file, which
// wins over the built-in defaults.
package config

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/anvilproject/anvil/server/store"
)

// EnvName is the environment variable for a flag: --policy-dir reads
// ANVIL_POLICY_DIR.
func EnvName(flag string) string {
	return "ANVIL_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// FileKey is the config-file key for a flag: --policy-override-enabled is
// policy_override_enabled.
func FileKey(flag string) string { return strings.ReplaceAll(flag, "-", "_") }

// Apply fills every flag the command line did not set from the
// environment, then from the YAML file at path (if any). Unknown keys in
// the file are an error naming them, so a typo does not silently fall back
// to a default.
func Apply(fs *pflag.FlagSet, path string) error {
	return ApplyShared(fs, path, nil)
}

// DefaultFile is the config file every anvil command reads when neither
// --config nor ANVIL_CONFIG names one and it exists: the packaged
// location, so that an operator's `anvil user create` on a packaged host
// finds the database serve uses.
const DefaultFile = "/etc/anvil/anvil.yaml"

// File is the config file a command reads: the --config flag or
// ANVIL_CONFIG if given (""), else def when it exists.
func File(given, def string) string {
	if given != "" {
		return given
	}
	if _, err := os.Stat(def); err == nil {
		return def
	}
	return ""
}

// ApplyShared is Apply for a command that reads a file written for
// another (serve's settings, read by the operator commands): a key that
// shared knows and fs does not is skipped rather than refused.
func ApplyShared(fs *pflag.FlagSet, path string, shared *pflag.FlagSet) error {
	file := map[string]any{}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("config file: %w", err)
		}
		if err := yaml.Unmarshal(b, &file); err != nil {
			return fmt.Errorf("config file %s: %w", path, err)
		}
		for k := range file {
			name := strings.ReplaceAll(k, "_", "-")
			if fs.Lookup(name) == nil && (shared == nil || shared.Lookup(name) == nil) {
				return fmt.Errorf("config file %s: unknown setting %q", path, k)
			}
		}
	}
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "config" || f.Name == "help" {
			return
		}
		if v, ok := os.LookupEnv(EnvName(f.Name)); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s: %w", EnvName(f.Name), e)
			}
			return
		}
		if v, ok := file[FileKey(f.Name)]; ok {
			s := fmt.Sprint(v)
			if list, isList := v.([]any); isList {
				parts := make([]string, len(list))
				for i, x := range list {
					parts[i] = fmt.Sprint(x)
				}
				s = strings.Join(parts, ",")
			}
			if e := fs.Set(f.Name, s); e != nil {
				err = fmt.Errorf("config file %s: %s: %w", path, FileKey(f.Name), e)
			}
		}
	})
	return err
}

// PublicURL is the scheme:// address of a listener as other machines
// reach it, for URLs Anvil hands to BMCs and agents: a wildcard listen address (":6385",
// "0.0.0.0:6385") names this host by its host name instead.
func PublicURL(scheme, listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", listen, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if host, err = os.Hostname(); err != nil {
			return "", fmt.Errorf("host name for the public URL: %w", err)
		}
	}
	return scheme + "://" + net.JoinHostPort(host, port), nil
}

// BesideDatabase is where a directory of serve's state named name lives
// unless configured: beside a SQLite database file, else name in the
// working directory (PostgreSQL has no file to sit beside).
func BesideDatabase(database, name string) string {
	if f, ok := store.SQLiteFile(database); ok {
		return filepath.Join(filepath.Dir(f), name)
	}
	return name
}

// FirmwareDir is where uploaded firmware images live unless configured.
func FirmwareDir(database string) string { return BesideDatabase(database, "firmware") }

// BootISODir is where the agent ISOs the conductor builds live unless
// configured.
func BootISODir(database string) string { return BesideDatabase(database, "boot-iso") }

// ImageCacheDir is where images downloaded for image_download_source=local
// live unless configured.
func ImageCacheDir(database string) string { return BesideDatabase(database, "image-cache") }

// AgentLogDir is where the ramdisk agent's logs of failed runs are kept
// unless configured.
func AgentLogDir(database string) string { return BesideDatabase(database, "agent-logs") }

// ACMECacheDir keeps the ACME account key and certificates unless
// configured.
func ACMECacheDir(database string) string { return BesideDatabase(database, "acme") }
