// Package identity is who a caller is: local accounts with bcrypt hashes
// and login throttling, role assignments per project or on the system,
// and API tokens. It turns a proven identity and a chosen scope into the
// policies.Principal every decision is made for.
package identity

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"entgo.io/ent/dialect"
	"golang.org/x/crypto/bcrypt"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/apitoken"
	"github.com/anvilproject/anvil/ent/portalsession"
	"github.com/anvilproject/anvil/ent/roleassignment"
	"github.com/anvilproject/anvil/ent/sshkey"
	"github.com/anvilproject/anvil/ent/user"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/audit"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// BootstrapUser is the system admin created on first start.
const BootstrapUser = "admin"

// MinPasswordLen is the shortest password accepted.
const MinPasswordLen = 12

// ErrInvalidLogin is the one answer to every failed login, whatever the
// reason, so that nobody learns which account names exist.
var ErrInvalidLogin = errors.New("invalid username or password")

var userName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// Service manages accounts, roles and tokens.
type Service struct {
	db       *store.DB
	audit    *audit.Log
	throttle *Throttle
	cache    sync.Map // credential digest -> cachedPrincipal; see authCacheTTL
	cacheLen atomic.Int64
	cacheMu  sync.Mutex // serializes sweeps of cache
	// PasswordCost is the bcrypt cost of the password hashes the
	// service makes (Keystone's password_hash_rounds); bcrypt's default
	// when 0. Set it before the service is used. A hash keeps the cost it
	// was made with, so changing it never locks anyone out.
	PasswordCost int
	// dummy is compared against when an account does not exist, so a
	// failed login costs the same time either way; made at PasswordCost
	// on first use.
	dummyOnce sync.Once
	dummy     []byte
}

// New returns the identity service.
func New(db *store.DB, a *audit.Log) *Service {
	return &Service{db: db, audit: a, throttle: NewThrottle()}
}

// ValidPasswordCost checks a bcrypt cost given as PasswordCost.
func ValidPasswordCost(n int) error {
	if n < bcrypt.MinCost || n > bcrypt.MaxCost {
		return fmt.Errorf("bcrypt cost %d: give %d to %d (default %d)", n, bcrypt.MinCost, bcrypt.MaxCost, bcrypt.DefaultCost)
	}
	return nil
}

func (s *Service) hash(password string) ([]byte, error) {
	return bcrypt.GenerateFromPassword([]byte(password), cmp.Or(s.PasswordCost, bcrypt.DefaultCost))
}

func (s *Service) dummyHash() []byte {
	s.dummyOnce.Do(func() { s.dummy, _ = s.hash("anvil-timing-equalizer") })
	return s.dummy
}

// Scope is what a principal acts on: the system or one project.
type Scope struct {
	System  bool
	Project string
}

func (s Scope) String() string {
	if s.System {
		return "system"
	}
	return "project " + s.Project
}

// Assignment is one role a user holds in a scope.
type Assignment struct {
	Scope
	Role string
}

// UserInfo is a user with its role assignments, for listings.
type UserInfo struct {
	Name      string
	Disabled  bool
	LastLogin *time.Time
	Roles     []Assignment
}

func (s *Service) record(ctx context.Context, rule, target string, err error, detail map[string]any) {
	s.audit.Done(ctx, rule, "user", target, err, detail)
}

// GeneratePassword returns a random password of 20 base32 characters
// (100 bits).
func GeneratePassword() string {
	b := make([]byte, 13)
	_, _ = rand.Read(b)
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))[:20]
}

func validatePassword(pw string) error {
	if len(pw) < MinPasswordLen {
		return errs.BadRequest("password", "password must be at least %d characters", MinPasswordLen)
	}
	if len(pw) > 72 {
		// bcrypt reads only the first 72 bytes; refuse rather than
		// silently ignore the rest.
		return errs.BadRequest("password", "password must be at most 72 bytes")
	}
	return nil
}

// ValidateUserName checks an account name.
func ValidateUserName(name string) error {
	if !userName.MatchString(name) {
		return errs.BadRequest("name", "user name %q must be 1-64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit", name)
	}
	return nil
}

// CreateUser creates a local account.
func (s *Service) CreateUser(ctx context.Context, name, password string) error {
	return s.createUser(ctx, name, password, false)
}

// createUser creates a local account, marked when mustChange as having
// to replace its password before it may use the API or the portal.
func (s *Service) createUser(ctx context.Context, name, password string, mustChange bool) (err error) {
	defer func() { s.record(ctx, "anvil:user:manage", name, err, map[string]any{"action": "create"}) }()
	if err := ValidateUserName(name); err != nil {
		return err
	}
	if err := validatePassword(password); err != nil {
		return err
	}
	hash, err := s.hash(password)
	if err != nil {
		return err
	}
	err = s.db.User.Create().SetName(name).SetPasswordHash(string(hash)).SetMustChangePassword(mustChange).Exec(ctx)
	if ent.IsConstraintError(err) {
		return errs.Conflict("user %s already exists", name)
	}
	return err
}

