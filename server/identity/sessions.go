package identity

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/portalsession"
	"github.com/anvilproject/anvil/server/errs"
)

// SSOKey is the identity of an OpenID Connect user: the issuer and the
// subject, never the display name, so an SSO user called "admin" is not
// the local account "admin".
func SSOKey(issuer, subject string) string { return "sso|" + issuer + "|" + subject }

// StartSession records a signed-in browser for principal (a local account
// name or an SSOKey) and returns the secret id its cookie carries. An
// OpenID sign-in passes what its provider said (sso), kept on the server
// so the roles can be read again and a back-channel logout can find it.
// addr is the client's address, shown to administrators listing sessions.
func (s *Service) StartSession(ctx context.Context, principal, addr string, lifetime time.Duration, sso *SSOUser) (string, error) {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	id := base64.RawURLEncoding.EncodeToString(raw)
	now := time.Now()
	// Sessions that ran out are dropped here rather than by a sweeper:
	// every replica signs people in now and then.
	if _, err := s.db.PortalSession.Delete().Where(portalsession.ExpiresAtLT(now)).Exec(ctx); err != nil {
		return "", err
	}
	c := s.db.PortalSession.Create().SetIDHash(digest(id)).SetPrincipal(principal).
		SetCreatedAt(now).SetExpiresAt(now.Add(lifetime)).SetSeenAt(now).SetClientAddr(addr)
	if sso != nil {
		c.SetSSOSid(sso.SID).SetRefreshToken(sso.RefreshToken).SetSSORoles(encodeRoles(sso.Assignments)).SetRolesAt(now)
	}
	return id, c.Exec(ctx)
}

// PortalSession is a signed-in browser's server-side record.
type PortalSession struct {
	// RefreshToken, Assignments and RolesAt are an OpenID sign-in's: the
	// token that reads its roles again, the roles, and when they were read.
	RefreshToken string
	Assignments  []Assignment
	RolesAt      time.Time
}

// Session returns the record of session id if it is still on record for
// principal and has not expired, else nil.
func (s *Service) Session(ctx context.Context, id, principal string) (*PortalSession, error) {
	if id == "" {
		return nil, nil
	}
	r, err := s.db.PortalSession.Query().Where(portalsession.IDHash(digest(id)), portalsession.Principal(principal),
		portalsession.ExpiresAtGT(time.Now())).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &PortalSession{RefreshToken: r.RefreshToken, Assignments: decodeRoles(r.SSORoles), RolesAt: r.RolesAt}, nil
}

// RefreshedSSO stores the roles an OpenID session's provider gave again,
// with the refresh token it gave for next time, provided the record still
// holds the token used (was): otherwise another request or replica
// refreshed it meanwhile, or the session ended, and it reports false.
func (s *Service) RefreshedSSO(ctx context.Context, id, was string, u SSOUser) (bool, error) {
	n, err := s.db.PortalSession.Update().Where(portalsession.IDHash(digest(id)), portalsession.RefreshToken(was)).
		SetRefreshToken(u.RefreshToken).SetSSORoles(encodeRoles(u.Assignments)).SetRolesAt(time.Now()).Save(ctx)
	return n > 0, err
}

// EndSSOSessions ends the sessions an OpenID provider's back-channel
// logout names: those of its session sid, else (no sid) every session of
// subject. A session recorded without a sid (the provider put none in
// the ID token) ends whenever its subject is named. It returns how many
// ended.
func (s *Service) EndSSOSessions(ctx context.Context, issuer, subject, sid string) (int, error) {
	q := s.db.PortalSession.Delete()
	switch {
	case subject != "" && sid != "":
		q.Where(portalsession.Principal(SSOKey(issuer, subject)),
			portalsession.Or(portalsession.SSOSid(sid), portalsession.SSOSidIsNil(), portalsession.SSOSid("")))
	case subject != "":
		q.Where(portalsession.Principal(SSOKey(issuer, subject)))
	default:
		q.Where(portalsession.PrincipalHasPrefix(SSOKey(issuer, "")), portalsession.SSOSid(sid))
	}
	n, err := q.Exec(ctx)
	s.record(ctx, "anvil:session:backchannel-logout", SSOKey(issuer, subject), err, map[string]any{"sid": sid, "sessions": n})
	return n, err
}

// Roles are stored as "system:<role>" and "project:<id>:<role>"; both
// parts were vetted when the provider's groups were read.
func encodeRoles(as []Assignment) []string {
	out := []string{}
	for _, a := range as {
		if a.System {
			out = append(out, "system:"+a.Role)
		} else {
			out = append(out, "project:"+a.Project+":"+a.Role)
		}
	}
	return out
}

