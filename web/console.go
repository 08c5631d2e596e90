package web

import (
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/gofiber/contrib/websocket"
	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/views"
)

// consolePage shows a node's serial console to whoever passes
// baremetal:node:get_console.
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
	cv := views.ConsoleView{UUID: v.UUID, Name: v.UUID, Enabled: on}
	if v.Name != nil {
		cv.Name = *v.Name
	}
	switch {
	case !on:
		cv.Why = "The console is off. Enable it with PUT /v1/nodes/{node}/states/console or baremetal node console enable."
	case info["type"] != "socat":
		cv.Why = "This node's console interface (" + v.ConsoleInterface + ") has no stream the portal can show."
	default:
		cv.Stream = true
	}
	pg, err := p.page(c, "Console of "+cv.Name)
	if err != nil {
		return err
	}
	return render(c, 200, views.ConsolePage(pg, cv))
}

// consoleSocket carries the console between the browser and the
// conductor's listener. Every connection is checked as a request is: the
// session (the route's middleware), the rule (OpenConsole) and, since a
// browser sends the cookie with a WebSocket any site opens, the Origin.
func (p *Portal) consoleSocket(c *fiber.Ctx) error {
	if !websocket.IsWebSocketUpgrade(c) {
		return fiber.ErrUpgradeRequired
	}
	if !sameOrigin(c) {
		return errs.Forbidden("the console opens from Anvil's own pages only (Origin %q)", c.Get(fiber.HeaderOrigin))
	}
	addr, err := p.Ops.OpenConsole(c.UserContext(), c.Params("id"))
	if err != nil {
		return err
	}
	return websocket.New(func(ws *websocket.Conn) {
		tc, err := net.DialTimeout("tcp", strings.TrimPrefix(addr, "tcp://"), 5*time.Second)
		if err != nil {
			_ = ws.WriteMessage(websocket.TextMessage, []byte("The console is not reachable: "+err.Error()+"\r\n"))
			return
		}
		defer tc.Close()
		// The conductor's end closing (disabled console, ended lease)
		// closes the browser's: a close frame, and the read below is
		// stopped (closing a hijacked fasthttp connection is left to
		// fasthttp, once this handler returns).
		go func() {
			defer func() {
				_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "console closed"), time.Now().Add(time.Second))
				_ = ws.SetReadDeadline(time.Now())
			}()
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
				return
			}
			if _, err := tc.Write(msg); err != nil {
				return
			}
		}
	})(c)
}

// sameOrigin reports whether the request's Origin is this portal's own
// scheme-less host; a missing Origin is refused too, browsers always
// send one with a WebSocket.
func sameOrigin(c *fiber.Ctx) bool {
	u, err := url.Parse(c.Get(fiber.HeaderOrigin))
	return err == nil && u.Host != "" && (u.Scheme == "http" || u.Scheme == "https") && strings.EqualFold(u.Host, string(c.Request().Host()))
}