func (s *Service) user(ctx context.Context, name string) (*ent.User, error) {
	u, err := s.db.User.Query().Where(user.Name(name)).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, errs.NotFound("user %s does not exist", name)
	}
	return u, err
}

// PasswordChangeMessage is the API's answer to an account that must
// change its password first, saying where it can.
func PasswordChangeMessage(name string) string {
	return fmt.Sprintf("the password of user %s must be changed before it can be used for the API: sign in to the portal, "+
		"which asks for a new one, or have an operator run 'anvil user set-password %s'", name, name)
}

// SetPassword replaces a user's password. Whoever sets it (an operator
// with the CLI, an admin in the portal) has taken charge of the account,
// so a mark that it must change its password is cleared.
func (s *Service) SetPassword(ctx context.Context, name, password string) (err error) {
	defer func() { s.record(ctx, "anvil:user:manage", name, err, map[string]any{"action": "set-password"}) }()
	if err := validatePassword(password); err != nil {
		return err
	}
	u, err := s.user(ctx, name)
	if err != nil {
		return err
	}
	hash, err := s.hash(password)
	if err != nil {
		return err
	}
	s.forget()
	if err := u.Update().SetPasswordHash(string(hash)).SetMustChangePassword(false).Exec(ctx); err != nil {
		return err
	}
	// Whoever held a session may have known the old password.
	return s.endSessions(ctx, name)
}

// ChangePassword is a user replacing its own password, proving the
// current one (throttled per account and address, as logins are). It
// clears the mark that the password must be changed, and ends the user's
// other sessions, which may belong to whoever knew the old password;
// session keepID, the one the change was made in, stays signed in.
func (s *Service) ChangePassword(ctx context.Context, name, current, next, addr, keepID string) (err error) {
	defer func() { s.record(ctx, "anvil:user:change-password", name, err, nil) }()
	attempt, err := s.throttle.Begin(name, addr)
	if err != nil {
		return err
	}
	ok := false
	defer func() { attempt.Done(ok) }()
	u, err := s.user(ctx, name)
	if err != nil {
		return err
	}
	attempt.Known()
	if bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(current)) != nil {
		return errs.BadRequest("current", "the current password is not right")
	}
	ok = true
	if err := validatePassword(next); err != nil {
		return errs.BadRequest("new", "%s", err)
	}
	if next == current {
		return errs.BadRequest("new", "the new password must differ from the current one")
	}
	hash, err := s.hash(next)
	if err != nil {
		return err
	}
	s.forget()
	if err := u.Update().SetPasswordHash(string(hash)).SetMustChangePassword(false).Exec(ctx); err != nil {
		return err
	}
	return s.endOtherSessions(ctx, name, keepID)
}

// DeleteUser removes a user with its roles, tokens, sessions and saved
// SSH keys.
func (s *Service) DeleteUser(ctx context.Context, name string) (err error) {
	defer func() { s.record(ctx, "anvil:user:manage", name, err, map[string]any{"action": "delete"}) }()
	u, err := s.user(ctx, name)
	if err != nil {
		return err
	}
	s.forget()
	return store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		if err := s.keepAnAdmin(ctx, tx, u.ID); err != nil {
			return err
		}
		if _, err := tx.RoleAssignment.Delete().Where(roleassignment.UserID(u.ID)).Exec(ctx); err != nil {
			return err
		}
		if _, err := tx.APIToken.Delete().Where(apitoken.UserID(u.ID)).Exec(ctx); err != nil {
			return err
		}
		if _, err := tx.PortalSession.Delete().Where(portalsession.Principal(name)).Exec(ctx); err != nil {
			return err
		}
		// Saved SSH keys belong to the name: an account made later with
		// it must not be offered this one's keys for its instances.
		if _, err := tx.SSHKey.Delete().Where(sshkey.Principal(name)).Exec(ctx); err != nil {
			return err
		}
		return tx.User.DeleteOneID(u.ID).Exec(ctx)
	})
}

// ValidateAssignment checks a role assignment before it is granted or
// revoked; the portal also checks one before asking about it.
func ValidateAssignment(a Assignment) error {
	if !policies.KnownRole(a.Role) {
		return errs.BadRequest("role", "role %q is not one of admin, manager, member, reader, service", a.Role)
	}
	if a.System == (a.Project != "") {
		return errs.BadRequest("scope", "give exactly one of a project or the system")
	}
	if !a.System {
		return nodes.ValidateProject("project", a.Project)
	}
	return nil
}

