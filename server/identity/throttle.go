package identity

import (
	"sync"
	"time"

	"github.com/anvilproject/anvil/server/errs"
)

// Login throttling limits: failures inside the window before a key is
// refused until the window passes.
const (
	throttleWindow     = 15 * time.Minute
	maxAccountFailures = 5
	maxAddressFailures = 20
	maxThrottleKeys    = 100_000
)

// Throttle counts failed logins per account and per client address, in
// memory: a replica forgets on restart, which bounds an attacker to the
// limits times the number of replicas — acceptable against guessing, and
// no lockout an attacker can make permanent.
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

// Allow refuses with 429 when the account or the address has failed too
// often within the window.
func (t *Throttle) Allow(account, addr string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.over("u:"+account, maxAccountFailures) || t.over("a:"+addr, maxAddressFailures) {
		return errs.TooMany("too many failed logins; try again later")
	}
	return nil
}

func (t *Throttle) over(key string, limit int) bool {
	f := t.keys[key]
	if f == nil {
		return false
	}
	if t.now().Sub(f.first) > throttleWindow {
		delete(t.keys, key)
		return false
	}
	return f.count >= limit
}

// Fail counts a failed login.
func (t *Throttle) Fail(account, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.keys) > maxThrottleKeys {
		// Under a spray of distinct names, drop expired entries first and
		// then, if still full, everything: memory is the scarcer resource.
		for k, f := range t.keys {
			if t.now().Sub(f.first) > throttleWindow {
				delete(t.keys, k)
			}
		}
		if len(t.keys) > maxThrottleKeys {
			clear(t.keys)
		}
	}
	for _, k := range []string{"u:" + account, "a:" + addr} {
		f := t.keys[k]
		if f == nil || t.now().Sub(f.first) > throttleWindow {
			f = &failures{first: t.now()}
			t.keys[k] = f
		}
		f.count++
	}
}

// Succeed clears an account's failures (its address keeps its count).
func (t *Throttle) Succeed(account string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.keys, "u:"+account)
}
