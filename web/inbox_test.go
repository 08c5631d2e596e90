package web_test

import (
	"context"
	"io"
	"log/slog"
	"mime/quotedprintable"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/inbox"
	"github.com/anvilproject/anvil/server/inbox/inboxtest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
	"github.com/anvilproject/anvil/server/webhook"
)

// TestAskTheOwner is issue 43's "Ask the owner" as a thread: the lessee
// member whose runbook failed asks with a message; the owner's member
// finds it in the inbox (the header counts it), with the failure in
// words and no API path, answers, and closes it; the lessee reads the
// answer and the close in its own inbox and may not close; a third
// project does not find the request at all. The owner's manager has the
// notices mailed: the request reaches a real SMTP server, and the inbox
// says it was sent. Every notice is an audit row the webhook sends.
func TestAskTheOwner(t *testing.T) {
	sink := inboxtest.Start(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		ctx := context.Background()
		srv, api, ids := fleetWith(t, server.Options{Database: setting, Mail: inbox.MailConfig{Addr: sink.Addr, From: "anvil@example.test", Poll: 100 * time.Millisecond}})
		for user, a := range map[string]identity.Assignment{
			"mia": {Scope: identity.Scope{Project: "blue"}, Role: "manager"},
			"rex": {Scope: identity.Scope{Project: "red"}, Role: "member"},
		} {
			if err := srv.IDs.CreateUser(ctx, user, user+"-password-1"); err != nil {
				t.Fatal(err)
			}
			if err := srv.IDs.Grant(ctx, user, a); err != nil {
				t.Fatal(err)
			}
		}
		id := ids["f-00"] // owner blue, lessee green
		mia, pat, gil, rex := signInAs(t, srv, "mia"), signInAs(t, srv, "pat"), signInAs(t, srv, "gil"), signInAs(t, srv, "rex")

		// Blue's manager has its notices mailed; a typo is refused and
		// nothing is saved.
		if st, page, _ := mia.do("POST", "/inbox/mail", url.Values{"csrf": {mia.csrf}, "addresses": {"blue-ops@example.test, not an address"}}); st != 400 ||
			!strings.Contains(page, "addresses: &#34;not&#34; is not an e-mail address") || !strings.Contains(page, `value="blue-ops@example.test, not an address"`) {
			t.Errorf("a bad address: %d\n%s", st, page)
		}
		if _, page, _ := pat.do("GET", "/inbox", nil); strings.Contains(page, "blue-ops@example.test") || strings.Contains(page, `name="addresses"`) {
			t.Error("a refused address was saved, or a member may change the addresses")
		}
		if st, page, h := mia.do("POST", "/inbox/mail", url.Values{"csrf": {mia.csrf}, "addresses": {"blue-ops@example.test"}}); st != 303 || h.Get("Location") != "/inbox" {
			t.Fatalf("set addresses: %d %s %v", st, page, h)
		}
		if st, _, _ := pat.do("POST", "/inbox/mail", url.Values{"csrf": {pat.csrf}, "addresses": {"pat@example.test"}}); st != 403 {
			t.Errorf("a member sets the addresses: %d", st)
		}

		// A failed run of a runbook the lessee member ran.
		r := api.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_X", "public": true, "steps": []map[string]any{{"interface": "power", "step": "power_on", "order": 1}}})
		if r.Status != 201 {
			t.Fatalf("runbook: %d %s", r.Status, r.Body)
		}
		api.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "manage"})
		waitManageable(t, api, id)
		if _, frag, _ := gil.do("POST", "/nodes/"+id+"/runbook", url.Values{"csrf": {gil.csrf}, "runbook": {"CUSTOM_X"}}, "HX-Request", "true"); strings.Contains(frag, `class="error"`) {
			t.Fatalf("run: %s", frag)
		}
		waitManageable(t, api, id)
		raw := "Step raid.create_configuration failed: node " + id + " has no target RAID configuration. Its owner or an operator must set one (API: PUT /v1/nodes/" + id + "/states/raid)"
		if err := srv.DB.Node.Update().Where(node.UUID(id)).SetProvisionState("clean failed").SetLastError(raw).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		msg := "Disk sdb looks dead after the burn-in; can you swap it?"
		if _, frag, _ := gil.do("POST", "/nodes/"+id+"/notify", url.Values{"csrf": {gil.csrf}, "message": {msg}}, "HX-Request", "true"); !strings.Contains(frag, "the request is in their inbox") {
			t.Fatalf("ask: %s", section(t, frag, "status"))
		}

		// The owner's member: a badge, the notice, the thread.
		_, page, _ := pat.do("GET", "/nodes", nil)
		if !strings.Contains(page, `data-testid="unread-badge">1<span class="sr-only"> unread</span>`) {
			t.Errorf("no unread badge for the owner's member")
		}
		_, page, _ = pat.do("GET", "/inbox", nil)
		if !strings.Contains(page, "gil asks you to look at node f-00") || !strings.Contains(page, "“"+msg+"”") || !strings.Contains(page, "(1 unread)") {
			t.Fatalf("the owner's inbox lacks the request:\n%s", page)
		}
		th, err := srv.DB.Thread.Query().Only(ctx)
		if err != nil {
			t.Fatal(err)
		}
		threadURL := "/inbox/threads/" + th.UUID
		if !strings.Contains(page, `href="`+threadURL+`"`) {
			t.Errorf("the notice does not link the request")
		}
		_, page, _ = pat.do("GET", threadURL, nil)
		for _, want := range []string{"Request about node f-00", "gil of project green", msg, "(RAID) failed: node " + id + " has no target RAID configuration. Its owner or an operator must set one.", ">Close the request</button>", `name="message"`} {
			if !strings.Contains(page, want) {
				t.Errorf("the owner's view of the request lacks %q", want)
			}
		}
		if strings.Contains(page, "/v1/") {
			t.Errorf("a project's view of the request shows an API path:\n%s", page)
		}
		// A third project does not find it; the asker may not close it.
		if st, _, _ := rex.do("GET", threadURL, nil); st != 404 {
			t.Errorf("another project reads the request: %d", st)
		}
		if st, _, _ := rex.do("POST", threadURL+"/reply", url.Values{"csrf": {rex.csrf}, "message": {"hi"}}); st != 404 {
			t.Errorf("another project answers the request: %d", st)
		}
		_, page, _ = gil.do("GET", threadURL, nil)
		if strings.Contains(page, ">Close the request</button>") || !strings.Contains(page, "Members of project blue, who were asked, and operators close this request") {
			t.Errorf("the asker's view offers the close, or does not say who may")
		}
		if st, page, _ := gil.do("POST", threadURL+"/close", url.Values{"csrf": {gil.csrf}}); st != 403 || !strings.Contains(page, "Your role may not do this here") {
			t.Errorf("the asker closes: %d", st)
		}
		// An empty answer is refused and nothing is posted.
		if st, page, _ := pat.do("POST", threadURL+"/reply", url.Values{"csrf": {pat.csrf}, "message": {"  "}}); st != 400 || !strings.Contains(page, "message: write your answer") {
			t.Errorf("an empty answer: %d", st)
		}
		answer := "Swapped sdb. Try the runbook again."
		if st, _, h := pat.do("POST", threadURL+"/reply", url.Values{"csrf": {pat.csrf}, "message": {answer}}); st != 303 || h.Get("Location") != threadURL {
			t.Fatalf("answer: %d", st)
		}
		if st, _, _ := pat.do("POST", threadURL+"/close", url.Values{"csrf": {pat.csrf}}); st != 303 {
			t.Fatalf("close: %d", st)
		}
		if st, page, _ := pat.do("POST", threadURL+"/reply", url.Values{"csrf": {pat.csrf}, "message": {"one more"}}); st != 409 || !strings.Contains(page, "This request was closed by pat") {
			t.Errorf("an answer after the close: %d", st)
		}
		_, page, _ = gil.do("GET", "/inbox", nil)
		for _, want := range []string{"pat answered about node f-00", answer, "pat closed your request about node f-00", "(2 unread)"} {
			if !strings.Contains(page, want) {
				t.Errorf("the asker's inbox lacks %q", want)
			}
		}
		if st, _, _ := gil.do("POST", "/inbox/read", url.Values{"csrf": {gil.csrf}}); st != 303 {
			t.Fatalf("mark read: %d", st)
		}
		if _, page, _ = gil.do("GET", "/inbox", nil); !strings.Contains(page, "(0 unread)") || strings.Contains(page, `data-testid="unread-badge"`) {
			t.Error("marking all read left unread notices")
		}
		if _, page, _ = rex.do("GET", "/inbox", nil); strings.Contains(page, "f-00") {
			t.Error("another project's inbox tells of the request")
		}

		// The request was mailed to blue's address, over SMTP.
		// The sink is shared by both databases' runs: find this run's.
		var mail string
		for deadline := time.Now().Add(20 * time.Second); mail == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			for _, m := range sink.Messages(t) {
				if b, err := readQP(m); err == nil && strings.Contains(m, "X-Anvil-Event: anvil:notice:ask") && strings.Contains(b, msg) && strings.Contains(b, threadURL) {
					mail = m
				}
			}
		}
		if mail == "" || !strings.Contains(mail, "To: blue-ops@example.test") || !strings.Contains(mail, "Subject: gil asks you to look at node f-00") {
			t.Fatalf("no mail of the request reached the SMTP server:\n%v", sink.Messages(t))
		}
		for deadline := time.Now().Add(10 * time.Second); ; {
			if _, page, _ = pat.do("GET", "/inbox", nil); strings.Contains(page, "E-mail: sent to blue-ops@example.test") || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !strings.Contains(page, "E-mail: sent to blue-ops@example.test") {
			t.Error("the inbox does not say the notice was mailed")
		}

		// Each notice is an audit row the webhook sends by default.
		rows, err := srv.DB.AuditEvent.Query().Where(auditevent.RuleHasPrefix(inbox.EventPrefix)).All(ctx)
		if err != nil || len(rows) != 3 {
			t.Fatalf("notice audit rows: %d %v", len(rows), err)
		}
		d, err := webhook.New(srv.DB, webhook.Config{URL: "https://hooks.example.test/anvil", Secret: "s"}, slog.Default(), webhook.NewMetrics(prometheus.NewRegistry()))
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range rows {
			if !d.Match(row) {
				t.Errorf("the webhook's default rules skip %s", row.Rule)
			}
		}
	})
}

// readQP is a mail's body decoded from quoted-printable.
func readQP(m string) (string, error) {
	m = strings.ReplaceAll(m, "\r\n", "\n")
	_, body, _ := strings.Cut(m, "\n\n")
	b, err := io.ReadAll(quotedprintable.NewReader(strings.NewReader(body)))
	return string(b), err
}
