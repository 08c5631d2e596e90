package web

import "github.com/gofiber/fiber/v2"

// contentSecurityPolicy allows only Anvil's own files: no inline script
// or style (the pages have none; htmx's indicator style is off, see the
// layout), no framing, and forms that post only back to Anvil.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// securityHeaders is set on every response the portal routes give:
// clickjacking, MIME sniffing and referrer leaks are refused by the
// browser, whatever a page contains.
func securityHeaders(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentSecurityPolicy, contentSecurityPolicy)
	c.Set(fiber.HeaderXFrameOptions, "DENY")
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderReferrerPolicy, "same-origin")
	return c.Next()
}
