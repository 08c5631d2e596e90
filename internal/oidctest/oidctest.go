// Package oidctest is a real OpenID provider for tests and the browser
// journeys: zitadel's example provider with one registered client and
// Anvil's groups claim added to userinfo, as a directory-backed provider
// would add it. Its user is test-user@<issuer host>, password verysecure.
package oidctest

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
)

// Password is the provider's user's password.
const Password = "verysecure"

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

// Handler serves the provider at issuer, with a web client allowed to
// redirect to redirect and the user's groups claim set to groups.
func Handler(issuer, clientID, secret, redirect string, groups []string, log *slog.Logger) http.Handler {
	storage.RegisterClients(storage.WebClient(clientID, secret, redirect))
	st := &groupStorage{Storage: storage.NewStorage(storage.NewUserStore(issuer)), groups: groups}
	return exampleop.SetupServer(issuer, st, log, false)
}
