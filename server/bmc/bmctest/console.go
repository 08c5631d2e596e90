package bmctest

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
)

// Console is a console client's two directions, whatever carries them
// (the tcp:// socket of Ironic's socat console, the portal's WebSocket):
// Type sends what is typed at it, Read returns the next output it shows,
// giving up at the deadline.
type Console struct {
	Type func(p []byte) error
	Read func(deadline time.Time) ([]byte, error)
}

// Socket is a console reached over a stream socket: socat's tcp:// URL.
func Socket(conn net.Conn) Console {
	buf := make([]byte, 256)
	return Console{
		Type: func(p []byte) error { _, err := conn.Write(p); return err },
		Read: func(deadline time.Time) ([]byte, error) {
			_ = conn.SetReadDeadline(deadline)
			n, err := conn.Read(buf)
			return buf[:n], err
		},
	}
}

// WebSocket is the portal's console: what is typed goes as text
// messages, the machine's output comes back as messages.
func WebSocket(ws *websocket.Conn) Console {
	return Console{
		Type: func(p []byte) error { return ws.WriteMessage(websocket.TextMessage, p) },
		Read: func(deadline time.Time) ([]byte, error) {
			_ = ws.SetReadDeadline(deadline)
			_, msg, err := ws.ReadMessage()
			return msg, err
		},
	}
}

// Port is the machine's side of a serial port (Sim.Serial).
type Port interface {
	io.ReadWriter
	SetReadDeadline(t time.Time) error
}

// RoundTrip proves that console c reaches the machine behind serial both
// ways: a fresh word typed at c arrives on the serial port, and a fresh
// line the machine writes appears on c, each within the given time. The
// word is typed again every half second until it arrives, as ipmitool
// may still be opening its session when the first is sent. via names the
// console's path in failures.
func RoundTrip(t testing.TB, via string, c Console, serial Port, within time.Duration) {
	t.Helper()
	word := fmt.Sprintf("typed-%d", time.Now().UnixNano())
	seen := make(chan string, 1)
	go func() {
		_ = serial.SetReadDeadline(time.Now().Add(within))
		var b strings.Builder
		buf := make([]byte, 256)
		for !strings.Contains(b.String(), word) {
			n, err := serial.Read(buf)
			if err != nil {
				break
			}
			b.Write(buf[:n])
		}
		seen <- b.String()
	}()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var got string
typing:
	for {
		if err := c.Type([]byte(word + "\r")); err != nil {
			// The far end closed: what it said last (a reason, a close
			// frame) is the failure's explanation.
			said, why := c.Read(time.Now().Add(time.Second))
			t.Fatalf("typing at the console %s: %v; it had said %q (%v)", via, err, said, why)
		}
		select {
		case got = <-seen:
			break typing
		case <-tick.C:
		}
	}
	if !strings.Contains(got, word) {
		t.Fatalf("typed %q at the console %s; the serial port saw %q", word, via, got)
	}

	reply := fmt.Sprintf("login-%d:", time.Now().UnixNano())
	if _, err := serial.Write([]byte(reply + "\r\n")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(within)
	var out strings.Builder
	for !strings.Contains(out.String(), reply) {
		b, err := c.Read(deadline)
		if err != nil {
			t.Fatalf("the console %s did not show the machine's output %q; got %q: %v", via, reply, out.String(), err)
		}
		out.Write(b)
	}
}
