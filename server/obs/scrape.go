package obs

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/netip"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/errs"
)

// ScrapeAccess guards /metrics, which names routes, counts failures and
// shows the process's resources: with token set, only a request carrying
// "Authorization: Bearer <token>" reads it; without, only a scraper on
// this host does.
func ScrapeAccess(token string) fiber.Handler {
	want := sha256.Sum256([]byte(token))
	return func(c *fiber.Ctx) error {
		if token != "" {
			got, ok := strings.CutPrefix(c.Get(fiber.HeaderAuthorization), "Bearer ")
			// Comparing digests keeps the comparison constant-time in the
			// token's length too.
			sum := sha256.Sum256([]byte(got))
			if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
				c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="metrics"`)
				return errs.Unauthorized("/metrics needs the metrics token (Authorization: Bearer)")
			}
			return c.Next()
		}
		peer, _ := netip.AddrFromSlice(c.Context().RemoteIP())
		forwarded := false
		for _, h := range []string{fiber.HeaderXForwardedFor, "Forwarded", "X-Real-Ip"} {
			forwarded = forwarded || len(c.Request().Header.Peek(h)) > 0
		}
		if !LocalScrape(peer, forwarded) {
			return errs.NotFound("not found")
		}
		return c.Next()
	}
}

// LocalScrape decides whether a request without the metrics token may
// read /metrics: only from a loopback socket peer that no proxy
// forwarded. The peer, not clientip's resolved address, decides: a
// reverse proxy on this host connects from loopback, and whether or not
// it is a --trusted-proxies entry, a request carrying its forwarding
// header came through it from anywhere it serves.
func LocalScrape(peer netip.Addr, forwarded bool) bool {
	return peer.Unmap().IsLoopback() && !forwarded
}
