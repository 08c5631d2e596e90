package api_test

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestMaxConnections: --max-connections counts kept-alive connections
// that sit idle, so a server at its bound answers a new connection with
// a 503 while the open ones are still served.
func TestMaxConnections(t *testing.T) {
	srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite"), MaxConnections: 2})
	addr := strings.TrimPrefix(srv.URL, "http://")
	type conn struct {
		net.Conn
		r *bufio.Reader
	}
	dial := func() conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return conn{c, bufio.NewReader(c)}
	}
	get := func(c conn) int {
		t.Helper()
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(c.r, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// keep opens a connection that is served and kept. The server may
	// still be closing the start probe's connection, which counts until
	// it has: retry on a 503 for a while.
	keep := func() conn {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			c := dial()
			s := get(c)
			if s == 200 {
				return c
			}
			c.Close()
			if s != 503 || time.Now().After(deadline) {
				t.Fatalf("a connection under the bound: status %d, want 200", s)
			}
		}
	}
	first, _ := keep(), keep()
	if s := get(dial()); s != 503 {
		t.Fatalf("a third connection with two kept open: status %d, want 503", s)
	}
	// The kept-alive connections are still served.
	if s := get(first); s != 200 {
		t.Fatalf("first connection again: status %d, want 200", s)
	}
}
