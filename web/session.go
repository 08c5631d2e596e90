// Package web is the portal: server-rendered pages (templ components in
// views/) with htmx, behind gorilla/sessions cookies and a CSRF token on
// every form. Handlers stay thin: they call the same services as the API.
package web

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gorilla/sessions"

	"github.com/anvilproject/anvil/ent/setting"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/store"
)

const (
	cookieName = "anvil_session"
	// IdleTimeout ends a session nobody used for this long.
	IdleTimeout = 30 * time.Minute
	// AbsoluteTimeout ends every session this long after login.
	AbsoluteTimeout    = 12 * time.Hour
	sessionKeysSetting = "session_keys"
)

// Session is what the portal keeps about a browser, signed and encrypted
// in its cookie.
type Session struct {
	// ID names the server-side record (identity.StartSession) without
	// which the cookie signs nobody in.
	ID   string `json:"id,omitempty"`
	User string `json:"u,omitempty"`
	// Issuer and Subject identify an OIDC login; User is then only the
	// name it is shown by.
	Issuer  string `json:"iss,omitempty"`
	Subject string `json:"sub,omitempty"`
	Scope   identity.Scope
	Method  string `json:"m,omitempty"` // password or oidc
	// Assignments are the roles an OIDC login's claims granted, read on
	// each request from the session's server-side record, which the
	// provider refreshes; local accounts re-read theirs from the
	// database. Never in the cookie, whose old copies would keep them.
	Assignments []identity.Assignment `json:"-"`
	CSRF        string                `json:"c"`
	Created     int64                 `json:"t0"`
	Seen        int64                 `json:"t1"`
	// Flash is a message for the next page shown, set by a form's POST
	// before it redirects (POST, redirect, GET: a refresh resends nothing).
	Flash string `json:"f,omitempty"`
	// OIDC login in flight.
	State, Nonce, Verifier string `json:",omitempty"`
	// Expired marks the fresh session that replaced a signed-in one which
	// timed out or was ended, so the sign-in page can say so. Never stored.
	Expired bool `json:"-"`
	// staleCSRF is the timed-out session's token, which the pages it
	// served still send: a POST carrying it is the user's own, late.
	staleCSRF string
	// staleUser is whom the timed-out session signed in (Principal).
	staleUser string
	// Dropped is the action a timed-out session's page sent, which was
	// not done: the same person's next sign-in keeps it until a page has
	// offered it.
	Dropped *Dropped `json:"d,omitempty"`
	// sso is what the provider said at sign-in, for the new session's
	// server-side record. Never stored in the cookie.
	sso *identity.SSOUser
}

// LoggedIn reports whether the session belongs to a signed-in user whose
// session has not timed out.
func (s *Session) LoggedIn(now time.Time) bool {
	return s.User != "" && now.Sub(time.Unix(s.Created, 0)) < AbsoluteTimeout && now.Sub(time.Unix(s.Seen, 0)) < IdleTimeout
}

// Principal is the identity the session's server-side record belongs
// to: the local account's name, or the SSO identity's key.
func (s *Session) Principal() string {
	if s.Method == "oidc" {
		return identity.SSOKey(s.Issuer, s.Subject)
	}
	return s.User
}

// Sessions reads and writes Session values through gorilla/sessions.
type Sessions struct {
	store *sessions.CookieStore
}

// LoadKeys returns the session signing and encryption keys: derived from
// secret when the operator configured one (so replicas agree), else
// generated on first start and kept in the database.
func LoadKeys(ctx context.Context, db *store.DB, secret string) (hash, block []byte, err error) {
	if secret != "" {
		h := sha256.Sum256([]byte("anvil-session-hash\x00" + secret))
		b := sha256.Sum256([]byte("anvil-session-block\x00" + secret))
		return h[:], b[:], nil
	}
	fresh := make([]byte, 64)
	_, _ = rand.Read(fresh)
	// Insert-if-absent, then read back: concurrent first starts agree on
	// whichever row won.
	ins := db.Insert(setting.Table).Columns(setting.FieldKey, setting.FieldValue).Values(sessionKeysSetting, fresh)
	if _, err := store.Upsert(ctx, db, ins, false, setting.FieldKey); err != nil {
		return nil, nil, err
	}
	s, err := db.Setting.Query().Where(setting.Key(sessionKeysSetting)).Only(ctx)
	if err != nil {
		return nil, nil, err
	}
	return s.Value[:32], s.Value[32:64], nil
}

