package identity

import (
	"fmt"
	"sync"
	"time"

	"github.com/anvilproject/anvil/server/errs"
)

// Login throttling: failures counted inside the window, per key. The
// tightest key is one account from one address, so a guesser stops
// quickly; an address is refused after more failures over any accounts;
// and an account is refused from everywhere only after failures from
// several addresses, so that one attacker address cannot lock its owner
// out: it reaches its own limits long before the account's.
const (
	throttleWindow  = 15 * time.Minute
	maxPairFailures = 5
	// maxAddressFailures is above what one person mistyping produces and
	// far below what guessing needs.
	maxAddressFailures = 20
	// maxAccountFailures needs at least ten addresses at maxPairFailures.
	maxAccountFailures = 50
	maxThrottleKeys    = 100_000
)

// Throttle counts failed logins per (account, address), per account and
// per client address, in memory: a replica forgets on restart, which
// bounds an attacker to the limits times the number of replicas —
// acceptable against guessing, and no lockout an attacker can make
// permanent.
type Throttle struct {
	mu   sync.Mutex
	keys map[string]*failures
	now  func() time.Time
}

type failures struct {
	count int
	first time.Time
}

// NewThrottle returns an empty throttle.
func NewThrottle() *Throttle {
	return &Throttle{keys: map[string]*failures{}, now: time.Now}
}

// Attempt is one login attempt counted in advance; Done settles it.
type Attempt struct {
	t    *Throttle
	held []*failures
	pair string
}

// Begin reserves a login attempt for account from addr before the
// password is checked, so that a burst of parallel attempts cannot all
// pass the check before the first failure is counted. It refuses with 429
// when any key is at its limit; the message says how long to wait and is
// the same whether the account exists or not.
func (t *Throttle) Begin(account, addr string) (*Attempt, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.bound(now)
	keys := []struct {
		key   string
		limit int
	}{{"p:" + account + "\x00" + addr, maxPairFailures}, {"u:" + account, maxAccountFailures}, {"a:" + addr, maxAddressFailures}}
	var wait time.Duration
	for _, k := range keys {
		f := t.keys[k.key]
		if f != nil && now.Sub(f.first) >= throttleWindow {
			delete(t.keys, k.key)
			f = nil
		}
		if f != nil && f.count >= k.limit {
			wait = max(wait, f.first.Add(throttleWindow).Sub(now))
		}
	}
	if wait > 0 {
		return nil, errs.TooMany("too many failed sign-in attempts; try again in %s", minutes(wait))
	}
	a := &Attempt{t: t, pair: keys[0].key}
	for _, k := range keys {
		f := t.keys[k.key]
		if f == nil {
			f = &failures{first: now}
			t.keys[k.key] = f
		}
		f.count++
		a.held = append(a.held, f)
	}
	return a, nil
}

// Done settles the attempt: a failure stays counted; a success gives the
// reservation back and clears the failures of this account from this
// address.
func (a *Attempt) Done(ok bool) {
	if !ok {
		return
	}
	a.t.mu.Lock()
	defer a.t.mu.Unlock()
	for _, f := range a.held {
		f.count = max(f.count-1, 0)
	}
	delete(a.t.keys, a.pair)
}

// bound keeps memory bounded under a spray of distinct names: drop
// expired entries first and then, if still full, everything.
func (t *Throttle) bound(now time.Time) {
	if len(t.keys) <= maxThrottleKeys {
		return
	}
	for k, f := range t.keys {
		if now.Sub(f.first) >= throttleWindow {
			delete(t.keys, k)
		}
	}
	if len(t.keys) > maxThrottleKeys {
		clear(t.keys)
	}
}

func minutes(d time.Duration) string {
	m := int((d + time.Minute - 1) / time.Minute)
	if m <= 1 {
		return "1 minute"
	}
	return fmt.Sprintf("%d minutes", m)
}
