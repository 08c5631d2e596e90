package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/anvilproject/anvil/server/config"
)

func TestPublicURL(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for listen, want := range map[string]string{
		"127.0.0.1:6385": "http://127.0.0.1:6385",
		"[::1]:6385":     "http://[::1]:6385",
		":6385":          "http://" + host + ":6385",
		"0.0.0.0:80":     "http://" + host + ":80",
		"[::]:6385":      "http://" + host + ":6385",
		"anvil.lan:6385": "http://anvil.lan:6385",
	} {
		if got, err := config.PublicURL("http", listen); err != nil || got != want {
			t.Errorf("PublicURL(%q) = %q, %v; want %q", listen, got, err, want)
		}
	}
	// A server serving TLS itself hands out https:// URLs.
	if got, _ := config.PublicURL("https", "anvil.lan:6385"); got != "https://anvil.lan:6385" {
		t.Errorf("PublicURL(https) = %q", got)
	}
	if _, err := config.PublicURL("http", "no-port"); err == nil {
		t.Error("an address without a port was accepted")
	}
}

func TestFirmwareDir(t *testing.T) {
	for db, want := range map[string]string{
		"/var/lib/anvil/anvil.db":           "/var/lib/anvil/firmware",
		"sqlite:///srv/a.db?_pragma=x":      "/srv/firmware",
		"anvil.db":                          "firmware",
		"":                                  "firmware",
		"postgres://anvil@db.example/anvil": "firmware",
		"postgresql://anvil@db.example/anvil?x=y": "firmware",
	} {
		if got := config.FirmwareDir(db); filepath.Clean(got) != filepath.Clean(want) {
			t.Errorf("FirmwareDir(%q) = %q, want %q", db, got, want)
		}
	}
}
