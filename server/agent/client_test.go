package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// An agent's callback URL outside the provisioning networks is never
// dialled, and the refusal quotes no token.
func TestNetworksRefuseOutsideAddress(t *testing.T) {
	hit := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit = true }))
	defer srv.Close()
	token := strings.Repeat("Tk9", 12)
	c, err := New("n1", srv.URL, token, nil, Options{Timeout: 5 * time.Second,
		Networks: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.GetCommandsStatus(context.Background())
	if !errors.Is(err, ErrNetwork) || hit || strings.Contains(err.Error(), token) {
		t.Fatalf("want ErrNetwork without contact or token, got %v (hit %v)", err, hit)
	}
}

// An agent's error text loses the token and URL credentials, and is cut.
func TestCommandErrorMasked(t *testing.T) {
	token := strings.Repeat("Tk9", 12)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"id":"1","command_name":"prepare_image","command_status":"FAILED","command_error":` +
			`{"type":"ImageDownloadError","message":"Error downloading image","details":"token ` + token +
			` from https://u:pw@img.example/x?sig=AbCdEf0123456789AbCdEf ` + strings.Repeat("x", 3000) + `"}}`))
	}))
	defer srv.Close()
	c, err := New("n1", srv.URL, token, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.PrepareImage(context.Background(), ImageInfo{ID: "i", URLs: []string{"http://x"}}, nil)
	var ce *CommandError
	if !errors.As(err, &ce) || ce.Type != "ImageDownloadError" {
		t.Fatalf("want a CommandError, got %v", err)
	}
	msg := err.Error()
	for _, secret := range []string{token, "pw@", "AbCdEf0123456789AbCdEf"} {
		if strings.Contains(msg, secret) {
			t.Fatalf("error quotes %q: %s", secret, msg)
		}
	}
	if len(msg) > maxSaid+200 || !strings.Contains(msg, "standby.prepare_image") || !strings.Contains(msg, "n1") {
		t.Fatalf("error not cut or not naming command and node: %d bytes", len(msg))
	}
}