// Grant gives a user a role in a scope; granting a role held already is
// not an error.
func (s *Service) Grant(ctx context.Context, name string, a Assignment) (err error) {
	defer func() {
		s.record(ctx, "anvil:user:manage", name, err, map[string]any{"action": "grant", "scope": a.Scope.String(), "role": a.Role})
	}()
	if err := ValidateAssignment(a); err != nil {
		return err
	}
	u, err := s.user(ctx, name)
	if err != nil {
		return err
	}
	s.forget()
	cols := []string{roleassignment.FieldUserID, roleassignment.FieldSystem, roleassignment.FieldProject, roleassignment.FieldRole}
	ins := s.db.Insert(roleassignment.Table).Columns(cols...).Values(u.ID, a.System, a.Project, a.Role)
	_, err = store.Upsert(ctx, s.db, ins, false, cols...)
	return err
}

// Revoke takes a role away; revoking a role not held is a 404.
func (s *Service) Revoke(ctx context.Context, name string, a Assignment) (err error) {
	defer func() {
		s.record(ctx, "anvil:user:manage", name, err, map[string]any{"action": "revoke", "scope": a.Scope.String(), "role": a.Role})
	}()
	if err := ValidateAssignment(a); err != nil {
		return err
	}
	u, err := s.user(ctx, name)
	if err != nil {
		return err
	}
	s.forget()
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		if a.System && a.Role == adminRole {
			if err := s.keepAnAdmin(ctx, tx, u.ID); err != nil {
				return err
			}
		}
		n, err := tx.RoleAssignment.Delete().Where(roleassignment.UserID(u.ID), roleassignment.System(a.System),
			roleassignment.Project(a.Project), roleassignment.Role(a.Role)).Exec(ctx)
		if err == nil && n == 0 {
			err = errs.NotFound("user %s does not hold role %s on %s", name, a.Role, a.Scope)
		}
		return err
	})
	if err != nil {
		return err
	}
	// The user signs in again and gets a session for what it still holds.
	return s.endSessions(ctx, name)
}

// adminRole is the role that administers Anvil when held on the system.
const adminRole = "admin"

// keepAnAdmin refuses, inside tx, a change that takes the system admin
// role away from user id when no other active (not disabled) user holds
// it: nobody could then administer Anvil, nor grant the role again,
// without editing the database. Two such changes to two different admins
// must not both pass: on SQLite every write transaction holds the one
// writer lock from its start; on PostgreSQL the system admin assignments
// are locked (FOR UPDATE, in id order), so the second change waits for
// the first and then counts without the assignment it removed.
func (s *Service) keepAnAdmin(ctx context.Context, tx *ent.Client, id int) error {
	q := tx.RoleAssignment.Query().Where(roleassignment.System(true), roleassignment.Role(adminRole)).Order(ent.Asc(roleassignment.FieldID))
	if s.db.Dialect == dialect.Postgres {
		q = q.ForUpdate()
	}
	as, err := q.All(ctx)
	if err != nil {
		return err
	}
	ids := make([]int, len(as))
	for i, a := range as {
		ids[i] = a.UserID
	}
	active, err := tx.User.Query().Where(user.IDIn(ids...), user.Disabled(false)).All(ctx)
	if err != nil {
		return err
	}
	if len(active) == 1 && active[0].ID == id {
		return errs.Conflict("%s is the last active system admin; grant another user the admin role on the system first", active[0].Name)
	}
	return nil
}

// ListUsers returns every user with its roles, by name.
func (s *Service) ListUsers(ctx context.Context) ([]UserInfo, error) {
	us, err := s.db.User.Query().Order(ent.Asc(user.FieldName)).All(ctx)
	if err != nil {
		return nil, err
	}
	as, err := s.db.RoleAssignment.Query().All(ctx)
	if err != nil {
		return nil, err
	}
	byUser := map[int][]Assignment{}
	for _, a := range as {
		byUser[a.UserID] = append(byUser[a.UserID], Assignment{Scope{a.System, a.Project}, a.Role})
	}
	out := make([]UserInfo, len(us))
	for i, u := range us {
		rs := byUser[u.ID]
		slices.SortFunc(rs, func(a, b Assignment) int {
			return strings.Compare(a.Scope.String()+a.Role, b.Scope.String()+b.Role)
		})
		out[i] = UserInfo{Name: u.Name, Disabled: u.Disabled, LastLogin: u.LastLoginAt, Roles: rs}
	}
	return out, nil
}

