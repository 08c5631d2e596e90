package egress_test

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anvilproject/anvil/server/egress"
)

// serveOn starts a server on addr (any of 127.0.0.0/8 is on lo on
// Linux) that counts the requests it gets.
func serveOn(t *testing.T, addr string, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	l, err := net.Listen("tcp", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h(w, r)
	}))
	s.Listener.Close()
	s.Listener = l
	s.Start()
	t.Cleanup(s.Close)
	return s, &n
}

func ok(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("image")) }

// TestClientRefusesBeforeConnecting: the default policy refuses a
// loopback server and the BMC networks, and an allow-list refuses a
// redirect out of it; each refusal names the flag and why, and the
// refused server sees no request at all.
func TestClientRefusesBeforeConnecting(t *testing.T) {
	loop, loopHits := serveOn(t, "127.0.0.1", ok)
	redir, redirHits := serveOn(t, "127.0.0.2", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, loop.URL+"/img", http.StatusFound)
	})
	two := netip.MustParsePrefix("127.0.0.2/32")
	bmcNet := egress.Network{Prefix: two, Flag: "--bmc-networks"}
	for _, c := range []struct {
		name      string
		p         egress.Policy
		url, why  string
		redirects int32
	}{
		{"loopback by default", egress.Policy{}, loop.URL + "/img", "loopback", 0},
		{"redirect out of the allow-list", egress.Policy{Allow: []netip.Prefix{two}}, redir.URL + "/img", "outside the networks", 1},
		{"BMC network by default", egress.Policy{Deny: []egress.Network{bmcNet}}, redir.URL + "/img", "--bmc-networks", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := redirHits.Load()
			resp, err := c.p.Client().Get(c.url)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("GET %s answered %s; want a refusal", c.url, resp.Status)
			}
			var r *egress.RefusedError
			if !errors.As(err, &r) || !strings.Contains(err.Error(), c.why) || !strings.Contains(err.Error(), egress.Flag) {
				t.Errorf("error %v, want a refusal naming %s and %q", err, egress.Flag, c.why)
			}
			if n := loopHits.Load(); n != 0 {
				t.Errorf("the loopback server saw %d requests", n)
			}
			if n := redirHits.Load() - before; n != c.redirects {
				t.Errorf("the redirecting server saw %d requests, want %d", n, c.redirects)
			}
		})
	}
	// The allow-list's own server is reached.
	fine, fineHits := serveOn(t, "127.0.0.2", ok)
	resp, err := (&egress.Policy{Allow: []netip.Prefix{two}}).Client().Get(fine.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || fineHits.Load() != 1 {
		t.Errorf("an allowed server: %s, %d requests", resp.Status, fineHits.Load())
	}
}

// TestCheck is the default deny list, and an allow-list that replaces it
// but for addresses that are never a destination.
func TestCheck(t *testing.T) {
	own := netip.MustParseAddr("198.51.100.7")
	def := egress.Policy{Own: []netip.Addr{own}, Deny: []egress.Network{{Prefix: netip.MustParsePrefix("10.9.0.0/16"), Flag: "--agent-networks"}}}
	allow := egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, Own: def.Own, Deny: def.Deny}
	for _, c := range []struct {
		addr            string
		def, allowWhole bool // allowed by each policy
	}{
		{"127.0.0.1", false, true},
		{"::1", false, false}, // IPv6: outside 0.0.0.0/0
		{"::ffff:127.0.0.1", false, true},
		{"169.254.169.254", false, true},
		{"fe80::1", false, false},
		{"0.0.0.0", false, false},
		{"224.0.0.1", false, false},
		{"10.9.3.4", false, true},
		{"198.51.100.7", false, true},
		{"203.0.113.5", true, true},
		{"2001:db8::5", true, false},
	} {
		a := netip.MustParseAddr(c.addr)
		if got := def.Check(a) == nil; got != c.def {
			t.Errorf("default policy, %s: allowed %v, want %v (%v)", a, got, c.def, def.Check(a))
		}
		if got := allow.Check(a) == nil; got != c.allowWhole {
			t.Errorf("allow 0.0.0.0/0, %s: allowed %v, want %v (%v)", a, got, c.allowWhole, allow.Check(a))
		}
	}
	// A project reads the class, not the address.
	err := def.Check(own).(*egress.RefusedError)
	if s := err.Summary(); strings.Contains(s, "198.51") || !strings.Contains(s, egress.Flag) {
		t.Errorf("summary %q", s)
	}
}
