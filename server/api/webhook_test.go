package api_test

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/internal/syncbuf"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/campaigns"
	cond "github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
	"github.com/anvilproject/anvil/server/webhook"
)

const hookSecret = "hook-secret-for-tests"

// hookReceiver is a webhook endpoint that checks every delivery's
// signature and headers and keeps the ones it accepted.
type hookReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	got      []webhook.Event
	attempts map[string]int // by X-Anvil-Delivery
	targets  map[string]int // attempts by target_id
	// status answers a delivery's nth attempt (from 1); nil accepts all.
	status func(n int) int
	// redirect, when set, sends every delivery there instead.
	redirect string
}

func newHookReceiver(t *testing.T, status func(n int) int) *hookReceiver {
	h := &hookReceiver{attempts: map[string]int{}, targets: map[string]int{}, status: status}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("reading a delivery: %v", err)
			return
		}
		if want := webhook.Sign(hookSecret, body); !hmac.Equal([]byte(r.Header.Get("X-Anvil-Signature")), []byte(want)) {
			t.Errorf("signature %q, want %q", r.Header.Get("X-Anvil-Signature"), want)
		}
		var e webhook.Event
		if err := json.Unmarshal(body, &e); err != nil {
			t.Errorf("body is not an event: %v\n%s", err, body)
		}
		if r.Method != "POST" || r.Header.Get("Content-Type") != "application/json" ||
			r.Header.Get("X-Anvil-Event") != e.Rule || r.Header.Get("X-Anvil-Delivery") != strconv.Itoa(e.ID) {
			t.Errorf("%s with headers %v for %s", r.Method, r.Header, body)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		id := r.Header.Get("X-Anvil-Delivery")
		h.attempts[id]++
		h.targets[e.TargetID]++
		if h.redirect != "" {
			http.Redirect(w, r, h.redirect, http.StatusTemporaryRedirect)
			return
		}
		if h.status != nil {
			if code := h.status(h.attempts[id]); code != 200 {
				w.WriteHeader(code)
				return
			}
		}
		h.got = append(h.got, e)
	}))
	t.Cleanup(h.Close)
	return h
}

// events are the deliveries accepted so far.
func (h *hookReceiver) events() []webhook.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]webhook.Event(nil), h.got...)
}

// tries is how many times the delivery of audit row id was attempted.
func (h *hookReceiver) tries(id int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.attempts[strconv.Itoa(id)]
}

// tried is how many times an event on target was attempted.
func (h *hookReceiver) tried(target string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.targets[target]
}

// waitFor waits until an accepted delivery satisfies ok and returns it.
func (h *hookReceiver) waitFor(t *testing.T, what string, ok func(e webhook.Event) bool) webhook.Event {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		for _, e := range h.events() {
			if ok(e) {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no delivery of %s; got %+v", what, h.events())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func hookOptions(url string) server.Options {
	return server.Options{Webhook: webhook.Config{URL: url, Secret: hookSecret,
		Poll: 100 * time.Millisecond, Backoff: 50 * time.Millisecond, Settle: 200 * time.Millisecond}}
}

func ruleIs(rule, target string) func(e webhook.Event) bool {
	return func(e webhook.Event) bool { return e.Rule == rule && e.TargetID == target }
}

// A campaign run through the API reaches the webhook as its start,
// batch and finish events, signed, with the audit row's fields; nothing
// else the test did (enrolling nodes, a runbook) is sent, nor the audit
// history from before the webhook started.
func TestWebhookCampaignEvents(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		ctx := context.Background()
		// History: a matching row from before the webhook was set up.
		old, err := db.AuditEvent.Create().SetRule(campaigns.EventStart).SetResult("allowed").SetTargetType("campaign").SetTargetID("old").Save(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h := newHookReceiver(t, nil)
		_, clients := startLocal(t, setting, hookOptions(h.URL))
		admin := clients["system-admin"]
		mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_HOOK", "public": true,
			"steps": []any{map[string]any{"interface": "deploy", "step": "wait", "order": 1, "args": map[string]any{"seconds": 0}}}}), 201)
		names := campaignNodes(t, admin, "hook", "CUSTOM_HOOK", 2)
		r := admin.Do(t, "POST", "/v1/campaigns", map[string]any{"name": "hooked", "runbook": "CUSTOM_HOOK", "nodes": names, "max_concurrency": 1})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		waitCampaign(t, admin, id, stateIs("completed"))
		finish := h.waitFor(t, "the finish", ruleIs(campaigns.EventFinish, id))
		start := h.waitFor(t, "the start", ruleIs(campaigns.EventStart, id))
		if start.Detail["name"] != "hooked" || start.Detail["runbook"] != "CUSTOM_HOOK" || start.Result != "allowed" || start.TargetType != "campaign" || start.Time.IsZero() {
			t.Errorf("start: %+v", start)
		}
		if finish.Detail["state"] != "completed" || finish.Detail["succeeded"] != 2.0 || finish.ID <= start.ID || finish.Time.Before(start.Time) {
			t.Errorf("finish: %+v after start %+v", finish, start)
		}
		batches := 0
		for _, e := range h.events() {
			if !strings.HasPrefix(e.Rule, "anvil:campaign:") || e.ID <= old.ID {
				t.Errorf("delivered %s (id %d, history up to %d)", e.Rule, e.ID, old.ID)
			}
			if e.Rule == campaigns.EventBatch {
				batches++
			}
		}
		if batches != 2 {
			t.Errorf("%d batch events for 2 batches of 1", batches)
		}
	})
}

