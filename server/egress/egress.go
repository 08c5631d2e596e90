// Package egress guards the connections Anvil makes to URLs that
// someone other than the operator named: an image_source a lessee set,
// a deploy_kernel in driver_info. Anvil fetches them from the
// conductor's own networks, so without a guard such a URL reaches
// loopback, a cloud's metadata service, the BMCs or the agents, and
// whatever answers is read back through checksums, errors and history.
//
// The check runs in the dialer, on the address actually connected to:
// a name's DNS answer and every redirect hop open connections of their
// own, so each is checked, and a refusal comes before any byte is sent.
package egress

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// Flag is the serve flag that lists where tenants' URLs may lead;
// every refusal names it, so an operator knows what to change.
const Flag = "--image-source-networks"

// Network is a network the default refuses, with the flag that declares
// it, for messages.
type Network struct {
	Prefix netip.Prefix
	Flag   string
}

// Policy decides which addresses Anvil may connect to for a tenant. The
// zero Policy refuses loopback, link-local, unspecified and multicast
// addresses and allows the rest.
type Policy struct {
	// Allow, when set, is every network such a URL may lead to: the
	// operator's image servers, named on purpose, so nothing else is
	// refused but addresses that are never a destination.
	Allow []netip.Prefix
	// Without Allow, every address is allowed but loopback, link-local
	// (169.254.0.0/16, where cloud metadata services answer, and
	// fe80::/10), Deny (the BMC and agent networks, whose answers are
	// the most valuable to read back) and Own (services listening on a
	// wildcard address answer on each of the server's addresses).
	Deny []Network
	Own  []netip.Addr
}

// RefusedError is a connection the policy refused before it was made.
type RefusedError struct {
	Addr netip.Addr
	// Why is Anvil's own wording of the address's class ("a loopback
	// address", "in the networks of --bmc-networks"), never text from
	// the other end.
	Why string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s is %s, where Anvil fetches nothing for a tenant (%s)", e.Addr, e.Why, Flag)
}

// Summary is the refusal without the address: a project caller learns
// the class of what its URL led to, as DNS would tell it, but not the
// address an internal name has.
func (e *RefusedError) Summary() string {
	return fmt.Sprintf("its address is %s, where Anvil fetches nothing for a tenant (%s)", e.Why, Flag)
}

// Check says why a is refused, or nil.
func (p *Policy) Check(a netip.Addr) error {
	a = a.Unmap()
	// Never a destination, whatever an allow-list's width takes in.
	if a.IsUnspecified() || a.IsMulticast() || !a.IsValid() {
		return &RefusedError{Addr: a, Why: "not a unicast address"}
	}
	if len(p.Allow) > 0 {
		for _, n := range p.Allow {
			if n.Contains(a) {
				return nil
			}
		}
		return &RefusedError{Addr: a, Why: "outside the networks images may come from"}
	}
	for _, n := range p.Deny {
		if n.Prefix.Contains(a) {
			return &RefusedError{Addr: a, Why: "in the networks of " + n.Flag}
		}
	}
	switch {
	case a.IsLoopback():
		return &RefusedError{Addr: a, Why: "a loopback address"}
	case a.IsLinkLocalUnicast():
		return &RefusedError{Addr: a, Why: "a link-local address"}
	}
	for _, o := range p.Own {
		if o.Unmap() == a {
			return &RefusedError{Addr: a, Why: "one of this server's own addresses"}
		}
	}
	return nil
}

// Client is an HTTP client whose every connection, redirects included,
// goes only where p allows. It uses no proxy, from the environment or
// otherwise: through a proxy the dialer would see only the proxy's
// address, and the proxy would reach the internal ones for it.
func (p *Policy) Client() *http.Client {
	d := &net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
		// Control runs after DNS, with the address about to be
		// connected to, before connect(2): nothing is sent to a refused
		// address, not even a SYN.
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("egress: unexpected address %q", address)
			}
			return p.Check(ap.Addr())
		},
	}
	return &http.Client{Transport: &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}}
}

// OwnAddrs are this machine's interface addresses now.
func OwnAddrs() []netip.Addr {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}
