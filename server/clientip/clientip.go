// Package clientip decides which address a request came from: the peer,
// or — when the peer is a trusted reverse proxy — the address that proxy
// saw, read from X-Forwarded-For. Login throttling and logs key on it.
package clientip

import (
	"net"
	"net/netip"
	"strings"

	"github.com/gofiber/fiber/v2"
)

const local = "anvil.client_ip"

// Resolver knows which peers are trusted proxies.
type Resolver struct {
	trusted []netip.Prefix
}

// New returns a resolver trusting X-Forwarded-For from the given networks
// only; with none, the peer's address is always the client's.
func New(trusted []net.IPNet) *Resolver {
	r := &Resolver{}
	for _, n := range trusted {
		addr, _ := netip.AddrFromSlice(n.IP)
		ones, _ := n.Mask.Size()
		r.trusted = append(r.trusted, netip.PrefixFrom(addr.Unmap(), ones).Masked())
	}
	return r
}

func (r *Resolver) isTrusted(a netip.Addr) bool {
	for _, p := range r.trusted {
		if p.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

// Resolve returns the client address for a request from peer carrying
// the X-Forwarded-For values xff. It walks the header from the right,
// skipping trusted proxies, and stops at the first address no trusted
// proxy vouches for: entries further left were written by the client and
// could say anything.
func (r *Resolver) Resolve(peer netip.Addr, xff []string) netip.Addr {
	client := peer.Unmap()
	if !r.isTrusted(client) {
		return client
	}
	var hops []string
	for _, h := range xff {
		hops = append(hops, strings.Split(h, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			// A malformed hop: the last proxy we trust is the best we know.
			return client
		}
		client = a.Unmap()
		if !r.isTrusted(client) {
			return client
		}
	}
	return client
}

// Middleware resolves the client address once per request, for Of.
func (r *Resolver) Middleware() fiber.Handler {
	return func(c *fiber.Ctx) error {
		peer, _ := netip.AddrFromSlice(c.Context().RemoteIP())
		var xff []string
		if len(r.trusted) > 0 {
			for _, v := range c.Request().Header.PeekAll(fiber.HeaderXForwardedFor) {
				xff = append(xff, string(v))
			}
		}
		c.Locals(local, r.Resolve(peer, xff).String())
		return c.Next()
	}
}

// Of returns the request's client address as Middleware resolved it, or
// the peer's address when it did not run.
func Of(c *fiber.Ctx) string {
	if s, ok := c.Locals(local).(string); ok {
		return s
	}
	return strings.Clone(c.IP())
}
