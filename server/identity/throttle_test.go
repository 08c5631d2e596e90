package identity

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

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
		s := newService(db)
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

	// Past its limit, the attacker's address may try each account once:
	// a name that failed from it is refused, a fresh one is tried.
	for i := range maxAddressFailures {
		fail(fmt.Sprintf("spray-%d", i), "attacker")
	}
	if err := fail("spray-0", "attacker"); errs.Status(err) != 429 {
		t.Errorf("a sprayed name tried again from an address past its limit: %v", err)
	}
	if err := fail("spray-fresh", "attacker"); err != nil {
		t.Errorf("a fresh name from an address past its limit: %v", err)
	}
	if err := fail("spray-fresh", "attacker"); errs.Status(err) != 429 {
		t.Errorf("the fresh name's second try from an address past its limit: %v", err)
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

// TestThrottleEvictionKeepsAttackedAccount: a spray of fresh names from
// fresh addresses, well past the cap, keeps the table bounded without
// clearing an account that exists and is locked or under attack.
func TestThrottleEvictionKeepsAttackedAccount(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	th := NewThrottle()
	th.now = func() time.Time { return now }
	fail := func(account, addr string, known bool) error {
		a, err := th.Begin(account, addr)
		if err == nil {
			if known {
				a.Known()
			}
			a.Done(false)
		}
		return err
	}
	// pat is locked everywhere by ten addresses; lee has two failures.
	for n := range maxAccountFailures / maxPairFailures {
		for range maxPairFailures {
			fail("pat", fmt.Sprintf("bot-%d", n), true)
		}
	}
	if err := fail("pat", "pat-laptop", true); errs.Status(err) != 429 {
		t.Fatalf("pat is not locked: %v", err)
	}
	fail("lee", "bot-0", true)
	fail("lee", "bot-1", true)
	for i := range 2 * maxThrottleKeys {
		now = now.Add(time.Millisecond) // all well inside the window
		if err := fail(fmt.Sprintf("spray-%d", i), fmt.Sprintf("addr-%d", i), false); err != nil {
			t.Fatalf("spray %d refused: %v", i, err)
		}
		if len(th.keys) > maxThrottleKeys || th.recent.Len() != len(th.keys) {
			t.Fatalf("after %d sprayed names: %d keys, %d in order; the cap is %d", i+1, len(th.keys), th.recent.Len(), maxThrottleKeys)
		}
	}
	if err := fail("pat", "pat-laptop", true); errs.Status(err) != 429 {
		t.Errorf("pat's lock was cleared by the spray: %v", err)
	}
	if f := th.keys["u:lee"]; f == nil || f.count != 2 {
		t.Errorf("lee's failures after the spray: %+v, want 2", f)
	}
}

// TestThrottleSharedAddress: an attacker spraying wrong passwords from an
// address that others share (a NAT) does not lock them out: a user there
// with the right password signs in, while the accounts the attacker tried
// from there stay refused there. On both databases, through Login.
func TestThrottleSharedAddress(t *testing.T) {
	storetest.Each(t, func(t *testing.T, _ string, db *store.DB) {
		ctx := context.Background()
		s := newService(db)
		for _, u := range []string{"lee", "sam"} {
			if err := s.CreateUser(ctx, u, u+"-password-1"); err != nil {
				t.Fatal(err)
			}
			if err := s.Grant(ctx, u, Assignment{Scope{Project: "blue"}, "member"}); err != nil {
				t.Fatal(err)
			}
		}
		const nat = "198.51.100.7"
		for i := range 100 {
			name := "lee"
			if i%4 != 0 {
				name = fmt.Sprintf("guess-%d", i)
			}
			if _, err := s.Login(ctx, name, "wrong-password", nat, nil); err == nil {
				t.Fatalf("wrong password %d accepted", i)
			}
		}
		if _, err := s.Login(ctx, "sam", "sam-password-1", nat, nil); err != nil {
			t.Errorf("sam behind the attacked address, right password: %v", err)
		}
		if _, err := s.Login(ctx, "lee", "lee-password-1", nat, nil); errs.Status(err) != 429 {
			t.Errorf("lee, attacked from the address, right password from there: %v; want 429", err)
		}
		if _, err := s.Login(ctx, "guess-1", "wrong-password", nat, nil); errs.Status(err) != 429 {
			t.Errorf("a name already tried from the address: %v; want 429", err)
		}
	})
}
