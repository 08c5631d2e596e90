package identity

import (
	"container/list"
	"fmt"
	"sync"
	"time"

	"github.com/anvilproject/anvil/server/errs"
)

// Login throttling: failures counted inside the window, per key. The
// tightest key is one account from one address, so a guesser stops
// quickly; an account is refused from everywhere only after failures from
// several addresses, so that one attacker address cannot lock its owner
// out: it reaches its own limits long before the account's.
//
// An address past its limit is not refused outright, since many users may
// share it (a NAT, a proxy) and one of them guessing must not lock out the
// rest: from it, each account may still be tried while it has no failure
// from that address in the window — its pair limit drops from five to one.
// A user there signs in with the right password; a spray from there gets
// one guess per account per window, which the account limit then bounds
// across addresses, instead of five.
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
	// recent orders the keys, the most recently attempted first, for
	// bound to forget the least recent.
	recent list.List
	now    func() time.Time
}

type failures struct {
	key   string
	limit int
	count int
	first time.Time
	// known marks the key of an account that exists: there are no more
	// of those than accounts, so bound can afford to keep them all.
	known bool
	elem  *list.Element
}

func (f *failures) locked() bool { return f != nil && f.count >= f.limit }

func (f *failures) ends() time.Time { return f.first.Add(throttleWindow) }

// NewThrottle returns an empty throttle.
func NewThrottle() *Throttle {
	return &Throttle{keys: map[string]*failures{}, now: time.Now}
}

// Attempt is one login attempt counted in advance; Done settles it.
type Attempt struct {
	t       *Throttle
	held    []*failures
	pair    string
	account *failures
}

// get returns key's live entry, forgetting it once its window is over.
func (t *Throttle) get(key string, now time.Time) *failures {
	f := t.keys[key]
	if f != nil && !now.Before(f.ends()) {
		t.forget(f)
		return nil
	}
	return f
}

func (t *Throttle) forget(f *failures) {
	delete(t.keys, f.key)
	t.recent.Remove(f.elem)
}

// Begin reserves a login attempt for account from addr before the
// password is checked, so that a burst of parallel attempts cannot all
// pass the check before the first failure is counted. It refuses with 429
// when the pair or the account is at its limit, or the address is and
// this account has failed from it; the message says how long to wait and
// is the same whether the account exists or not.
func (t *Throttle) Begin(account, addr string) (*Attempt, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	keys := []struct {
		key   string
		limit int
	}{{"p:" + account + "\x00" + addr, maxPairFailures}, {"u:" + account, maxAccountFailures}, {"a:" + addr, maxAddressFailures}}
	pair, acct, address := t.get(keys[0].key, now), t.get(keys[1].key, now), t.get(keys[2].key, now)
	var wait time.Duration
	for _, f := range []*failures{pair, acct} {
		if f.locked() {
			wait = max(wait, f.ends().Sub(now))
		}
	}
	if address.locked() && pair != nil && pair.count > 0 {
		// Either the address's window or this pair's ending lets it in.
		wait = max(wait, min(address.ends().Sub(now), pair.ends().Sub(now)))
	}
	if wait > 0 {
		return nil, errs.TooMany("too many failed sign-in attempts; try again in %s", minutes(wait))
	}
	t.bound(now)
	a := &Attempt{t: t, pair: keys[0].key}
	for _, k := range keys {
		f := t.get(k.key, now)
		if f == nil {
			f = &failures{key: k.key, limit: k.limit, first: now}
			f.elem = t.recent.PushFront(f)
			t.keys[k.key] = f
		} else {
			t.recent.MoveToFront(f.elem)
		}
		f.count++
		a.held = append(a.held, f)
	}
	a.account = a.held[1]
	return a, nil
}

// Known says the attempt's account exists, so that its failures are
// never forgotten to make room (see bound).
func (a *Attempt) Known() {
	a.t.mu.Lock()
	defer a.t.mu.Unlock()
	a.account.known = true
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
	if f := a.t.keys[a.pair]; f != nil {
		a.t.forget(f)
	}
}

// bound keeps memory bounded under a spray of distinct names and
// addresses by forgetting, least recently attempted first, what matters
// least: first what has expired or locks nothing, then locks of pairs,
// addresses and names that are no account. The failures of an account
// that exists — locked or under attack — stay until their window ends,
// whatever the spray: clearing them would hand the attacker a fresh
// allowance. It forgets down to nine tenths of the cap, so that a spray
// pays for the walk once per ten thousand new keys rather than on every
// attempt.
func (t *Throttle) bound(now time.Time) {
	if len(t.keys)+3 <= maxThrottleKeys {
		return
	}
	keep := maxThrottleKeys * 9 / 10
	for _, spare := range []func(*failures) bool{
		func(f *failures) bool { return now.Before(f.ends()) && (f.locked() || f.known && f.count > 0) },
		func(f *failures) bool { return f.known && f.count > 0 && now.Before(f.ends()) },
	} {
		for e := t.recent.Back(); e != nil && len(t.keys) > keep; {
			f, prev := e.Value.(*failures), e.Prev()
			if !spare(f) {
				t.forget(f)
			}
			e = prev
		}
	}
}

func minutes(d time.Duration) string {
	m := int((d + time.Minute - 1) / time.Minute)
	if m <= 1 {
		return "1 minute"
	}
	return fmt.Sprintf("%d minutes", m)
}
