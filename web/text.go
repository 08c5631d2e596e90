package web

import (
	"bytes"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/validtext"
)

// checkText refuses a portal request whose path, query or form fields
// hold a NUL or invalid UTF-8, as the API refuses such JSON (validtext
// says why): the portal calls the services directly, past the API's
// check. A field holding JSON (a runbook step's arguments, clean steps)
// is checked inside too, where "\u0000" is six harmless characters until
// decoded. Multipart bodies (the policy upload) are their handler's.
func checkText(c *fiber.Ctx) error {
	if err := validtext.String("path", c.Path()); err != nil {
		return err
	}
	var bad error
	check := func(k, v []byte) {
		if bad != nil {
			return
		}
		if bad = validtext.String("form field", string(k)); bad != nil {
			return
		}
		if bad = validtext.String(string(k), string(v)); bad != nil {
			return
		}
		if t := bytes.TrimSpace(v); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
			bad = validtext.JSONUnder(string(k), t)
		}
	}
	c.Request().URI().QueryArgs().VisitAll(check)
	if bytes.HasPrefix(c.Request().Header.ContentType(), []byte(fiber.MIMEApplicationForm)) {
		c.Request().PostArgs().VisitAll(check)
	}
	return bad
}
