// Package webhook delivers chosen audit events (campaign progress, inbox
// notices, a request that a node's owner look at it) to one operator-configured
// HTTP endpoint, signed with a shared secret.
//
// Replicas share one cursor, the id of the last audit row handed out, in
// the settings table. A replica claims the rows after it by moving the
// cursor with a compare-and-set before it sends them, so each row is sent
// by at most one replica; a replica that dies between the claim and the
// send loses those rows rather than sending them twice.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/ent/setting"
	"github.com/anvilproject/anvil/server/audit"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/store"
)

// CursorKey is the setting holding the id of the last audit row claimed.
const CursorKey = "webhook:cursor"

// DefaultRules are the campaign events, the inbox notices (leases
// starting and ending, wipes, claims, requests to look at a node and
// their answers) and the node recovery rule, of which only the owner
// notifications are sent.
var DefaultRules = []string{"anvil:campaign:*", "anvil:notice:*", conductor.RuleRecover}

// Delivery defaults.
const (
	Timeout  = 10 * time.Second
	Retries  = 3
	batchMax = 100
)

// Config is the webhook an operator configured; a zero URL turns
// delivery off.
type Config struct {
	URL string
	// Secret keys the HMAC-SHA256 signature; required with URL, and never
	// logged.
	Secret string
	// Rules are rule names, or prefixes ending in "*"; empty means
	// DefaultRules.
	Rules []string
	// Poll is how often the audit log is read (default 1 s); Backoff the
	// first pause between attempts, doubling (default 1 s); Settle how old
	// a row must be before the cursor passes it (default 2 s), so that a
	// row whose transaction took a lower id but committed after a higher
	// one is not skipped.
	Poll, Backoff, Settle time.Duration
}