// Only allowed rows of the configured rules go out, and of the recover
// rule only the requests that the owner look.
func TestWebhookRules(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		h := newHookReceiver(t, nil)
		o := hookOptions(h.URL)
		o.Webhook.Rules = []string{cond.RuleRecover, "anvil:campaign:fin*"}
		srv, _ := startLocal(t, setting, o)
		ctx := context.Background()
		srv.Audit.Done(ctx, cond.RuleRecover, "node", "n-retry", nil, map[string]any{"action": cond.RecoverRetry})
		srv.Audit.Done(ctx, cond.RuleRecover, "node", "n-notify", nil, map[string]any{"action": cond.RecoverNotify, "runbook": "CUSTOM_X"})
		srv.Audit.Done(ctx, campaigns.EventStart, "campaign", "c-start", nil, nil)
		srv.Audit.Done(ctx, campaigns.EventFinish, "campaign", "c-failed", context.DeadlineExceeded, nil)
		srv.Audit.Done(ctx, campaigns.EventFinish, "campaign", "c-last", nil, map[string]any{"state": "completed"})
		h.waitFor(t, "the last event", ruleIs(campaigns.EventFinish, "c-last"))
		var got []string
		for _, e := range h.events() {
			got = append(got, e.TargetID)
		}
		if strings.Join(got, " ") != "n-notify c-last" {
			t.Errorf("delivered %v, want the notification and the last finish", got)
		}
	})
}

// A receiver failing twice with 500 gets the event on the third attempt,
// once.
func TestWebhookRetries(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		h := newHookReceiver(t, func(n int) int {
			if n <= 2 {
				return 500
			}
			return 200
		})
		srv, _ := startLocal(t, setting, hookOptions(h.URL))
		srv.Audit.Done(context.Background(), campaigns.EventStart, "campaign", "flaky", nil, nil)
		e := h.waitFor(t, "the event", ruleIs(campaigns.EventStart, "flaky"))
		if n, tries := len(h.events()), h.tries(e.ID); n != 1 || tries != 3 {
			t.Errorf("%d deliveries accepted after %d attempts, want 1 after 3", n, tries)
		}
	})
}

// A redirect is neither followed nor retried: the events go where the
// operator said or nowhere.
func TestWebhookNoRedirect(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		elsewhere := newHookReceiver(t, nil)
		h := newHookReceiver(t, nil)
		h.redirect = elsewhere.URL
		// Credentials in the URL are the operator's to give, not the log's.
		o := hookOptions(strings.Replace(h.URL, "://", "://anvil:pw-in-url@", 1))
		var logs syncbuf.Buffer
		o.Log = slog.New(slog.NewTextHandler(&logs, nil))
		srv, _ := startLocal(t, setting, o)
		ctx := context.Background()
		srv.Audit.Done(ctx, campaigns.EventStart, "campaign", "first", nil, nil)
		srv.Audit.Done(ctx, campaigns.EventStart, "campaign", "second", nil, nil)
		// Deliveries go one after the other: once the second is attempted
		// the first is over.
		deadline := time.Now().Add(time.Minute)
		for h.tried("second") == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the second event was never attempted")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if n := h.tried("first"); n != 1 || len(elsewhere.events()) != 0 {
			t.Errorf("first attempted %d times; the redirect's target got %+v", n, elsewhere.events())
		}
		l := logs.String()
		if !strings.Contains(l, "webhook: event not delivered") || strings.Contains(l, hookSecret) || strings.Contains(l, "pw-in-url") {
			t.Errorf("log of the failed deliveries, without the secret or the URL's password:\n%s", l)
		}
	})
}

