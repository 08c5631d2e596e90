package web

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/contrib/websocket"
	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/views"
)

// consolePage shows a node's serial console to whoever passes
// baremetal:node:get_console, with the switch that turns it on or off.
func (p *Portal) consolePage(c *fiber.Ctx) error {
	ctx := c.UserContext()
	on, info, err := p.Ops.ConsoleState(ctx, c.Params("id"))
	if err != nil {
		return p.fail(c, err)
	}
	v, err := p.Nodes.Get(ctx, c.Params("id"))
	if err != nil {
		return p.fail(c, err)
	}
	cv := p.consoleView(ctx, v)
	if cv == nil {
		cv = &views.ConsoleView{UUID: v.UUID, Name: nameOr(deref(v.Name), v.UUID)}
	}
	cv.Enabled, cv.Stream = on, false
	switch {
	case !on:
		cv.Why = "The console is off."
	case info["type"] != "socat":
		cv.Why = "This node's console interface (" + v.Interface("console") + ") has no stream the portal can show."
	default:
		cv.Stream = true
	}
	pg, err := p.page(c, "Console of "+cv.Name)
	if err != nil {
		return err
	}
	pg.Terminal = cv.Stream
	return render(c, 200, views.ConsolePage(pg, *cv))
}

// nodeScreenshot serves the node's console screenshot to whoever may see
// its console (Ops.Screenshot), as the image it is.
func (p *Portal) nodeScreenshot(c *fiber.Ctx) error {
	s, err := p.Ops.Screenshot(c.UserContext(), c.Params("id"))
	if err != nil {
		return p.fail(c, err)
	}
	c.Set("Content-Type", map[string]string{"png": "image/png", "jpg": "image/jpeg"}[s.FileType])
	c.Set("X-Content-Type-Options", "nosniff")
	c.Set("Cache-Control", "private, no-cache")
	return c.Send(s.Image)
}

// consoleView is what the node page and the console page say about the
// node's console; nil when its console interface has none.
func (p *Portal) consoleView(ctx context.Context, v *nodes.View) *views.ConsoleView {
	if v.Interface("console") != conductor.ConsoleFake && v.Interface("console") != conductor.ConsoleSocat {
		return nil
	}
	t := nodes.Target(v.Node)
	cv := &views.ConsoleView{UUID: v.UUID, Name: nameOr(deref(v.Name), v.UUID), Enabled: v.ConsoleEnabled}
	if !p.Guard.Allowed(ctx, conductor.RuleGetConsole, t) {
		cv.ViewWhy = p.denied(ctx, "may not open the console", conductor.RuleGetConsole)
	} else if v.ConsoleEnabled && v.Interface("console") == conductor.ConsoleSocat {
		cv.Stream = true
	} else if v.ConsoleEnabled {
		cv.Why = "This node's console interface (" + v.Interface("console") + ") has no stream the portal can show."
	}
	if !p.Guard.Allowed(ctx, conductor.RuleSetConsole, t) {
		cv.SetWhy = p.denied(ctx, "may not turn the console on or off", conductor.RuleSetConsole)
	}
	return cv
}

// consoleSettle is how long turning the console on or off may take
// before the answer says it is still under way: the conductor does it in
// the background, opening a listener, which is quick.
const consoleSettle = 5 * time.Second

// nodeConsoleState turns the console on or off (PUT states/console's
// Ops.SetConsole, which checks baremetal:node:set_console_state and
// audits), then shows the page the form was on once the conductor has
// done it.
func (p *Portal) nodeConsoleState(c *fiber.Ctx) error {
	v, label, err := p.opNode(c)
	if err != nil {
		return p.fail(c, err)
	}
	var on bool
	switch c.FormValue("enabled") {
	case "yes":
		on = true
	case "no":
	default:
		return p.fail(c, errs.BadRequest("enabled", "enabled: choose yes or no"))
	}
	back := "/nodes/" + v.UUID
	if c.FormValue("back") == "console" {
		back += "/console"
	}
	ctx := c.UserContext()
	if err := p.Ops.SetConsole(ctx, v.UUID, on); err != nil {
		if st := errs.Status(err); st == 403 || st == 404 || st >= 500 {
			return p.fail(c, err)
		}
		return p.flashTo(c, back, "Not done: "+err.Error())
	}
	msg := "The console of " + label + " is on."
	if !on {
		msg = "The console of " + label + " is off; anyone watching it was disconnected."
	}
	for deadline := time.Now().Add(consoleSettle); ; time.Sleep(100 * time.Millisecond) {
		n, err := p.Nodes.Get(ctx, v.UUID)
		if err != nil {
			return p.fail(c, err)
		}
		if n.ConsoleEnabled == on {
			break
		}
		if le := deref(n.LastError); le != "" && le != deref(v.LastError) {
			return p.flashTo(c, back, "Not done: "+le)
		}
		if time.Now().After(deadline) {
			msg = "The conductor is still turning the console of " + label + " " + map[bool]string{true: "on", false: "off"}[on] + "; reload in a moment."
			break
		}
	}
	return p.flashTo(c, back, msg)
}

