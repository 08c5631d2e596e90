// Package bodylimit bounds request bodies per route before they are read.
// Fiber's global BodyLimit reads a body up to the limit before any
// handler runs, so a login form would accept the same 16 MiB as a policy
// upload; here the server streams bodies (fiber's StreamRequestBody) and
// this middleware refuses by Content-Length without reading, or reads a
// chunked body only up to the route's limit.
package bodylimit

import (
	"fmt"
	"io"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/anvilproject/anvil/server/errs"
)

// Rule gives the routes under Prefix (or exactly Path) a limit in bytes.
// A Stream route's body is left unread for its handler, which streams it
// (an upload too large to hold in memory) and bounds it itself; a
// declared Content-Length over Max is still refused here, and the
// connection closes after the response.
type Rule struct {
	Path, Prefix string
	Max          int
	Stream       bool
}

// Limits are the body limits of every route: the first matching rule's,
// else Default.
type Limits struct {
	Default int
	Rules   []Rule
}

// For returns the limit for a request path.
func (l Limits) For(path string) int {
	limit, _ := l.rule(path)
	return limit
}

func (l Limits) rule(path string) (limit int, stream bool) {
	for _, r := range l.Rules {
		if path == r.Path || r.Prefix != "" && strings.HasPrefix(path, r.Prefix) {
			return r.Max, r.Stream
		}
	}
	return l.Default, false
}

// drainMax bounds how much of an oversized body is read and thrown away
// before the 413: an ordinary client sends its whole body before it reads
// the answer, and closing under its upload would show it a reset
// connection instead of the 413. Draining reuses a small buffer, so memory
// stays flat; a body declared larger than this is cut off unread.
const drainMax = 8 << 20

// Middleware reads every request body up front, bounded by its route's
// limit. A body over the limit gets a 413 and the connection is closed,
// after draining what an ordinary client would still be sending.
func (l Limits) Middleware() fiber.Handler {
	return func(c *fiber.Ctx) error {
		limit, stream := l.rule(c.Path())
		req := c.Request()
		n := req.Header.ContentLength()
		if n > limit {
			return tooLarge(c, limit)
		}
		if stream {
			// Whatever the handler (or a refusal before it) left unread
			// would be parsed as the next request on the connection.
			c.Context().SetConnectionClose()
			return c.Next()
		}
		if s := req.BodyStream(); s != nil && n != 0 {
			body, err := io.ReadAll(io.LimitReader(s, int64(limit)+1))
			if err != nil {
				c.Context().SetConnectionClose()
				return errs.BadRequest("body", "the request body could not be read: %v", err)
			}
			if len(body) > limit {
				return tooLarge(c, limit)
			}
			req.SetBodyRaw(body)
		}
		return c.Next()
	}
}

// Continue is fasthttp's ContinueHandler: a client that asks before
// sending ("Expect: 100-continue") a body larger than its route accepts
// is answered 417 Expectation Failed instead of 100 Continue, so it never
// sends the body. Without this, the server would invite the body and then
// close the connection under the client's upload, which loses the 413.
// The connection closes after the 417: fasthttp 1.51 would otherwise
// answer every later request on it with an empty 200 without running a
// handler.
func (l Limits) Continue(h *fasthttp.RequestHeader) bool {
	path, _, _ := strings.Cut(string(h.RequestURI()), "?")
	if h.ContentLength() <= l.For(path) {
		return true
	}
	h.SetConnectionClose()
	return false
}

func tooLarge(c *fiber.Ctx, limit int) error {
	if s := c.Request().BodyStream(); s != nil && c.Request().Header.ContentLength() <= drainMax {
		_, _ = io.Copy(io.Discard, io.LimitReader(s, drainMax))
	}
	c.Context().SetConnectionClose()
	return &errs.Error{Status: fiber.StatusRequestEntityTooLarge, Field: "body",
		Msg: fmt.Sprintf("the request body is larger than %s, the most %s accepts", size(limit), c.Path())}
}

func size(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