// Bootstrap creates the first system admin when there are no users and
// returns its one-time password; it returns "" when users exist.
func (s *Service) Bootstrap(ctx context.Context) (string, error) {
	n, err := s.db.User.Query().Count(ctx)
	if err != nil || n > 0 {
		return "", err
	}
	ctx = policies.WithPrincipal(ctx, &policies.Principal{User: "anvil-bootstrap", System: true, Method: "bootstrap"})
	pw := GeneratePassword()
	// The password was written to a file: whoever reads the file next
	// must replace it before the account does anything else.
	if err := s.createUser(ctx, BootstrapUser, pw, true); err != nil {
		if errs.Status(err) == 409 {
			return "", nil // another replica won the race
		}
		return "", err
	}
	if err := s.Grant(ctx, BootstrapUser, Assignment{Scope{System: true}, adminRole}); err != nil {
		return "", err
	}
	return pw, nil
}

// Scopes lists the scopes a user may act in: the system first, then
// projects by name.
func (s *Service) Scopes(ctx context.Context, name string) ([]Scope, error) {
	u, err := s.user(ctx, name)
	if err != nil {
		return nil, err
	}
	as, err := s.db.RoleAssignment.Query().Where(roleassignment.UserID(u.ID)).All(ctx)
	if err != nil {
		return nil, err
	}
	return scopesOf(as), nil
}

func scopesOf(as []*ent.RoleAssignment) []Scope {
	var out []Scope
	for _, a := range as {
		sc := Scope{a.System, a.Project}
		if !slices.Contains(out, sc) {
			out = append(out, sc)
		}
	}
	slices.SortFunc(out, func(a, b Scope) int {
		if a.System != b.System {
			if a.System {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Project, b.Project)
	})
	return out
}

// principal builds the principal for u in scope from its assignments, or
// a 403 when u holds no role there.
func principal(u *ent.User, as []*ent.RoleAssignment, sc Scope, method string) (*policies.Principal, error) {
	var roles []string
	for _, a := range as {
		if a.System == sc.System && a.Project == sc.Project {
			roles = append(roles, a.Role)
		}
	}
	if len(roles) == 0 {
		return nil, errs.Forbidden("user %s holds no role on %s", u.Name, sc)
	}
	return &policies.Principal{User: u.Name, System: sc.System, Project: sc.Project, Roles: policies.ExpandRoles(roles), Method: method,
		MustChangePassword: u.MustChangePassword}, nil
}

// defaultScope picks the scope for a login that named none: the system
// when the user holds a system role, else its only project.
func defaultScope(name string, scopes []Scope) (Scope, error) {
	switch {
	case len(scopes) == 0:
		return Scope{}, errs.Forbidden("user %s holds no role anywhere", name)
	case scopes[0].System || len(scopes) == 1:
		return scopes[0], nil
	}
	return Scope{}, errs.BadRequest("X-Project-Id", "user %s has roles in %d projects; name one in the X-Project-Id header or use a token", name, len(scopes))
}

// Login checks a password and returns the principal for scope (the
// default scope when scope is nil). Failures are throttled per account
// and per address and all look alike.
func (s *Service) Login(ctx context.Context, name, password, addr string, scope *Scope) (*policies.Principal, error) {
	attempt, err := s.throttle.Begin(name, addr)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() { attempt.Done(ok) }()
	u, err := s.db.User.Query().Where(user.Name(name)).Only(ctx)
	if err != nil && !ent.IsNotFound(err) {
		return nil, err
	}
	if u != nil {
		attempt.Known()
	}
	if u == nil || u.Disabled {
		_ = bcrypt.CompareHashAndPassword(s.dummyHash(), []byte(password))
		return nil, ErrInvalidLogin
	}
	if bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(password)) != nil {
		return nil, ErrInvalidLogin
	}
	ok = true
	as, err := s.db.RoleAssignment.Query().Where(roleassignment.UserID(u.ID)).All(ctx)
	if err != nil {
		return nil, err
	}
	sc := Scope{}
	if scope != nil {
		sc = *scope
	} else if sc, err = defaultScope(name, scopesOf(as)); err != nil {
		return nil, err
	}
	p, err := principal(u, as, sc, "password")
	if err != nil {
		return nil, err
	}
	_ = u.Update().SetLastLoginAt(time.Now()).Exec(ctx)
	return p, nil
}

// PrincipalFor re-reads a user's roles for scope: sessions call it so a
// revoked role takes effect on the next request.
func (s *Service) PrincipalFor(ctx context.Context, name string, sc Scope, method string) (*policies.Principal, error) {
	u, err := s.user(ctx, name)
	if err != nil {
		return nil, err
	}
	if u.Disabled {
		return nil, errs.Forbidden("user %s is disabled", name)
	}
	as, err := s.db.RoleAssignment.Query().Where(roleassignment.UserID(u.ID)).All(ctx)
	if err != nil {
		return nil, err
	}
	return principal(u, as, sc, method)
}
