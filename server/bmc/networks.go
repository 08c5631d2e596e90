package bmc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// The BMC network allow-list. Empty means any address, as before it
// existed. It is process-wide because enrolment (nodes) and every
// connection (conductor) must agree on it.
var (
	netMu    sync.RWMutex
	networks []netip.Prefix
)

// ParseNetworks parses CIDRs (a bare address is a /32 or /128).
func ParseNetworks(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "/") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("BMC network %q is not a CIDR or address", s)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("BMC network %q is not a CIDR: %v", s, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// SetNetworks sets the allow-list; nil allows every address.
func SetNetworks(p []netip.Prefix) {
	netMu.Lock()
	defer netMu.Unlock()
	networks = p
}

func allowed(a netip.Addr) bool {
	netMu.RLock()
	defer netMu.RUnlock()
	if len(networks) == 0 {
		return true
	}
	a = a.Unmap()
	for _, p := range networks {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func restricted() bool {
	netMu.RLock()
	defer netMu.RUnlock()
	return len(networks) > 0
}

// checkHost resolves host and refuses it when any of its addresses is
// outside the allow-list: a name resolving to one allowed and one
// internal address must not reach the internal one.
func checkHost(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		if !allowed(a) {
			return nil, fmt.Errorf("%s: %w", a, ErrNetwork)
		}
		return []netip.Addr{a}, nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if !allowed(a) {
			return nil, fmt.Errorf("%s resolves to %s: %w", host, a, ErrNetwork)
		}
	}
	return addrs, nil
}

// checkEnrolHost applies the allow-list when driver_info is written. A
// name that does not resolve now is accepted; the connection checks again.
func checkEnrolHost(key, host string) error {
	if !restricted() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := checkHost(ctx, host); errors.Is(err, ErrNetwork) {
		return fieldErr(key, "driver_info/%s %q is outside the BMC networks this Anvil may reach", key, host)
	}
	return nil
}

// dialContext dials only addresses the allow-list accepts, and dials the
// address it checked, so a DNS answer cannot change between check and use.
func dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	addrs, err := checkHost(ctx, host)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	var last error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

// MaxAnswerBytes bounds what one bmclib connection reads. bmclib's
// providers read whole answers into memory (Dell's screenshot with
// io.ReadAll), so a BMC streaming without end would fill the conductor's
// memory within a call's time limit. A connection carries one request
// (keep-alives are off), and no answer bmclib reads comes near this: the
// largest, a screenshot kept up to 8 MiB, is about 11 MiB as base64 JSON.
const MaxAnswerBytes = 32 << 20

// errAnswerTooLarge ends a connection that read MaxAnswerBytes.
var errAnswerTooLarge = fmt.Errorf("the BMC's answer is larger than %d bytes", MaxAnswerBytes)

// boundedConn is a connection that reads at most left more bytes.
type boundedConn struct {
	net.Conn
	left int
}

func (c *boundedConn) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errAnswerTooLarge
	}
	if len(p) > c.left {
		p = p[:c.left]
	}
	n, err := c.Conn.Read(p)
	c.left -= n
	return n, err
}

// dialBounded is dialContext for bmclib's HTTP client: each connection
// reads at most MaxAnswerBytes.
func dialBounded(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := dialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &boundedConn{Conn: c, left: MaxAnswerBytes}, nil
}