// Validate refuses a configuration that could not be delivered to, or
// that would send unsigned events.
func (c Config) Validate() error {
	if c.URL == "" {
		if c.Secret != "" {
			return errors.New("--webhook-secret is set but --webhook-url is not")
		}
		return nil
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Fragment != "" {
		return errors.New("--webhook-url: give an http:// or https:// URL such as https://hooks.example.com/anvil")
	}
	if c.Secret == "" {
		return errors.New("--webhook-secret is required with --webhook-url: receivers verify the X-Anvil-Signature it keys")
	}
	for _, r := range c.Rules {
		if r == "" || strings.Contains(strings.TrimSuffix(r, "*"), "*") {
			return fmt.Errorf("--webhook-rules %q: give rule names, or prefixes ending in *", r)
		}
	}
	return nil
}

// Dispatcher sends matching audit rows to the webhook.
type Dispatcher struct {
	db     *store.DB
	cfg    Config
	log    *slog.Logger
	client *http.Client
	target string // the URL without credentials, for logs
	m      *Metrics
}

// New validates cfg and returns its dispatcher, or nil when no URL is
// configured; m counts its deliveries.
func New(db *store.DB, cfg Config, log *slog.Logger, m *Metrics) (*Dispatcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.URL == "" {
		return nil, nil
	}
	if len(cfg.Rules) == 0 {
		cfg.Rules = DefaultRules
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 2 * time.Second
	}
	u, _ := url.Parse(cfg.URL)
	return &Dispatcher{db: db, cfg: cfg, log: log, m: m, target: u.Redacted(), client: &http.Client{
		Timeout: Timeout,
		// A redirect could lead the signed events somewhere the operator
		// did not name; it counts as a failed delivery instead.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}, nil
}

// Run delivers events until ctx ends.
func (d *Dispatcher) Run(ctx context.Context) {
	if err := d.initCursor(ctx); err != nil && ctx.Err() == nil {
		d.log.Error("webhook: cannot set the cursor up; retrying", "err", err)
	}
	t := time.NewTicker(d.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A full batch means more are waiting: read on at once.
		for {
			n, err := d.step(ctx)
			if err != nil && ctx.Err() == nil {
				d.log.Error("webhook: reading the audit log", "err", err)
			}
			if err != nil || n < batchMax {
				break
			}
		}
	}
}

// initCursor starts a fresh setup at the newest audit row: history
// before the webhook was configured is not replayed.
func (d *Dispatcher) initCursor(ctx context.Context) error {
	if n, err := d.db.Setting.Query().Where(setting.Key(CursorKey)).Count(ctx); err != nil || n > 0 {
		return err
	}
	last, err := d.db.AuditEvent.Query().Order(ent.Desc(auditevent.FieldID)).First(ctx)
	id := 0
	switch {
	case err == nil:
		id = last.ID
	case !ent.IsNotFound(err):
		return err
	}
	err = d.db.Setting.Create().SetKey(CursorKey).SetValue([]byte(strconv.Itoa(id))).Exec(ctx)
	if ent.IsConstraintError(err) {
		return nil // another replica set it first
	}
	return err
}

// step claims the settled rows after the cursor and sends those that
// match; it returns how many rows it claimed.
func (d *Dispatcher) step(ctx context.Context) (int, error) {
	cur, err := d.db.Setting.Query().Where(setting.Key(CursorKey)).Only(ctx)
	if ent.IsNotFound(err) {
		return 0, d.initCursor(ctx)
	}
	if err != nil {
		return 0, err
	}
	after, err := strconv.Atoi(string(cur.Value))
	if err != nil {
		return 0, fmt.Errorf("setting %s: %q is not an id", CursorKey, cur.Value)
	}
	rows, err := d.db.AuditEvent.Query().Where(auditevent.IDGT(after)).
		Order(ent.Asc(auditevent.FieldID)).Limit(batchMax).All(ctx)
	if err != nil {
		return 0, err
	}
	// The cursor stops before the first row younger than Settle: a
	// transaction that took a lower id may not have committed yet.
	settled := time.Now().Add(-d.cfg.Settle)
	for i, e := range rows {
		if e.CreatedAt.After(settled) {
			rows = rows[:i]
			break
		}
	}
	if len(rows) == 0 {
		return 0, nil
	}
	// The compare-and-set: only the replica that moves the cursor from
	// the value it read sends these rows.
	n, err := d.db.Setting.Update().Where(setting.Key(CursorKey), setting.Value(cur.Value)).
		SetValue([]byte(strconv.Itoa(rows[len(rows)-1].ID))).Save(ctx)
	if err != nil || n == 0 {
		return 0, err
	}
	// The claimed rows to send are the queue until each is delivered or
	// given up on.
	queued := d.matching(rows)
	d.m.queued.Add(float64(queued))
	defer func() { d.m.queued.Sub(float64(queued)) }()
	for i, e := range rows {
		if ctx.Err() != nil {
			// Shutting down: the rest are claimed and will not be sent.
			if lost := d.matching(rows[i:]); lost > 0 {
				d.m.deliveries.WithLabelValues(outcomeLost).Add(float64(lost))
				d.log.Warn("webhook: events not sent at shutdown", "count", lost, "from_id", e.ID)
			}
			break
		}
		if d.Match(e) {
			d.deliver(ctx, e)
			d.m.queued.Dec()
			queued--
		}
	}
	return len(rows), nil
}

func (d *Dispatcher) matching(rows []*ent.AuditEvent) int {
	n := 0
	for _, e := range rows {
		if d.Match(e) {
			n++
		}
	}
	return n
}

// Match tells whether e is an event the webhook receives.
func (d *Dispatcher) Match(e *ent.AuditEvent) bool {
	if e.Result != audit.Allowed {
		return false
	}
	if e.Rule == conductor.RuleRecover && e.Detail["action"] != conductor.RecoverNotify {
		return false
	}
	for _, r := range d.cfg.Rules {
		if p, glob := strings.CutSuffix(r, "*"); glob && strings.HasPrefix(e.Rule, p) || r == e.Rule {
			return true
		}
	}
	return false
}

// Event is the JSON body of a delivery.
type Event struct {
	ID         int            `json:"id"`
	Time       time.Time      `json:"time"`
	Rule       string         `json:"rule"`
	Result     string         `json:"result"`
	User       string         `json:"user"`
	Project    string         `json:"project"`
	TargetType string         `json:"target_type"`
	TargetID   string         `json:"target_id"`
	Detail     map[string]any `json:"detail"`
}

// Sign is the X-Anvil-Signature of body under secret.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// deliver posts e, retrying network errors and 5xx answers with a
// doubling pause; a delivery that still fails is logged and dropped.
func (d *Dispatcher) deliver(ctx context.Context, e *ent.AuditEvent) {
	body, err := json.Marshal(Event{ID: e.ID, Time: e.CreatedAt.UTC(), Rule: e.Rule, Result: e.Result, User: e.User,
		Project: e.Project, TargetType: e.TargetType, TargetID: e.TargetID, Detail: e.Detail})
	if err != nil {
		d.m.deliveries.WithLabelValues(outcomeFailed).Inc()
		d.log.Error("webhook: event not sent", "id", e.ID, "rule", e.Rule, "err", err)
		return
	}
	sig := Sign(d.cfg.Secret, body)
	pause := d.cfg.Backoff
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			d.m.retries.Inc()
		}
		retry, err := d.post(ctx, e, body, sig)
		if err == nil {
			d.m.deliveries.WithLabelValues(outcomeDelivered).Inc()
			return
		}
		if !retry || attempt == Retries || ctx.Err() != nil {
			d.m.deliveries.WithLabelValues(outcomeFailed).Inc()
			d.log.Error("webhook: event not delivered", "id", e.ID, "rule", e.Rule, "url", d.target, "attempts", attempt+1, "err", err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause *= 2
	}
}

// post makes one attempt; retry says whether another might succeed.
func (d *Dispatcher) post(ctx context.Context, e *ent.AuditEvent, body []byte, sig string) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Anvil-Event", e.Rule)
	req.Header.Set("X-Anvil-Delivery", strconv.Itoa(e.ID))
	req.Header.Set("X-Anvil-Signature", sig)
	resp, err := d.client.Do(req)
	if err != nil {
		// The client's errors quote the URL, credentials redacted.
		return true, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 500:
		return true, fmt.Errorf("receiver answered %s", resp.Status)
	case resp.StatusCode >= 300:
		return false, fmt.Errorf("receiver answered %s", resp.Status)
	}
	return false, nil
}
