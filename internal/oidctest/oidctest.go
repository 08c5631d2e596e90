// Package oidctest is a real OpenID provider for tests and the browser
// journeys: zitadel's example provider with one registered client and
// Anvil's groups claim added to userinfo, as a directory-backed provider
// would add it. Its user is test-user@<issuer host>, password verysecure.
//
// Tests can also change the user's groups, revoke the client's grants,
// and sign back-channel logout tokens, as an operator of the provider
// would.
package oidctest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
)

// Password is the provider's user's password.
const Password = "verysecure"

// Subject is the provider's user's subject (sub claim).
const Subject = "id1"

type groupStorage struct {
	*storage.Storage
	mu     sync.Mutex
	groups []string
}

func (s *groupStorage) SetUserinfoFromToken(ctx context.Context, ui *oidc.UserInfo, tokenID, subject, origin string) error {
	if err := s.Storage.SetUserinfoFromToken(ctx, ui, tokenID, subject, origin); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ui.AppendClaims("groups", s.groups)
	return nil
}

// Provider is a running test provider.
type Provider struct {
	http.Handler
	issuer, clientID string
	st               *groupStorage
}

// New serves the provider at issuer, with a web client allowed to
// redirect to redirect and the user's groups claim set to groups.
func New(issuer, clientID, secret, redirect string, groups []string, log *slog.Logger) *Provider {
	storage.RegisterClients(storage.WebClient(clientID, secret, redirect))
	st := &groupStorage{Storage: storage.NewStorage(storage.NewUserStore(issuer)), groups: groups}
	return &Provider{Handler: exampleop.SetupServer(issuer, st, log, false), issuer: issuer, clientID: clientID, st: st}
}

// Handler is New for callers that only serve it.
func Handler(issuer, clientID, secret, redirect string, groups []string, log *slog.Logger) http.Handler {
	return New(issuer, clientID, secret, redirect, groups, log)
}

// SetGroups changes the user's groups claim, as a directory change would.
func (p *Provider) SetGroups(groups ...string) {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	p.st.groups = groups
}

// RevokeGrants revokes every access and refresh token the client holds
// for the user: the next refresh is refused with invalid_grant.
func (p *Provider) RevokeGrants() error {
	return p.st.TerminateSession(context.Background(), Subject, p.clientID)
}

// LogoutToken is a back-channel logout token for the user, signed with
// the provider's key; claims are added to or override (nil deletes) the
// standard ones, for tokens that must be refused.
func (p *Provider) LogoutToken(claims map[string]any) (string, error) {
	k, err := p.st.SigningKey(context.Background())
	if err != nil {
		return "", err
	}
	return p.sign(k.Key(), k.ID(), claims)
}

// ForgedLogoutToken is LogoutToken signed with a key the provider never
// published.
func (p *Provider) ForgedLogoutToken(claims map[string]any) (string, error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", err
	}
	kid, err := p.st.SigningKey(context.Background())
	if err != nil {
		return "", err
	}
	return p.sign(k, kid.ID(), claims)
}

func (p *Provider) sign(key any, kid string, extra map[string]any) (string, error) {
	now := time.Now()
	claims := map[string]any{
		"iss": p.issuer, "sub": Subject, "aud": p.clientID, "iat": now.Unix(), "exp": now.Add(2 * time.Minute).Unix(),
		"jti":    rand.Text(),
		"events": map[string]any{"http://schemas.openid.net/event/backchannel-logout": map[string]any{}},
	}
	for k, v := range extra {
		if v == nil {
			delete(claims, k)
		} else {
			claims[k] = v
		}
	}
	body, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("logout+jwt"))
	if err != nil {
		return "", err
	}
	jws, err := s.Sign(body)
	if err != nil {
		return "", err
	}
	return jws.CompactSerialize()
}
