package web

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/views"
)

// Dropped is a form a page sent after its session timed out: not done,
// and offered again once the same person has signed in (views.Dropped).
// Its values travel in the session cookie, which is encrypted, but never
// a secret: a form with one is named without its values, and the person
// fills it in again.
type Dropped struct {
	User   string      `json:"u"`
	Path   string      `json:"p"`
	What   string      `json:"w"`
	Fields [][2]string `json:"f,omitempty"`
	// Refill says the form cannot be repeated as it was: it held a secret,
	// or more than fits in a cookie.
	Refill bool `json:"r,omitempty"`
}

// droppedMax bounds the form values kept: the cookie holds 4 KiB in all.
const droppedMax = 1500

// actionWords names the portal's actions by the last part of their path.
var actionWords = map[string]string{
	"power": "the power action", "clean": "the cleaning", "runbook": "the runbook run", "provision": "the provisioning action",
	"deploy": "the deploy", "undeploy": "the release", "tenancy": "the owner and lessee change", "retry": "the retry",
	"notify": "the message to the owner", "maintenance": "the maintenance change", "lifecycle": "the lifecycle action",
	"traits": "the trait change", "retire": "the retirement", "delete": "the deletion", "bmc": "the BMC change",
	"test-bmc": "the BMC connection test", "state": "the campaign change", "approve": "the approval", "run": "the run",
	"edit": "the runbook change", "new": "the new entry", "nodes": "the change to the runbook's nodes", "apply": "the change", "cancel": "the cancellation",
}

// keepDropped records what a timed-out page sent (Sessions.SaveDropped),
// for the same person's next sign-in to offer.
func (p *Portal) keepDropped(c *fiber.Ctx, sess *Session) error {
	path := c.Path()
	// Signing in or out is no action to offer again.
	if sess.staleUser == "" || path == "/login" || path == "/logout" {
		return nil
	}
	last := path[strings.LastIndex(path, "/")+1:]
	what, ok := actionWords[last]
	if !ok {
		what = "the action you sent"
	}
	d := &Dropped{User: sess.staleUser, Path: path, What: what}
	size := 0
	c.Request().PostArgs().VisitAll(func(k, v []byte) {
		name, value := string(k), string(v)
		switch {
		case name == "csrf":
		case secretField(name):
			d.Refill = true
		default:
			size += len(name) + len(value)
			d.Fields = append(d.Fields, [2]string{name, value})
		}
	})
	if size > droppedMax || strings.HasPrefix(string(c.Request().Header.ContentType()), fiber.MIMEMultipartForm) {
		d.Refill = true
	}
	if d.Refill {
		d.Fields = nil
	}
	return p.Sessions.SaveDropped(c, d)
}

// secretField says whether a form field holds a secret by its name, as
// the portal's forms name them (password, bmc_password, token…).
func secretField(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "password") || strings.Contains(n, "secret") || strings.Contains(n, "token") || strings.Contains(n, "key")
}

// droppedView is the dropped action as the page offers it.
func droppedView(d *Dropped) *views.Dropped {
	return &views.Dropped{Path: d.Path, What: d.What, Fields: d.Fields, Refill: d.Refill}
}