func decodeRoles(rs []string) []Assignment {
	var out []Assignment
	for _, r := range rs {
		switch p := strings.Split(r, ":"); {
		case len(p) == 2 && p[0] == "system":
			out = append(out, Assignment{Scope: Scope{System: true}, Role: p[1]})
		case len(p) == 3 && p[0] == "project":
			out = append(out, Assignment{Scope: Scope{Project: p[1]}, Role: p[2]})
		}
	}
	return out
}

// EndSession ends one session (logout).
func (s *Service) EndSession(ctx context.Context, id string) error {
	_, err := s.db.PortalSession.Delete().Where(portalsession.IDHash(digest(id))).Exec(ctx)
	return err
}

// SessionSeen notes that session id was used now, for the sessions list.
func (s *Service) SessionSeen(ctx context.Context, id string) error {
	return s.db.PortalSession.Update().Where(portalsession.IDHash(digest(id))).SetSeenAt(time.Now()).Exec(ctx)
}

// SessionInfo is a signed-in browser as administrators see it: never its
// secret, only Ref, the record's number, which names it to RevokeSession.
type SessionInfo struct {
	Ref int
	// Principal is the account name, or SSOKey's "sso|issuer|subject".
	Principal  string
	SSO        bool
	ClientAddr string
	Created    time.Time
	Seen       *time.Time
	// Current marks the session of the id ListSessions was given: the
	// viewer's own.
	Current bool
}

// SessionQuery picks a page of ListSessions.
type SessionQuery struct {
	// Current is the caller's own session id (or ""), to be marked.
	Current string
	// User keeps the sessions whose account name (or SSO issuer and
	// subject) contains it, in any case.
	User string
	// Offset and Limit page the list; Limit 0 is every session.
	Offset, Limit int
}

// ListSessions returns a page of the sessions that have not expired, most
// recently used first, and how many match in all.
func (s *Service) ListSessions(ctx context.Context, q SessionQuery) ([]SessionInfo, int, error) {
	sq := s.db.PortalSession.Query().Where(portalsession.ExpiresAtGT(time.Now()))
	if q.User != "" {
		sq = sq.Where(portalsession.PrincipalContainsFold(q.User))
	}
	total, err := sq.Clone().Count(ctx)
	if err != nil {
		return nil, 0, err
	}
	sq = sq.Order(ent.Desc(portalsession.FieldSeenAt), ent.Desc(portalsession.FieldID)).Offset(q.Offset)
	if q.Limit > 0 {
		sq = sq.Limit(q.Limit)
	}
	rs, err := sq.All(ctx)
	if err != nil {
		return nil, 0, err
	}
	current := q.Current
	mine := ""
	if current != "" {
		mine = digest(current)
	}
	out := make([]SessionInfo, len(rs))
	for i, r := range rs {
		out[i] = SessionInfo{Ref: r.ID, Principal: r.Principal, SSO: strings.HasPrefix(r.Principal, "sso|"), ClientAddr: r.ClientAddr,
			Created: r.CreatedAt, Current: mine != "" && r.IDHash == mine}
		if !r.SeenAt.IsZero() {
			out[i].Seen = &r.SeenAt
		}
	}
	return out, total, nil
}

// RevokeSession ends the session numbered ref (SessionInfo.Ref) at once,
// on every replica, and audits it against the session's principal. A
// session already gone is a 404.
func (s *Service) RevokeSession(ctx context.Context, ref int) (err error) {
	r, err := s.db.PortalSession.Get(ctx, ref)
	if ent.IsNotFound(err) {
		return errs.NotFound("session %d is not on record: it ended or expired", ref)
	}
	if err != nil {
		return err
	}
	defer func() {
		s.record(ctx, "anvil:user:manage", r.Principal, err, map[string]any{"action": "end-session", "session": ref})
	}()
	return s.db.PortalSession.DeleteOneID(ref).Exec(ctx)
}

// endSessions ends every session of a local account; a password change,
// a revoked role and a deleted account call it.
func (s *Service) endSessions(ctx context.Context, name string) error {
	_, err := s.db.PortalSession.Delete().Where(portalsession.Principal(name)).Exec(ctx)
	return err
}

// endOtherSessions ends a user's sessions but session keepID.
func (s *Service) endOtherSessions(ctx context.Context, name, keepID string) error {
	_, err := s.db.PortalSession.Delete().Where(portalsession.Principal(name), portalsession.IDHashNEQ(digest(keepID))).Exec(ctx)
	return err
}

// SSOUser is who an OpenID provider vouched for: the issuer and subject
// that identify it, the name it is shown by, and the roles its claims
// grant.
type SSOUser struct {
	Issuer, Subject, Name string
	Assignments           []Assignment
	// SID is the provider's session id (the ID token's sid claim), and
	// RefreshToken what reads the roles again; both stay on the server.
	SID, RefreshToken string
}

// Key is the user's identity; see SSOKey.
func (u SSOUser) Key() string { return SSOKey(u.Issuer, u.Subject) }