// consoleSocket carries the console between the browser and the
// conductor's listener. Every connection is checked as a request is: the
// session (the route's middleware), the rule (OpenConsole) and, since a
// browser sends the cookie with a WebSocket any site opens, the Origin.
// While it is open it is checked again every consoleRecheck
// (consoleAccess), and closed with the reason when the check fails.
func (p *Portal) consoleSocket(c *fiber.Ctx) error {
	if !websocket.IsWebSocketUpgrade(c) {
		return fiber.ErrUpgradeRequired
	}
	if !sameOrigin(c) {
		return errs.Forbidden("the console opens from Anvil's own pages only (Origin %q)", c.Get(fiber.HeaderOrigin))
	}
	op, err := p.Ops.OpenConsole(c.UserContext(), c.Params("id"))
	if err != nil {
		return err
	}
	// The socket outlives the request whose context and session these
	// are; both only carry values the checks read.
	ctx, sess := context.WithoutCancel(c.UserContext()), sessionOf(c)
	return websocket.New(func(ws *websocket.Conn) {
		tc, err := net.DialTimeout("tcp", strings.TrimPrefix(op.URL, "tcp://"), 5*time.Second)
		if err != nil {
			_ = ws.WriteMessage(websocket.TextMessage, []byte("The console is not reachable: "+err.Error()+"\r\n"))
			return
		}
		// end closes both ends once, whichever notices first: with a
		// close frame whose reason the terminal shows (why nil: the
		// browser left, and is told nothing). The read below is stopped
		// by its deadline, and a write to a browser that stopped reading
		// by the connection's, so that this handler, which waits for
		// both, returns; closing the hijacked fasthttp connection is
		// left to fasthttp then.
		var once sync.Once
		end := func(code int, why func() string) {
			once.Do(func() {
				if why != nil {
					_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, why()), time.Now().Add(time.Second))
				}
				_ = ws.SetReadDeadline(time.Now())
				_ = ws.NetConn().SetWriteDeadline(time.Now())
				tc.Close()
			})
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(consoleRecheck)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				why, err := p.consoleAccess(ctx, sess, op)
				if err != nil {
					// The database did not answer: the next tick asks again.
					p.Log.Warn("console access check failed", "node", op.UUID, "user", sess.User, "err", err)
					continue
				}
				if why != "" {
					end(websocket.ClosePolicyViolation, func() string { return why })
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			// The conductor's end closing (disabled console, ended
			// lease, deleted node) closes the browser's, saying why when
			// it is the viewer's access or the lease.
			defer end(websocket.CloseNormalClosure, func() string {
				if why, err := p.consoleAccess(ctx, sess, op); err == nil && why != "" {
					return why
				}
				return consoleEnded
			})
			buf := make([]byte, 4096)
			for {
				n, err := tc.Read(buf)
				if err != nil {
					return
				}
				if err := ws.WriteMessage(websocket.BinaryMessage, buf[:n]); err != nil {
					return
				}
			}
		}()
		for {
			_, msg, err := ws.ReadMessage()
			if err != nil {
				break
			}
			if _, err := tc.Write(msg); err != nil {
				break
			}
		}
		end(0, nil)
		close(stop)
		wg.Wait()
	})(c)
}

// consoleRecheck is how often an open console checks that its viewer may
// still watch it: revoking a role, deleting an account, ending a session
// or changing the lease closes it within about this long.
const consoleRecheck = time.Second

// Reasons a console's close frame gives, which the terminal shows after
// "Closed: ". consoleEnded is for the conductor's end closing for
// another reason: the conductor knows why, the listener's connection
// does not say.
const (
	consoleEnded        = "the console was turned off, the node torn down, or your access to it ended"
	consoleRevoked      = "your access to this node's console was revoked"
	consoleAccountGone  = "your account was deleted"
	consoleSessionEnded = "your session ended"
	consoleLeaseChanged = "the node's lease changed"
)

// consoleAccess checks again what opening the console checked, as the
// session middleware and OpenConsole do for a request: the account and
// its roles in the session's scope, the session's record, the node's
// rule and lease. It answers why the viewer may no longer watch, or ""
// while it may. The roles come first: revoking one or deleting the
// account also ends the session, and the viewer should learn the cause.
// The idle timeout is not checked: typing into the console is use the
// portal never sees.
func (p *Portal) consoleAccess(ctx context.Context, sess *Session, op conductor.ConsoleOpening) (string, error) {
	rec, err := p.IDs.Session(ctx, sess.ID, sess.Principal())
	if err != nil {
		return "", err
	}
	var pr *policies.Principal
	if sess.Method == "oidc" {
		if rec == nil {
			return consoleSessionEnded, nil
		}
		// The roles the session's record holds, which page requests
		// refresh from the provider.
		s := *sess
		s.Assignments = rec.Assignments
		pr, err = p.principal(ctx, &s)
	} else {
		pr, err = p.IDs.PrincipalFor(ctx, sess.User, sess.Scope, "session")
	}
	switch st := errs.Status(err); {
	case err == nil:
	case st == 404:
		return consoleAccountGone, nil
	case st == 403: // no role left in the scope, or the account disabled
		return consoleRevoked, nil
	default:
		return "", err
	}
	if rec == nil {
		return consoleSessionEnded, nil
	}
	switch err := p.Ops.RecheckConsole(policies.WithPrincipal(ctx, pr), op); {
	case err == nil:
		return "", nil
	case errors.Is(err, conductor.ErrLeaseChanged):
		return consoleLeaseChanged, nil
	case errs.Status(err) == 403 || errs.Status(err) == 404:
		return consoleRevoked, nil
	default:
		return "", err
	}
}

// sameOrigin reports whether the request's Origin is this portal's own
// scheme-less host; a missing Origin is refused too, browsers always
// send one with a WebSocket.
func sameOrigin(c *fiber.Ctx) bool {
	u, err := url.Parse(c.Get(fiber.HeaderOrigin))
	return err == nil && u.Host != "" && (u.Scheme == "http" || u.Scheme == "https") && strings.EqualFold(u.Host, string(c.Request().Host()))
}
