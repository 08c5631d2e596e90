package identity

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"time"

	"github.com/anvilproject/anvil/ent/portalsession"
)

// SSOKey is the identity of an OpenID Connect user: the issuer and the
// subject, never the display name, so an SSO user called "admin" is not
// the local account "admin".
func SSOKey(issuer, subject string) string { return "sso|" + issuer + "|" + subject }

// StartSession records a signed-in browser for principal (a local account
// name or an SSOKey) and returns the secret id its cookie carries.
func (s *Service) StartSession(ctx context.Context, principal string, lifetime time.Duration) (string, error) {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	id := base64.RawURLEncoding.EncodeToString(raw)
	now := time.Now()
	// Sessions that ran out are dropped here rather than by a sweeper:
	// every replica signs people in now and then.
	if _, err := s.db.PortalSession.Delete().Where(portalsession.ExpiresAtLT(now)).Exec(ctx); err != nil {
		return "", err
	}
	err := s.db.PortalSession.Create().SetIDHash(digest(id)).SetPrincipal(principal).
		SetCreatedAt(now).SetExpiresAt(now.Add(lifetime)).Exec(ctx)
	return id, err
}

// SessionActive reports whether the session id is still on record for
// principal and has not expired.
func (s *Service) SessionActive(ctx context.Context, id, principal string) (bool, error) {
	if id == "" {
		return false, nil
	}
	return s.db.PortalSession.Query().Where(portalsession.IDHash(digest(id)), portalsession.Principal(principal),
		portalsession.ExpiresAtGT(time.Now())).Exist(ctx)
}

// EndSession ends one session (logout).
func (s *Service) EndSession(ctx context.Context, id string) error {
	_, err := s.db.PortalSession.Delete().Where(portalsession.IDHash(digest(id))).Exec(ctx)
	return err
}

// endSessions ends every session of a local account; a password change,
// a revoked role and a deleted account call it.
func (s *Service) endSessions(ctx context.Context, name string) error {
	_, err := s.db.PortalSession.Delete().Where(portalsession.Principal(name)).Exec(ctx)
	return err
}

// SSOUser is who an OpenID provider vouched for: the issuer and subject
// that identify it, the name it is shown by, and the roles its claims
// grant.
type SSOUser struct {
	Issuer, Subject, Name string
	Assignments           []Assignment
}

// Key is the user's identity; see SSOKey.
func (u SSOUser) Key() string { return SSOKey(u.Issuer, u.Subject) }
