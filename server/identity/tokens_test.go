package identity

import (
	"context"
	"testing"

	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestTokensPage: every user's tokens come a page at a time, newest
// first, with whether more follow; Token finds one by UUID or is a 404.
func TestTokensPage(t *testing.T) {
	storetest.Each(t, func(t *testing.T, _ string, db *store.DB) {
		ctx := context.Background()
		s := newService(db)
		var ids []string
		for _, u := range []string{"ann", "bob"} {
			if err := s.CreateUser(ctx, u, u+"-password-1"); err != nil {
				t.Fatal(err)
			}
			if err := s.Grant(ctx, u, Assignment{Scope: Scope{Project: "p"}, Role: "member"}); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				_, info, err := s.CreateToken(ctx, TokenRequest{User: u, Scope: Scope{Project: "p"}, Roles: []string{"reader"}})
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, info.UUID)
			}
		}
		first, more, err := s.TokensPage(ctx, 0, 3)
		if err != nil || !more || len(first) != 3 || first[0].UUID != ids[3] || first[0].User != "bob" {
			t.Fatalf("first page: %v more=%v %v", first, more, err)
		}
		rest, more, err := s.TokensPage(ctx, 3, 3)
		if err != nil || more || len(rest) != 1 || rest[0].UUID != ids[0] || rest[0].User != "ann" {
			t.Fatalf("second page: %v more=%v %v", rest, more, err)
		}
		if got, err := s.Token(ctx, ids[1]); err != nil || got.User != "ann" || got.Scope.Project != "p" {
			t.Errorf("Token: %+v %v", got, err)
		}
		if _, err := s.Token(ctx, "no-such-token"); errs.Status(err) != 404 {
			t.Errorf("Token of a missing UUID: %v", err)
		}
	})
}
