// Package servertest runs a real Anvil server on a loopback port for tests,
// and gives them a small JSON client for its API.
package servertest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/store"
)

// Server is a running app and its base URL.
type Server struct {
	*server.App
	URL string
}

// Start builds an app on the database setting and serves it until the test
// ends.
func Start(t testing.TB, o server.Options) *Server {
	t.Helper()
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if o.PasswordHashCost == 0 {
		// A test server's accounts hash at bcrypt's lowest cost: tests
		// create some twenty accounts per server, which at the default
		// cost took more CPU than anything else in many tests (what
		// login checks is the same at any cost).
		o.PasswordHashCost = bcrypt.MinCost
	}
	if o.FirmwareDir == "" {
		// Beside a PostgreSQL database the default is the working
		// directory, which for a test is its package's source.
		o.FirmwareDir = t.TempDir()
	}
	if o.BootISODir == "" {
		o.BootISODir = t.TempDir()
	}
	if o.Conductor.Agent.ImageCacheDir == "" {
		o.Conductor.Agent.ImageCacheDir = t.TempDir()
	}
	if o.Conductor.ImageSourceNetworks == nil {
		// Tests serve images from httptest servers on loopback, which
		// the default --image-source-networks refuses; a test of that
		// default gives an empty, non-nil list.
		o.Conductor.ImageSourceNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	}
	if _, sqlite := store.SQLiteFile(o.Database); !sqlite && o.Conductor.Agent.LogDir == "" {
		// Beside a SQLite file (itself in a temporary directory) the
		// default is left to the app, so tests meet it.
		o.Conductor.Agent.LogDir = t.TempDir()
	}
	ctx, cancel := context.WithCancel(context.Background())
	app, err := server.New(ctx, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(35 * time.Second):
			t.Error("server did not shut down")
		}
		app.Close()
	})
	// Serve starts the conductor (which recovers nodes its name still
	// holds) before it answers HTTP, so one answered request means a
	// test's first claim cannot be mistaken for a previous run's.
	url := "http://" + ln.Addr().String()
	hc := &http.Client{Timeout: 30 * time.Second}
	if r, err := hc.Get(url + "/"); err != nil {
		t.Fatalf("server did not start: %v", err)
	} else {
		r.Body.Close()
	}
	// Its kept-alive connection would count against a test's
	// MaxConnections.
	hc.CloseIdleConnections()
	return &Server{App: app, URL: url}
}

// Response is what a request returned.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a generic value.
func (r *Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, r.Body)
	}
	return m
}

// Fault returns the faultstring of an Ironic-shaped error body.
func (r *Response) Fault(t testing.TB) string {
	t.Helper()
	m := r.JSON(t)
	s, ok := m["error_message"].(string)
	if !ok {
		t.Fatalf("no error_message string in %s", r.Body)
	}
	var inner map[string]any
	if err := json.Unmarshal([]byte(s), &inner); err != nil {
		t.Fatalf("error_message is not JSON: %v", err)
	}
	f, _ := inner["faultstring"].(string)
	return f
}

// Client sends API requests with a fixed microversion and headers.
type Client struct {
	Base    string
	Version string
	Header  http.Header
}

// Client returns a client at the newest microversion.
func (s *Server) Client() *Client {
	return &Client{Base: s.URL, Version: "latest", Header: http.Header{}}
}

// Do sends a request; body may be nil, []byte, string or any JSON value.
func (c *Client) Do(t testing.TB, method, path string, body any) *Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	ct := ""
	if rd != nil {
		ct = "application/json"
	}
	return c.DoRaw(t, method, path, rd, ct)
}

// DoRaw sends body as it is, streamed, with content type ct (none when
// empty).
func (c *Client) DoRaw(t testing.TB, method, path string, body io.Reader, ct string) *Response {
	t.Helper()
	req, err := http.NewRequest(method, c.Base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range c.Header {
		req.Header[k] = v
	}
	if c.Version != "" {
		req.Header.Set("X-OpenStack-Ironic-API-Version", c.Version)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// ServeISO serves a 64 KiB boot.iso over loopback HTTP for the test's
// life, as the image a BMC's virtual media fetches, and returns its URL.
func ServeISO(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "boot.iso"), make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	images := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(images.Close)
	return images.URL + "/boot.iso"
}