// NewSessions returns a cookie session store with the given keys.
func NewSessions(hash, block []byte) *Sessions {
	cs := sessions.NewCookieStore(hash, block)
	cs.Options = &sessions.Options{Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode, MaxAge: int(AbsoluteTimeout.Seconds())}
	cs.MaxAge(int(AbsoluteTimeout.Seconds()))
	return &Sessions{store: cs}
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Load returns the browser's session; a missing, tampered or expired
// cookie yields a fresh anonymous session with a new CSRF token.
func (s *Sessions) Load(c *fiber.Ctx) *Session {
	r, err := adaptor.ConvertRequest(c, false)
	if err == nil {
		if gs, err := s.store.Get(r, cookieName); err == nil {
			if raw, ok := gs.Values["s"].(string); ok {
				var sess Session
				if json.Unmarshal([]byte(raw), &sess) == nil && sess.CSRF != "" {
					if sess.User == "" || sess.LoggedIn(time.Now()) {
						return &sess
					}
					return &Session{CSRF: randomToken(), Expired: true, staleCSRF: sess.CSRF, staleUser: sess.Principal()}
				}
			}
		}
	}
	return &Session{CSRF: randomToken()}
}

// headerWriter collects the Set-Cookie header gorilla writes, since a
// fiber handler has no http.ResponseWriter.
type headerWriter http.Header

func (h headerWriter) Header() http.Header         { return http.Header(h) }
func (h headerWriter) Write(b []byte) (int, error) { return len(b), nil }
func (h headerWriter) WriteHeader(int)             {}

// Save writes sess into the response's cookie.
func (s *Sessions) Save(c *fiber.Ctx, sess *Session) error {
	return s.write(c, sess, false)
}

// Clear removes the cookie.
func (s *Sessions) Clear(c *fiber.Ctx) error { return s.write(c, &Session{}, true) }

// droppedCookie holds a timed-out session's last action (Dropped) apart
// from the session's own cookie, which stays as it was: another tab of
// the same timed-out session must still be told to sign in, not refused
// as forged. It lasts as long as a sign-in may take.
const droppedCookie = "anvil_dropped"

const droppedLifetime = time.Hour

// SaveDropped keeps d in its own cookie until the next sign-in.
func (s *Sessions) SaveDropped(c *fiber.Ctx, d *Dropped) error {
	raw, err := json.Marshal(d)
	if err != nil {
		return err
	}
	return s.writeCookie(c, droppedCookie, string(raw), int(droppedLifetime.Seconds()))
}

// TakeDropped reads the kept action, if any, and removes its cookie.
func (s *Sessions) TakeDropped(c *fiber.Ctx) (*Dropped, error) {
	if c.Cookies(droppedCookie) == "" {
		return nil, nil
	}
	var d *Dropped
	if r, err := adaptor.ConvertRequest(c, false); err == nil {
		if gs, err := s.store.Get(r, droppedCookie); err == nil {
			if raw, ok := gs.Values["s"].(string); ok {
				d = &Dropped{}
				if json.Unmarshal([]byte(raw), d) != nil {
					d = nil
				}
			}
		}
	}
	return d, s.writeCookie(c, droppedCookie, "", -1)
}

func (s *Sessions) write(c *fiber.Ctx, sess *Session, remove bool) error {
	raw, err := json.Marshal(sess)
	if err != nil {
		return err
	}
	maxAge := 0
	if remove {
		maxAge = -1
	}
	return s.writeCookie(c, cookieName, string(raw), maxAge)
}

// writeCookie sets cookie name to value, encrypted and signed; maxAge 0
// keeps the store's, -1 removes the cookie.
func (s *Sessions) writeCookie(c *fiber.Ctx, name, value string, maxAge int) error {
	r, err := adaptor.ConvertRequest(c, false)
	if err != nil {
		return err
	}
	gs := sessions.NewSession(s.store, name)
	opts := *s.store.Options
	opts.Secure = c.Protocol() == "https"
	if maxAge != 0 {
		opts.MaxAge = maxAge
	}
	gs.Options = &opts
	gs.Values["s"] = value
	h := headerWriter(http.Header{})
	if err := s.store.Save(r, h, gs); err != nil {
		return err
	}
	for _, v := range http.Header(h).Values("Set-Cookie") {
		c.Response().Header.Add("Set-Cookie", v)
	}
	return nil
}

// Fresh starts a new signed-in session for a local account: nothing of
// the anonymous one carries over, so a planted cookie cannot be promoted
// (no fixation).
func Fresh(user string, sc identity.Scope) *Session {
	now := time.Now().Unix()
	return &Session{User: user, Method: "password", Scope: sc, CSRF: randomToken(), Created: now, Seen: now}
}

// FreshSSO starts a new signed-in session for an OpenID identity.
func FreshSSO(u identity.SSOUser, sc identity.Scope) *Session {
	s := Fresh(u.Name, sc)
	s.Method, s.Issuer, s.Subject, s.Assignments, s.sso = "oidc", u.Issuer, u.Subject, u.Assignments, &u
	return s
}

// CSRFOK reports whether the request carries the session's CSRF token in
// the X-CSRF-Token header (htmx) or the csrf form field.
func CSRFOK(c *fiber.Ctx, sess *Session) bool { return csrfIs(c, sess.CSRF) }

func csrfIs(c *fiber.Ctx, want string) bool {
	got := c.Get("X-CSRF-Token")
	if got == "" {
		got = c.FormValue("csrf")
	}
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
