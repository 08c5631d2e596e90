package clientip_test

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"

	"github.com/anvilproject/anvil/server/clientip"
	"github.com/anvilproject/anvil/server/config"
)

func cidrs(t *testing.T, ss ...string) []net.IPNet {
	var out []net.IPNet
	for _, s := range ss {
		_, n, err := net.ParseCIDR(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, *n)
	}
	return out
}

func TestResolve(t *testing.T) {
	r := clientip.New(cidrs(t, "10.0.0.0/8", "::1/128"))
	none := clientip.New(nil)
	cases := []struct {
		name string
		r    *clientip.Resolver
		peer string
		xff  []string
		want string
	}{
		{"no proxies trusted: the header is ignored", none, "198.51.100.7", []string{"203.0.113.1"}, "198.51.100.7"},
		{"untrusted peer: the header is ignored", r, "198.51.100.7", []string{"203.0.113.1"}, "198.51.100.7"},
		{"trusted proxy: the address it saw", r, "10.1.1.1", []string{"203.0.113.1"}, "203.0.113.1"},
		{"a client's forged entry left of the real one is skipped", r, "10.1.1.1", []string{"1.2.3.4, 203.0.113.1"}, "203.0.113.1"},
		{"chained trusted proxies", r, "10.1.1.1", []string{"203.0.113.1, 10.2.2.2", "10.3.3.3"}, "203.0.113.1"},
		{"malformed hop: the last trusted proxy", r, "10.1.1.1", []string{"203.0.113.1, garbage"}, "10.1.1.1"},
		{"no header from a trusted proxy", r, "10.1.1.1", nil, "10.1.1.1"},
		{"IPv6 loopback proxy", r, "::1", []string{"2001:db8::5"}, "2001:db8::5"},
		{"IPv4-mapped peer", r, "::ffff:10.1.1.1", []string{"203.0.113.9"}, "203.0.113.9"},
	}
	for _, c := range cases {
		got := c.r.Resolve(netip.MustParseAddr(c.peer), c.xff)
		if got.String() != c.want {
			t.Errorf("%s: got %s, want %s", c.name, got, c.want)
		}
	}
}

// TestTrustedProxiesSetting: the flag, ANVIL_TRUSTED_PROXIES and the file
// key trusted_proxies (a YAML list) all set the networks.
func TestTrustedProxiesSetting(t *testing.T) {
	parse := func(args []string, file string) []net.IPNet {
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		v := fs.IPNetSlice("trusted-proxies", nil, "")
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := config.Apply(fs, file); err != nil {
			t.Fatal(err)
		}
		return *v
	}
	if got := parse([]string{"--trusted-proxies", "10.0.0.0/8,192.168.1.1/32"}, ""); len(got) != 2 || got[1].String() != "192.168.1.1/32" {
		t.Errorf("flag: %v", got)
	}
	file := filepath.Join(t.TempDir(), "anvil.yaml")
	if err := os.WriteFile(file, []byte("trusted_proxies:\n  - 172.16.0.0/12\n  - fd00::/8\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := parse(nil, file); len(got) != 2 || got[0].String() != "172.16.0.0/12" {
		t.Errorf("file: %v", got)
	}
	t.Setenv("ANVIL_TRUSTED_PROXIES", "127.0.0.1/32")
	if got := parse(nil, file); len(got) != 1 || got[0].String() != "127.0.0.1/32" {
		t.Errorf("environment over file: %v", got)
	}
}
