package identity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/audit"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestLoginBurstIsThrottled: 40 wrong passwords at once reach bcrypt no
// more often than the limit allows, since each attempt is reserved before
// the password is checked.
func TestLoginBurstIsThrottled(t *testing.T) {
	storetest.Each(t, func(t *testing.T, _ string, db *store.DB) {
		ctx := context.Background()
		s := New(db, audit.New(db.Client, slog.New(slog.NewTextHandler(io.Discard, nil))))
		if err := s.CreateUser(ctx, "pat", "pat-password-1"); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		got := map[int]int{}
		var wg sync.WaitGroup
		for range 40 {
			wg.Go(func() {
				_, err := s.Login(ctx, "pat", "wrong-password", "192.0.2.1", nil)
				st := errs.Status(err)
				if errors.Is(err, ErrInvalidLogin) {
					st = 401
				}
				mu.Lock()
				got[st]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if got[401] != maxPairFailures || got[429] != 40-maxPairFailures {
			t.Errorf("40 parallel wrong passwords: %v; want %d checked and the rest refused", got, maxPairFailures)
		}
	})
}

// TestThrottleKeys: one address guessing at one account locks only that
// pair; an address is stopped across accounts; an account is locked
// everywhere only by many addresses; the message says how long to wait
// and is the same for unknown accounts; a success gives its attempt back.
func TestThrottleKeys(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	th := NewThrottle()
	th.now = func() time.Time { return now }
	fail := func(account, addr string) error {
		a, err := th.Begin(account, addr)
		if err == nil {
			a.Done(false)
		}
		return err
	}
	for i := range maxPairFailures {
		if err := fail("pat", "attacker"); err != nil {
			t.Fatalf("failure %d refused early: %v", i+1, err)
		}
	}
	err := fail("pat", "attacker")
	if errs.Status(err) != 429 || !strings.Contains(err.Error(), "try again in 15 minutes") {
		t.Fatalf("pair over its limit: %v", err)
	}
	if err := fail("nobody-by-this-name", "attacker"); err != nil {
		t.Fatalf("another account from the address: %v", err)
	}
	for range maxPairFailures {
		fail("nobody-by-this-name", "attacker")
	}
	if err2 := fail("nobody-by-this-name", "attacker"); err2 == nil || err2.Error() != err.Error() {
		t.Errorf("an unknown account's message %v differs from a known one's %v", err2, err)
	}
	// The owner, from its own address, is not locked out by the attacker.
	a, err := th.Begin("pat", "owner")
	if err != nil {
		t.Fatalf("the owner is locked out by another address: %v", err)
	}
	a.Done(true)

	// The attacker's address stops at its limit across accounts.
	for i := 0; ; i++ {
		if err := fail(fmt.Sprintf("spray-%d", i), "attacker"); err != nil {
			if i > maxAddressFailures {
				t.Fatalf("address refused only after %d sprayed names", i)
			}
			break
		}
	}
	// Ten addresses at their pair limit lock the account everywhere.
	for n := range maxAccountFailures / maxPairFailures {
		for range maxPairFailures {
			fail("lee", fmt.Sprintf("bot-%d", n))
		}
	}
	if err := fail("lee", "lee-laptop"); errs.Status(err) != 429 {
		t.Errorf("account after %d failures from many addresses: %v", maxAccountFailures, err)
	}

	now = now.Add(10 * time.Minute)
	if err := fail("pat", "attacker"); err == nil || !strings.Contains(err.Error(), "try again in 5 minutes") {
		t.Errorf("after 10 minutes: %v", err)
	}
	now = now.Add(5*time.Minute + time.Second)
	if err := fail("pat", "attacker"); err != nil {
		t.Errorf("after the window: %v", err)
	}
	// A success clears the pair and does not count.
	for range maxPairFailures - 1 {
		fail("sam", "home")
	}
	a, _ = th.Begin("sam", "home")
	a.Done(true)
	for i := range maxPairFailures {
		if err := fail("sam", "home"); err != nil {
			t.Fatalf("failure %d after a success refused: %v", i+1, err)
		}
	}
}
