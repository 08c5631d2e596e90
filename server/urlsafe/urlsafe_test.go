package urlsafe

import (
	"reflect"
	"testing"
)

func TestStrip(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://images.example/x.iso", "http://images.example/x.iso"},
		{"http://u:p@127.0.0.1:8080/x.iso", "http://***@127.0.0.1:8080/x.iso"},
		{"http://ghp_tokenonly@host/x.iso", "http://***@host/x.iso"},
		{"https://h/x.iso?token=abcdef&arch=x86_64", "https://h/x.iso?token=***&arch=x86_64"},
		{"https://b.s3.amazonaws.com/x.iso?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F20240101&X-Amz-Signature=0a1b2c&x-amz-security-token=zz",
			"https://b.s3.amazonaws.com/x.iso?X-Amz-Algorithm=***&X-Amz-Credential=***&X-Amz-Signature=***&x-amz-security-token=***"},
		{"https://swift/v1/AUTH_a/c/x.iso?temp_url_sig=da39a3ee&temp_url_expires=1700000000", "https://swift/v1/AUTH_a/c/x.iso?temp_url_sig=***&temp_url_expires=1700000000"},
		{"https://h/x?sig=s&Signature=S&Expires=1&access_token=a&client_secret=c&api_key=k&key=k&password=p&auth=a&credentials=c",
			"https://h/x?sig=***&Signature=***&Expires=1&access_token=***&client_secret=***&api_key=***&key=***&password=***&auth=***&credentials=***"},
		// A value that looks like a token, whatever its name.
		{"https://h/x.iso?v=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA", "https://h/x.iso?v=***"},
		{"https://h/x.iso?file=ubuntu-22.04-live-server-amd64.iso&n=0000000000000000000000000", "https://h/x.iso?file=ubuntu-22.04-live-server-amd64.iso&n=0000000000000000000000000"},
		// A parameter without a value, and an empty one, stay.
		{"https://h/x.iso?token&sig=", "https://h/x.iso?token&sig="},
		{"http://[::1:bad/x", Withheld},
	} {
		if got := Strip(tc.in); got != tc.want {
			t.Errorf("Strip(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

func TestText(t *testing.T) {
	in := `attaching "http://u:p@h/x.iso?token=abc" failed; see https://docs.example/vmedia`
	want := `attaching "http://***@h/x.iso?token=***" failed; see https://docs.example/vmedia`
	if got := Text(in); got != want {
		t.Fatalf("Text:\n got %q\nwant %q", got, want)
	}
}

func TestLooksLikeToken(t *testing.T) {
	for v, want := range map[string]bool{
		"abcdef":                           false,
		"d41d8cd98f00b204e9800998ecf8427e": true, // hex digest
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.x": true,  // a JWT's segments
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa":                     false, // one class
		"ubuntu-22.04-live-server-amd64":                     false, // short runs
		"Rm9vQmFyQmF6UXV4":                                   false, // under minToken
		"2024-01-01T00:00:00Z":                               false,
	} {
		if got := LooksLikeToken(v); got != want {
			t.Errorf("LooksLikeToken(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestStripAll(t *testing.T) {
	in := map[string]any{
		"image_source": "http://u:p@h/i.qcow2?token=t",
		"kernel":       "glance-uuid",
		"nested":       []any{map[string]any{"url": "https://h/fw.bin?sig=s"}, 3.0, true},
		"root_gb":      10.0,
	}
	want := map[string]any{
		"image_source": "http://***@h/i.qcow2?token=***",
		"kernel":       "glance-uuid",
		"nested":       []any{map[string]any{"url": "https://h/fw.bin?sig=***"}, 3.0, true},
		"root_gb":      10.0,
	}
	got := StripMap(in)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("StripMap:\n got %v\nwant %v", got, want)
	}
	if in["image_source"] != "http://u:p@h/i.qcow2?token=t" {
		t.Fatalf("StripMap changed its input: %v", in)
	}
	if StripMap(nil) != nil {
		t.Fatal("nil map")
	}
}
