package conductor

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/policies"
)

// TestImageCheckHidesAnswersFromProjects (#41): without
// --image-source-networks, a project caller whose image_source's server
// answers 404 reads only that it could not be fetched, since that
// server may be any host on the conductor's networks; a system caller
// reads the answer, and so does a project once an allow-list names the
// image servers. A refusal by the policy is said to everyone.
func TestImageCheckHidesAnswersFromProjects(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	project := policies.WithPrincipal(context.Background(), &policies.Principal{Project: "les", Roles: []string{"member"}})
	system := policies.WithPrincipal(context.Background(), &policies.Principal{System: true, Roles: []string{"admin"}})
	n := &ent.Node{UUID: "n1", Driver: "redfish", InstanceInfo: map[string]any{"image_source": srv.URL + "/gone.raw"}}
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	for _, c := range []struct {
		name  string
		allow []netip.Prefix
		ctx   context.Context
		want  string
		never string
	}{
		{"project, default policy", nil, project, "could not be fetched", "404"},
		{"system, default policy", nil, system, "404 Not Found", ""},
		{"project, allow-list", loopback, project, "404 Not Found", ""},
	} {
		cfg := Config{ImageSourceNetworks: c.allow}
		// The policy's own client would refuse loopback by default; the
		// wording is what is tested here, so every answer arrives.
		cd := &Conductor{cfg: cfg, log: slog.New(slog.DiscardHandler), fetch: http.DefaultClient}
		err := cd.checkImageSource(c.ctx, n)
		if err == nil || !strings.Contains(err.Error(), c.want) || (c.never != "" && strings.Contains(err.Error(), c.never)) {
			t.Errorf("%s: %v, want %q without %q", c.name, err, c.want, c.never)
		}
	}
	cd := &Conductor{cfg: Config{}, log: slog.New(slog.DiscardHandler)}
	cd.fetch = cd.cfg.egressPolicy().Client()
	if err := cd.checkImageSource(project, n); err == nil || !strings.Contains(err.Error(), "a loopback address") {
		t.Errorf("refused: %v", err)
	}
}
