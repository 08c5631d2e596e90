package bodylimit_test

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// raw sends a request with a body of n bytes over a fresh connection,
// declaring its length or (chunked) not, and returns the status and body.
// It stops writing once the server answers, as a client must when the
// server refuses early.
func raw(t *testing.T, base, method, path, ctype string, n int, chunked bool, header ...string) (int, string) {
	t.Helper()
	u, _ := url.Parse(base)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var h strings.Builder
	fmt.Fprintf(&h, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nAccept: text/html\r\n", method, path, u.Host, ctype)
	for i := 0; i+1 < len(header); i += 2 {
		fmt.Fprintf(&h, "%s: %s\r\n", header[i], header[i+1])
	}
	if chunked {
		h.WriteString("Transfer-Encoding: chunked\r\n\r\n")
	} else {
		fmt.Fprintf(&h, "Content-Length: %d\r\n\r\n", n)
	}
	go func() {
		if _, err := conn.Write([]byte(h.String())); err != nil {
			return
		}
		chunk := bytes.Repeat([]byte("a"), 32<<10)
		for sent := 0; sent < n; sent += len(chunk) {
			c := chunk[:min(len(chunk), n-sent)]
			if chunked {
				if _, err := fmt.Fprintf(conn, "%x\r\n%s\r\n", len(c), c); err != nil {
					return
				}
			} else if _, err := conn.Write(c); err != nil {
				return
			}
		}
		if chunked {
			conn.Write([]byte("0\r\n\r\n"))
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestBodyLimits: an oversized body is refused with 413 and a message
// naming the limit, on /login, a signed-in portal form, the API and the
// policy upload, whether its length is declared or chunked; a policy zip
// of the size the upload accepts still gets through.
func TestBodyLimits(t *testing.T) {
	ctx := context.Background()
	srv := servertest.Start(t, server.Options{Database: storetest.Setting(t, "sqlite")})
	srv.IDs.CreateUser(ctx, "root", "root-password-1")
	srv.IDs.Grant(ctx, "root", identity.Assignment{Scope: identity.Scope{System: true}, Role: "admin"})
	tok, _, err := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "root", Scope: identity.Scope{System: true}, Roles: []string{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	form := "application/x-www-form-urlencoded"
	for _, c := range []struct {
		path, ctype, limit string
		n                  int
		header             []string
	}{
		{"/login", form, "64 KiB", 15 << 20, nil},
		{"/runbooks/new", form, "64 KiB", 200 << 10, nil},
		{"/v1/nodes", "application/json", "1 MiB", 15 << 20, []string{"X-Auth-Token", tok}},
		{"/admin/policy", "multipart/form-data; boundary=x", "1088 KiB", 15 << 20, nil},
	} {
		for _, chunked := range []bool{false, true} {
			st, body := raw(t, srv.URL, "POST", c.path, c.ctype, c.n, chunked, c.header...)
			if st != 413 || !strings.Contains(body, "larger than "+c.limit) {
				t.Errorf("POST %s, %d bytes (chunked %v): %d %s", c.path, c.n, chunked, st, body)
			}
		}
	}
	// A client that asks first is told not to send at all.
	u, _ := url.Parse(srv.URL)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /login HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", u.Host, form, 15<<20)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	conn.Close()
	if err != nil || resp.StatusCode != http.StatusExpectationFailed || !resp.Close {
		t.Errorf("Expect: 100-continue with 15 MiB on /login: %v %v; want 417 before the body, and the connection closed", resp, err)
	}
	// Within the limits, bodies still arrive whole.
	if st, _ := raw(t, srv.URL, "POST", "/v1/nodes", "application/json", 900<<10, true, "X-Auth-Token", tok); st != 400 {
		t.Errorf("a chunked 900 KiB API body (not JSON) answered %d, want the handler's 400", st)
	}

	// A signed-in admin previews a policy zip close to the upload's limit.
	jar, _ := cookiejar.New(nil)
	web := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	get := func(path string) string {
		resp, err := web.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return csrf.FindStringSubmatch(string(b))[1]
	}
	resp, err = web.PostForm(srv.URL+"/login", url.Values{"csrf": {get("/login")}, "username": {"root"}, "password": {"root-password-1"}})
	if err != nil || resp.StatusCode != 303 {
		t.Fatalf("login: %v %v", resp, err)
	}
	token := get("/admin/policy")
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	// Stored, not deflated, so the zip is as large as its files: four
	// files just under the per-file limit.
	for i, rule := range []string{"baremetal:node:list", "baremetal:runbook:list", "baremetal:allocation:list", "anvil:token:create"} {
		f, _ := zw.CreateHeader(&zip.FileHeader{Name: fmt.Sprintf("%d.yaml", i), Method: zip.Store})
		fmt.Fprintf(f, "# %s\n%q: \"role:member\"\n", strings.Repeat("x", 220<<10), rule)
	}
	zw.Close()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("csrf", token)
	mw.WriteField("action", "preview")
	fw, _ := mw.CreateFormFile("zip", "big.zip")
	fw.Write(zbuf.Bytes())
	mw.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/admin/policy", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err = web.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), "Valid. Applying would change") {
		t.Errorf("a %d-byte policy zip was refused: %d\n%s", zbuf.Len(), resp.StatusCode, page)
	}
}