// Two replicas on one database deliver each event exactly once: the
// campaign's, and a burst of rows more than a batch long.
func TestWebhookAcrossReplicas(t *testing.T) {
	setting := storetest.Setting(t, "postgres")
	h := newHookReceiver(t, nil)
	opts := func(name string) server.Options {
		o := hookOptions(h.URL)
		o.Database = setting
		o.Conductor = cond.Config{Name: name, Heartbeat: 200 * time.Millisecond, HeartbeatTimeout: 3 * time.Second}
		return o
	}
	srvA, clients := startLocal(t, setting, opts("hook-a"))
	srvB := servertest.Start(t, opts("hook-b"))
	waitRegistered(t, srvA, "hook-a", "hook-b")
	admin := clients["system-admin"]
	mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_HOOK_RING", "public": true,
		"steps": []any{map[string]any{"interface": "deploy", "step": "wait", "order": 1, "args": map[string]any{"seconds": 0}}}}), 201)
	names := campaignNodes(t, admin, "hookring", "CUSTOM_HOOK_RING", 4)
	r := admin.Do(t, "POST", "/v1/campaigns", map[string]any{"name": "ring", "runbook": "CUSTOM_HOOK_RING", "nodes": names, "max_concurrency": 2})
	mustStatus(t, r, 201)
	id := r.JSON(t)["uuid"].(string)
	ctx := context.Background()
	const burst = 250
	for i := range burst {
		srv := []*servertest.Server{srvA, srvB}[i%2]
		srv.Audit.Done(ctx, campaigns.EventBatch, "campaign", "burst-"+strconv.Itoa(i), nil, nil)
	}
	waitCampaign(t, admin, id, stateIs("completed"))
	h.waitFor(t, "the finish", ruleIs(campaigns.EventFinish, id))
	h.waitFor(t, "the burst's last", func(e webhook.Event) bool { return e.TargetID == "burst-"+strconv.Itoa(burst-1) })
	seen := map[int]int{}
	bursts := 0
	for _, e := range h.events() {
		seen[e.ID]++
		if strings.HasPrefix(e.TargetID, "burst-") {
			bursts++
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("audit row %d delivered %d times", id, n)
		}
	}
	if bursts != burst {
		t.Errorf("%d of the %d burst events delivered", bursts, burst)
	}
}

// A webhook that could not be delivered to, or would go unsigned, stops
// the server's start, naming the flag.
func TestWebhookConfigRefused(t *testing.T) {
	setting := storetest.Setting(t, "sqlite")
	for _, c := range []struct {
		cfg  webhook.Config
		want string
	}{
		{webhook.Config{URL: "https://hooks.example.com/anvil"}, "--webhook-secret is required"},
		{webhook.Config{Secret: "s"}, "--webhook-url is not"},
		{webhook.Config{URL: "ftp://hooks.example.com/", Secret: "s"}, "--webhook-url"},
		{webhook.Config{URL: "https:///path", Secret: "s"}, "--webhook-url"},
		{webhook.Config{URL: "https://hooks.example.com/", Secret: "s", Rules: []string{"anvil:*:start"}}, "--webhook-rules"},
	} {
		app, err := server.New(context.Background(), server.Options{Database: setting, Webhook: c.cfg})
		if err == nil {
			app.Close()
			t.Errorf("%+v started", c.cfg)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

// A lessee asking the owner to look at a failed run (#28) reaches the
// webhook as the recover rule's notify row; a refused request does not.
func TestWebhookOwnerNotify(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		h := newHookReceiver(t, nil)
		srv, clients := startLocal(t, setting, hookOptions(h.URL))
		admin, lessee := clients["system-admin"], clients["lessee-member"]
		mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_FW_HOOK", "public": true,
			"steps": []any{map[string]any{"interface": "firmware", "step": "update", "order": 1,
				"args": map[string]any{"settings": []any{map[string]any{"component": "bios", "url": "https://images.example/fail-bios.bin"}}}}}}), 201)
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "hook-notify", "driver": "fake-hardware", "owner": "own", "lessee": "les"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/traits/CUSTOM_FW_HOOK", nil), 204)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		provision(t, lessee, id, map[string]any{"target": "clean", "runbook": "CUSTOM_FW_HOOK"}, 202)
		waitState(t, admin, id, "clean failed")
		mustStatus(t, lessee.Do(t, "POST", "/v1/nodes/"+id+"/recover", map[string]any{"action": "notify"}), 204)
		mustStatus(t, admin.Do(t, "POST", "/v1/nodes/"+id+"/recover", map[string]any{"action": "return"}), 202)
		waitState(t, admin, id, "manageable")
		// Nothing failed now: refused, audited as failed, not sent.
		mustStatus(t, lessee.Do(t, "POST", "/v1/nodes/"+id+"/recover", map[string]any{"action": "notify"}), 409)
		srv.Audit.Done(context.Background(), campaigns.EventFinish, "campaign", "marker", nil, nil)
		h.waitFor(t, "the marker", ruleIs(campaigns.EventFinish, "marker"))
		var sent []webhook.Event
		for _, e := range h.events() {
			if e.Rule == cond.RuleRecover {
				sent = append(sent, e)
			}
		}
		if len(sent) != 1 || sent[0].TargetID != id || sent[0].User != "lessee-member" || sent[0].TargetType != "node" ||
			sent[0].Detail["action"] != "notify" || sent[0].Detail["runbook"] != "CUSTOM_FW_HOOK" {
			t.Errorf("recover events sent: %+v", sent)
		}
	})
}
