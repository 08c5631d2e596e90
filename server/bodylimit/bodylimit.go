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

	"github.com/anvilproject/anvil/server/errs"
)

// Rule gives the routes under Prefix (or exactly Path) a limit in bytes.
type Rule struct {
	Path, Prefix string
	Max          int
}

// Middleware reads every request body up front, bounded by the first rule
// matching the path, else by def. A body over the limit gets a 413 and
// the connection is closed, since its unread rest cannot be skipped.
func Middleware(def int, rules ...Rule) fiber.Handler {
	return func(c *fiber.Ctx) error {
		limit := def
		for _, r := range rules {
			if c.Path() == r.Path || r.Prefix != "" && strings.HasPrefix(c.Path(), r.Prefix) {
				limit = r.Max
				break
			}
		}
		req := c.Request()
		n := req.Header.ContentLength()
		if n > limit {
			return tooLarge(c, limit)
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

func tooLarge(c *fiber.Ctx, limit int) error {
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
