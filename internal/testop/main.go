// Command testop is an OpenID provider for the browser journeys only:
// zitadel's example provider on loopback, with one registered client and
// Anvil's groups claim added to userinfo. Its user is
// test-user@<host>, password verysecure.
package main

import (
	"context"
	"flag"
	"log"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
)

type groupStorage struct {
	*storage.Storage
	groups []string
}

func (s *groupStorage) SetUserinfoFromToken(ctx context.Context, ui *oidc.UserInfo, tokenID, subject, origin string) error {
	if err := s.Storage.SetUserinfoFromToken(ctx, ui, tokenID, subject, origin); err != nil {
		return err
	}
	ui.AppendClaims("groups", s.groups)
	return nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:18090", "address to serve on (loopback only)")
	redirect := flag.String("redirect", "", "the client's redirect URL")
	groups := flag.String("groups", "", "comma-separated groups claim for the user")
	flag.Parse()
	if !strings.HasPrefix(*listen, "127.0.0.1:") {
		log.Fatal("testop serves on loopback only")
	}
	issuer := "http://" + *listen
	storage.RegisterClients(storage.WebClient("anvil", "anvil-secret", *redirect))
	st := &groupStorage{Storage: storage.NewStorage(storage.NewUserStore(issuer)), groups: strings.Split(*groups, ",")}
	h := exampleop.SetupServer(issuer, st, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), false)
	log.Fatal(http.ListenAndServe(*listen, h))
}
