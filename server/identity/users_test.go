package identity

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/anvilproject/anvil/ent/user"
	"github.com/anvilproject/anvil/server/audit"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestLastAdminStays: the last active system admin can be neither
// revoked (nor so demoted) nor deleted, whoever asks; a disabled admin
// does not count; other admins and project admins come and go freely.
// Two revocations of the two last admins at once leave one, on both
// databases.
func TestLastAdminStays(t *testing.T) {
	storetest.Each(t, func(t *testing.T, _ string, db *store.DB) {
		ctx := context.Background()
		s := newService(db)
		sysAdmin := Assignment{Scope{System: true}, "admin"}
		mk := func(name string, as ...Assignment) {
			t.Helper()
			if err := s.CreateUser(ctx, name, name+"-password-1"); err != nil {
				t.Fatal(err)
			}
			for _, a := range as {
				if err := s.Grant(ctx, name, a); err != nil {
					t.Fatal(err)
				}
			}
		}
		last := func(what string, err error) {
			t.Helper()
			if errs.Status(err) != 409 || !strings.Contains(err.Error(), "last active system admin") {
				t.Errorf("%s: %v; want 409 naming the last active system admin", what, err)
			}
		}
		mk("root", sysAdmin, Assignment{Scope{System: true}, "reader"}, Assignment{Scope{Project: "blue"}, "admin"})
		// A disabled admin is no admin.
		mk("gone", sysAdmin)
		if err := db.User.Update().Where(user.Name("gone")).SetDisabled(true).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		last("revoke the last admin, who stays a system reader", s.Revoke(ctx, "root", sysAdmin))
		last("delete the last admin", s.DeleteUser(ctx, "root"))
		if err := s.Revoke(ctx, "root", Assignment{Scope{Project: "blue"}, "admin"}); err != nil {
			t.Errorf("revoke a project admin role: %v", err)
		}
		if err := s.Revoke(ctx, "gone", sysAdmin); err != nil {
			t.Errorf("revoke a disabled admin: %v", err)
		}
		mk("ann", sysAdmin)
		if err := s.Revoke(ctx, "root", sysAdmin); err != nil {
			t.Errorf("revoke an admin while another stays: %v", err)
		}
		last("delete ann, now the last admin", s.DeleteUser(ctx, "ann"))
		if us, err := s.ListUsers(ctx); err != nil || admins(us) != 1 {
			t.Errorf("admins after the refusals: %d %v", admins(us), err)
		}

		// Two at once, revoked or deleted: exactly one passes, each time.
		keep := "ann"
		for round := range 6 {
			other := fmt.Sprintf("bob-%d", round)
			mk(other, sysAdmin)
			var wg sync.WaitGroup
			got := make([]error, 2)
			for i, name := range []string{keep, other} {
				wg.Go(func() {
					if round%2 == 0 {
						got[i] = s.Revoke(ctx, name, sysAdmin)
					} else {
						got[i] = s.DeleteUser(ctx, name)
					}
				})
			}
			wg.Wait()
			passed, refused := 0, 0
			for _, err := range got {
				switch {
				case err == nil:
					passed++
				case errs.Status(err) == 409:
					refused++
				}
			}
			if passed != 1 || refused != 1 {
				t.Errorf("round %d: two at once: %v, %v; want one to pass and one 409", round, got[0], got[1])
			}
			us, err := s.ListUsers(ctx)
			if err != nil || admins(us) != 1 {
				t.Fatalf("round %d: %d admins left (%v)", round, admins(us), err)
			}
			for _, u := range us {
				if isAdmin(u) {
					keep = u.Name
				}
			}
		}
	})
}

func isAdmin(u UserInfo) bool {
	for _, a := range u.Roles {
		if a.System && a.Role == "admin" && !u.Disabled {
			return true
		}
	}
	return false
}

func admins(us []UserInfo) int {
	n := 0
	for _, u := range us {
		if isAdmin(u) {
			n++
		}
	}
	return n
}

// TestPasswordCost: hashes are made at bcrypt's default cost unless the
// service is given another; a hash keeps its cost, so a password set
// before a change still logs in after it, and a login to a missing
// account costs what a real one does (its dummy hash at the same cost).
func TestPasswordCost(t *testing.T) {
	storetest.Each(t, func(t *testing.T, _ string, db *store.DB) {
		ctx := context.Background()
		s := New(db, audit.New(db.Client, slog.New(slog.NewTextHandler(io.Discard, nil))))
		cost := func(name string) int {
			t.Helper()
			u, err := db.User.Query().Where(user.Name(name)).Only(ctx)
			if err != nil {
				t.Fatal(err)
			}
			n, err := bcrypt.Cost([]byte(u.PasswordHash))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		if err := s.CreateUser(ctx, "dee", "dee-password-1"); err != nil {
			t.Fatal(err)
		}
		if err := s.Grant(ctx, "dee", Assignment{Scope{Project: "blue"}, "member"}); err != nil {
			t.Fatal(err)
		}
		if c := cost("dee"); c != bcrypt.DefaultCost {
			t.Errorf("default hash cost %d, want bcrypt's %d", c, bcrypt.DefaultCost)
		}
		s.PasswordCost = 5
		if err := s.CreateUser(ctx, "fay", "fay-password-1"); err != nil {
			t.Fatal(err)
		}
		if c := cost("fay"); c != 5 {
			t.Errorf("hash cost %d, want 5", c)
		}
		if _, err := s.Login(ctx, "dee", "dee-password-1", "192.0.2.1", nil); err != nil {
			t.Errorf("a password hashed at cost %d after the cost changed: %v", bcrypt.DefaultCost, err)
		}
		if _, err := s.Login(ctx, "nobody", "nobody-password-1", "192.0.2.1", nil); err == nil {
			t.Error("a missing account logged in")
		}
		if c, err := bcrypt.Cost(s.dummyHash()); err != nil || c != 5 {
			t.Errorf("dummy hash cost %d (%v), want the service's 5", c, err)
		}
		for _, bad := range []int{bcrypt.MinCost - 1, bcrypt.MaxCost + 1} {
			if ValidPasswordCost(bad) == nil {
				t.Errorf("cost %d accepted", bad)
			}
		}
	})
}

// newService is the service the tests use, hashing at bcrypt's lowest
// cost: the account and throttle rules do not depend on the cost, and
// the throttle tests log in hundreds of times (TestPasswordCost makes
// its own, at the default).
func newService(db *store.DB) *Service {
	s := New(db, audit.New(db.Client, slog.New(slog.NewTextHandler(io.Discard, nil))))
	s.PasswordCost = bcrypt.MinCost
	return s
}

// TestDeleteUserForgetsSSHKeys: deleting an account deletes the SSH keys
// saved under its name (so an account made later with the name is not
// offered them), and no one else's.
func TestDeleteUserForgetsSSHKeys(t *testing.T) {
	storetest.Each(t, func(t *testing.T, _ string, db *store.DB) {
		ctx := context.Background()
		s := newService(db)
		for _, name := range []string{"kim", "lou"} {
			if err := s.CreateUser(ctx, name, name+"-password-1"); err != nil {
				t.Fatal(err)
			}
			db.SSHKey.Create().SetPrincipal(name).SetName("laptop").SetPublicKey("ssh-ed25519 AAAA " + name).SetFingerprint("SHA256:" + name).ExecX(ctx)
		}
		if err := s.DeleteUser(ctx, "kim"); err != nil {
			t.Fatal(err)
		}
		if left := db.SSHKey.Query().AllX(ctx); len(left) != 1 || left[0].Principal != "lou" {
			t.Errorf("keys left after deleting kim: %v", left)
		}
	})
}
