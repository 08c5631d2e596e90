package api_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/agent/agenttest"
	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/ramdisk"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// startAgents is startLocal behind a trusted proxy on loopback, so that
// each fake agent has its own address (X-Forwarded-For) and its own rate
// limit, as machines on a provisioning network do.
func startAgents(t *testing.T, setting string) (*servertest.Server, map[string]*servertest.Client) {
	_, lo, _ := net.ParseCIDR("127.0.0.1/32")
	return startLocal(t, setting, server.Options{TrustedProxies: []net.IPNet{*lo}})
}

// agentFrom is an unauthenticated client at address ip.
func agentFrom(srv *servertest.Server, ip string) *servertest.Client {
	c := srv.Client()
	c.Header.Set("X-Forwarded-For", ip)
	return c
}

// agents returns a client at a new address on each call, for tests that
// send more than one address's burst.
func agents(srv *servertest.Server) func() *servertest.Client {
	var mu sync.Mutex
	n := 0
	return func() *servertest.Client {
		mu.Lock()
		defer mu.Unlock()
		n++
		return agentFrom(srv, fmt.Sprintf("10.3.%d.%d", n/250, n%250+1))
	}
}

// agentNode creates a node of project "own" leased to "les" with a port
// of each MAC, and puts it in state.
func agentNode(t *testing.T, srv *servertest.Server, admin *servertest.Client, name, state string, macs ...string) string {
	t.Helper()
	r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": name, "driver": "fake-hardware", "owner": "own", "lessee": "les"})
	mustStatus(t, r, 201)
	id := r.JSON(t)["uuid"].(string)
	for _, m := range macs {
		mustStatus(t, admin.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": id, "address": m}), 201)
	}
	setState(t, srv, id, state)
	return id
}

// setState moves a node straight to state in the database: a test-only
// shortcut, since the conductor's in-band cleaning, deployment and
// inspection (the next steps of issue 25) are what will put a node in
// clean wait and the other states that expect an agent.
func setState(t *testing.T, srv *servertest.Server, id, state string) {
	t.Helper()
	if err := srv.DB.Node.Update().Where(node.UUID(id)).SetProvisionState(state).Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func lookupToken(t *testing.T, r *servertest.Response) any {
	t.Helper()
	mustStatus(t, r, 200)
	return r.JSON(t)["config"].(map[string]any)["agent_token"]
}

func beat(url, tok string) map[string]any {
	return map[string]any{"callback_url": url, "agent_version": "9.4.1", "agent_token": tok}
}

// TestAgentLookup: Ironic's lookup by MAC or UUID answers only for a node
// in a state that expects an agent, with one generic 404 otherwise; from
// 1.62 the first lookup issues the token and later ones get "******".
func TestAgentLookup(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, cs := startAgents(t, setting)
		admin := cs["system-admin"]
		ag := agents(srv)
		id := agentNode(t, srv, admin, "lk", "manageable", "52:54:00:aa:00:01", "52:54:00:aa:00:02")
		q := "/v1/lookup?addresses=52:54:00:AA:00:02,not-a-mac"
		wantFault(t, ag().Do(t, "GET", q, nil), 404, "Resource could not be found.")
		setState(t, srv, id, "clean wait")
		r := ag().Do(t, "GET", q, nil)
		tok, _ := lookupToken(t, r).(string)
		if len(tok) < 43 {
			t.Fatalf("token %q: want at least 43 characters", tok)
		}
		m := r.JSON(t)
		n := m["node"].(map[string]any)
		cfg := m["config"].(map[string]any)
		if n["uuid"] != id || cfg["agent_token_required"] != true || cfg["heartbeat_timeout"] != float64(300) {
			t.Errorf("lookup answer: %s", r.Body)
		}
		if fmt.Sprint(n["driver_internal_info"]) != "map[content:** Redacted - Requires baremetal:node:get:driver_internal_info permission. **]" {
			t.Errorf("an anonymous lookup shows driver_internal_info: %v", n["driver_internal_info"])
		}
		for _, k := range []string{"properties", "instance_info", "links"} {
			if _, ok := n[k]; !ok {
				t.Errorf("lookup node lacks %s: %s", k, r.Body)
			}
		}
		// Issued once: every later lookup, by MAC or UUID, gets the mask.
		if got := lookupToken(t, ag().Do(t, "GET", q, nil)); got != ramdisk.MaskedToken {
			t.Errorf("second lookup: token %v", got)
		}
		if got := lookupToken(t, ag().Do(t, "GET", "/v1/lookup?node_uuid="+id, nil)); got != ramdisk.MaskedToken {
			t.Errorf("lookup by uuid: token %v", got)
		}
		// Unknown, ambiguous, or no lookup information at all.
		wantFault(t, ag().Do(t, "GET", "/v1/lookup?addresses=52:54:00:aa:00:99", nil), 404, "Resource could not be found.")
		other := agentNode(t, srv, admin, "lk2", "clean wait", "52:54:00:aa:00:03")
		wantFault(t, ag().Do(t, "GET", "/v1/lookup?addresses=52:54:00:aa:00:01,52:54:00:aa:00:03", nil), 404, "Resource could not be found.")
		wantFault(t, ag().Do(t, "GET", "/v1/lookup?addresses=nonsense", nil), 400, "At least one of 'addresses' and 'node_uuid'")
		wantFault(t, ag().Do(t, "GET", "/v1/lookup?node_uuid=lk2", nil), 400, "node_uuid")
		wantFault(t, at(ag(), below(api.VerRamdisk)).Do(t, "GET", "/v1/lookup?addresses=52:54:00:aa:00:03", nil), 404)
		// Before 1.62 no token is issued (nor an existing one shown).
		if got := lookupToken(t, at(ag(), below(api.VerAgentToken)).Do(t, "GET", "/v1/lookup?addresses=52:54:00:aa:00:03", nil)); got != nil {
			t.Errorf("1.61 lookup: token %v", got)
		}
		if got, _ := lookupToken(t, at(ag(), api.VerAgentToken.String()).Do(t, "GET", "/v1/lookup?node_uuid="+other, nil)).(string); len(got) < 43 {
			t.Errorf("1.62 lookup after a 1.61 one: token %q", got)
		}
		// Every state Ironic lets the agent look up in, and a few it does not.
		for i, st := range []string{"deploying", "wait call-back", "cleaning", "inspecting", "inspect wait", "rescuing", "rescue wait", "servicing", "service wait",
			"available", "active", "enroll", "clean failed", "deploy failed"} {
			id := agentNode(t, srv, admin, fmt.Sprint("st", i), st, fmt.Sprintf("52:54:00:bb:00:%02x", i))
			want := 200
			if i >= 9 {
				want = 404
			}
			mustStatus(t, ag().Do(t, "GET", "/v1/lookup?node_uuid="+id, nil), want)
		}
	})
}

func selfSigned(t *testing.T) string {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// TestAgentHeartbeat: a heartbeat needs the node's own token and a node
// that expects it; its fields arrive at Ironic's versions; what it
// records is shown to system scope only, and the token to nobody.
func TestAgentHeartbeat(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, cs := startAgents(t, setting)
		admin := cs["system-admin"]
		ag := agents(srv)
		// The agent: its heartbeats come from the address it looked up
		// from, which its callback URL names.
		me := agentFrom(srv, "10.0.0.2")
		id := agentNode(t, srv, admin, "hb", "clean wait", "52:54:00:cc:00:01")
		other := agentNode(t, srv, admin, "hb2", "clean wait", "52:54:00:cc:00:02")
		tok := lookupToken(t, me.Do(t, "GET", "/v1/lookup?node_uuid="+id, nil)).(string)
		otherTok := lookupToken(t, ag().Do(t, "GET", "/v1/lookup?node_uuid="+other, nil)).(string)
		path := "/v1/heartbeat/" + id
		const cb = "https://10.0.0.2:9999"

		wantFault(t, ag().Do(t, "POST", path, map[string]any{"callback_url": cb, "agent_version": "9.4.1"}), 400, "Agent token is required")
		for _, bad := range []string{tok + "x", tok[:42], otherTok, ramdisk.MaskedToken} {
			wantFault(t, me.Do(t, "POST", path, beat(cb, bad)), 400, "Invalid or missing agent token received.")
		}
		// An unknown node answers exactly as a wrong token.
		wantFault(t, me.Do(t, "POST", "/v1/heartbeat/no-such-node", beat(cb, tok)), 400, "Invalid or missing agent token received.")
		wantFault(t, me.Do(t, "POST", "/v1/heartbeat/"+other, beat(cb, tok)), 400, "Invalid or missing agent token received.")
		// The token from another address, naming that address as its
		// callback: the token is bound to the lookup's address.
		wantFault(t, agentFrom(srv, "10.0.0.9").Do(t, "POST", path, beat("https://10.0.0.9:9999", tok)), 400, "Invalid or missing agent token received.")
		// A callback URL that is not the caller: commands would go
		// elsewhere than the machine that heartbeats.
		wantFault(t, ag().Do(t, "POST", path, beat(cb, tok)), 400, "callback_url")
		for _, u := range []string{"", "ftp://10.0.0.2/", "http://", "10.0.0.2:9999", "http://u:p@10.0.0.2/"} {
			wantFault(t, ag().Do(t, "POST", path, beat(u, tok)), 400, "callback_url")
		}
		wantFault(t, ag().Do(t, "POST", path, map[string]any{"callback_url": cb, "agent_token": tok}), 400, "version is required")
		wantFault(t, ag().Do(t, "POST", path, map[string]any{"callback_url": cb, "agent_token": tok, "agent_version": "1", "bogus": 1}), 400, "bogus")
		// Fields before their versions, in Ironic's words.
		wantFault(t, at(ag(), below(api.VerAgentVersion)).Do(t, "POST", path, beat(cb, tok)), 400, `Field "agent_version" not recognised`)
		ca := selfSigned(t)
		withCA := beat(cb, tok)
		withCA["agent_verify_ca"] = ca
		wantFault(t, at(ag(), below(api.VerAgentVerifyCA)).Do(t, "POST", path, withCA), 400, `Field "agent_verify_ca" not recognised`)
		withStatus := beat(cb, tok)
		withStatus["agent_status"] = "start"
		wantFault(t, at(ag(), below(api.VerAgentStatus)).Do(t, "POST", path, withStatus), 400, "agent_status")
		withStatus["agent_status"] = "sleeping"
		wantFault(t, ag().Do(t, "POST", path, withStatus), 400, "Agent status is invalid")
		badCA := beat(cb, tok)
		badCA["agent_verify_ca"] = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
		wantFault(t, ag().Do(t, "POST", path, badCA), 400, "agent_verify_ca")
		mustStatus(t, at(ag(), below(api.VerRamdisk)).Do(t, "POST", path, beat(cb, tok)), 404)
		// Nothing refused has been recorded.
		if _, ok := internal(t, admin, id)["agent_url"]; ok {
			t.Fatalf("a refused heartbeat was recorded")
		}

		r := at(me, api.VerAgentVerifyCA.String()).Do(t, "POST", path, withCA)
		mustStatus(t, r, 202)
		if len(r.Body) != 0 {
			t.Errorf("202 with a body: %s", r.Body)
		}
		dii := internal(t, admin, id)
		if dii["agent_url"] != cb || dii["agent_version"] != "9.4.1" || dii["agent_verify_ca"] != ca || dii["agent_last_heartbeat"] == nil {
			t.Errorf("system admin's driver_internal_info after a heartbeat: %v", dii)
		}
		if dii["agent_secret_token"] != "******" {
			t.Errorf("agent_secret_token shown as %v", dii["agent_secret_token"])
		}
		// The owner reads driver_internal_info, but not the agent's URL.
		if o := internal(t, cs["owner-reader"], id); o["agent_version"] != "9.4.1" || o["agent_url"] != nil {
			t.Errorf("owner reader's driver_internal_info: %v", o)
		}
		withStatus["agent_status"] = "end"
		mustStatus(t, me.Do(t, "POST", path, withStatus), 202)
		if st := internal(t, admin, id)["agent_status"]; st != "end" {
			t.Errorf("agent_status %v", st)
		}
		// Another agent claiming the node with its URL or certificate.
		wantFault(t, me.Do(t, "POST", path, beat("https://10.0.0.2:9998", tok)), 400, "callback_url")
		withCA["agent_verify_ca"] = selfSigned(t)
		wantFault(t, me.Do(t, "POST", path, withCA), 400, "agent_verify_ca")
		// By name, as Ironic's node_ident.
		mustStatus(t, me.Do(t, "POST", "/v1/heartbeat/hb", beat(cb, tok)), 202)
		// The node in the body, as tempest's ipa_heartbeat sends it; the
		// same checks, and the node given once.
		inBody := func(ident, token string) map[string]any {
			b := beat(cb, token)
			b["node_ident"] = ident
			return b
		}
		mustStatus(t, me.Do(t, "POST", "/v1/heartbeat", inBody(id, tok)), 202)
		mustStatus(t, me.Do(t, "POST", "/v1/heartbeat", inBody("hb", tok)), 202)
		wantFault(t, me.Do(t, "POST", "/v1/heartbeat", inBody(id, otherTok)), 400, "Invalid or missing agent token received.")
		wantFault(t, me.Do(t, "POST", "/v1/heartbeat", beat(cb, tok)), 400, "node_ident")
		wantFault(t, me.Do(t, "POST", path, inBody(id, tok)), 400, "node_ident")
		mustStatus(t, at(me, below(api.VerRamdisk)).Do(t, "POST", "/v1/heartbeat", inBody(id, tok)), 404)

		// A node that expects no heartbeat: 202 as Ironic answers, and
		// nothing recorded.
		setState(t, srv, id, "inspect wait")
		before, err := srv.DB.Node.Query().Where(node.UUID(id)).Only(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		mustStatus(t, me.Do(t, "POST", path, beat(cb, tok)), 202)
		after, err := srv.DB.Node.Query().Where(node.UUID(id)).Only(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if b, a := before.DriverInternalInfo[ramdisk.KeyLastHeartbeat], after.DriverInternalInfo[ramdisk.KeyLastHeartbeat]; a != b {
			t.Errorf("a heartbeat in inspect wait was recorded: %v → %v", b, a)
		}
		// Once the agent is wiped the old token is dead and the next boot's
		// lookup issues a new one.
		setState(t, srv, id, "clean wait")
		n, err := srv.DB.Node.Query().Where(node.UUID(id)).Only(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := ramdisk.Wipe(context.Background(), srv.DB, n); err != nil {
			t.Fatal(err)
		}
		wantFault(t, me.Do(t, "POST", path, beat(cb, tok)), 400, "Invalid or missing agent token received.")
		if _, ok := internal(t, admin, id)["agent_url"]; ok {
			t.Errorf("agent_url survived the wipe")
		}
		// The next boot's agent may have another address.
		next := agentFrom(srv, "10.0.0.12")
		fresh, _ := lookupToken(t, next.Do(t, "GET", "/v1/lookup?node_uuid="+id, nil)).(string)
		if len(fresh) < 43 || fresh == tok {
			t.Errorf("lookup after the wipe: token %q", fresh)
		}
		mustStatus(t, next.Do(t, "POST", path, beat("http://10.0.0.12:9999", fresh)), 202)
	})
}

func internal(t *testing.T, c *servertest.Client, id string) map[string]any {
	t.Helper()
	r := c.Do(t, "GET", "/v1/nodes/"+id, nil)
	mustStatus(t, r, 200)
	return r.JSON(t)["driver_internal_info"].(map[string]any)
}

// TestAgentTokenNeverShown: after lookup and heartbeat the token is in
// no answer to anyone: node, node list, history, audit events; the
// agent's URL reaches system scope only.
func TestAgentTokenNeverShown(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, cs := startAgents(t, setting)
		admin := cs["system-admin"]
		ag := agentFrom(srv, "10.9.8.7")
		id := agentNode(t, srv, admin, "leak", "clean wait", "52:54:00:dd:00:01")
		tok := lookupToken(t, ag.Do(t, "GET", "/v1/lookup?addresses=52:54:00:dd:00:01", nil)).(string)
		const cb = "http://10.9.8.7:9999"
		mustStatus(t, ag.Do(t, "POST", "/v1/heartbeat/"+id, beat(cb, tok)), 202)
		wantFault(t, ag.Do(t, "POST", "/v1/heartbeat/"+id, beat(cb, tok+"x")), 400)
		srv.Audit.Flush(context.Background())
		paths := []string{"/v1/nodes/" + id, "/v1/nodes?detail=true", "/v1/nodes/detail", "/v1/nodes/" + id + "/history",
			"/v1/nodes?fields=driver_internal_info", "/v1/events?limit=1000"}
		for _, p := range personas {
			for _, path := range paths {
				r := cs[p.name].Do(t, "GET", path, nil)
				if strings.Contains(string(r.Body), tok) {
					t.Errorf("%s GET %s shows the agent token", p.name, path)
				}
				if strings.Contains(string(r.Body), "10.9.8.7") && !strings.HasPrefix(p.name, "system-") {
					t.Errorf("%s GET %s shows the agent's URL: %s", p.name, path, r.Body)
				}
			}
		}
		// The audit trail: the token's issue and the agent's first
		// heartbeat each, the refusal in aggregate.
		events := func(q string) []any {
			r := admin.Do(t, "GET", "/v1/events?"+q, nil)
			mustStatus(t, r, 200)
			return r.JSON(t)["events"].([]any)
		}
		if ev := events("rule=baremetal:driver:ipa_lookup&result=allowed&target_id=" + id); len(ev) != 1 {
			t.Errorf("token issue events: %v", ev)
		}
		if ev := events("rule=baremetal:node:ipa_heartbeat&result=allowed&target_id=" + id); len(ev) != 1 {
			t.Errorf("first heartbeat events: %v", ev)
		}
		if ev := events("rule=baremetal:node:ipa_heartbeat&result=failed"); len(ev) != 1 || !strings.Contains(fmt.Sprint(ev), "count:1") {
			t.Errorf("failed heartbeat events: %v", ev)
		}
	})
}

// TestAgentConcurrentLookup: agents looking a node up at once receive one
// token between them; the others get the mask, and the one issued is the
// one stored.
func TestAgentConcurrentLookup(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, cs := startAgents(t, setting)
		id := agentNode(t, srv, cs["system-admin"], "race", "clean wait", "52:54:00:ee:00:01")
		const n = 8
		toks := make([]string, n)
		from := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				from[i] = fmt.Sprint("10.1.0.", i)
				r := agentFrom(srv, from[i]).Do(t, "GET", "/v1/lookup?addresses=52:54:00:ee:00:01", nil)
				if r.Status == 200 {
					toks[i], _ = r.JSON(t)["config"].(map[string]any)["agent_token"].(string)
				}
			})
		}
		wg.Wait()
		var issued, to []string
		for i, tk := range toks {
			if tk != ramdisk.MaskedToken {
				issued, to = append(issued, tk), append(to, from[i])
			}
		}
		if len(issued) != 1 {
			t.Fatalf("%d tokens issued to %d concurrent lookups: %q", len(issued), n, toks)
		}
		// Only from the address it was issued to.
		wantFault(t, agentFrom(srv, "10.1.1.1").Do(t, "POST", "/v1/heartbeat/"+id, beat("http://10.1.1.1:9999", issued[0])), 400, "Invalid or missing agent token")
		mustStatus(t, agentFrom(srv, to[0]).Do(t, "POST", "/v1/heartbeat/"+id, beat("http://"+to[0]+":9999", issued[0])), 202)
	})
}

// TestAgentHeartbeatsTogether: agents heartbeating at once, which the
// server records together (SQLite commits them in one transaction) and
// from their second heartbeat in one conditional write: each heartbeat
// gets its own answer, a wrong token or a changed URL among good ones is
// refused and changes nothing, each node keeps its own agent's URL, and
// each agent's first heartbeat is audited once.
func TestAgentHeartbeatsTogether(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, cs := startAgents(t, setting)
		const n = 12
		ids, toks, urls := make([]string, n), make([]string, n), make([]string, n)
		for i := range n {
			ids[i] = agentNode(t, srv, cs["system-admin"], fmt.Sprint("together-", i), "clean wait", fmt.Sprintf("52:54:00:dd:00:%02x", i))
			toks[i] = lookupToken(t, agentFrom(srv, fmt.Sprint("10.4.0.", i+1)).Do(t, "GET", "/v1/lookup?node_uuid="+ids[i], nil)).(string)
			urls[i] = fmt.Sprintf("http://10.4.0.%d:9999", i+1)
		}
		status := make([][]int, n)
		var wg sync.WaitGroup
		for i := range n {
			status[i] = make([]int, 4)
			wg.Go(func() {
				ag := agentFrom(srv, fmt.Sprint("10.4.0.", i+1))
				for round := range 3 {
					status[i][round] = ag.Do(t, "POST", "/v1/heartbeat/"+ids[i], beat(urls[i], toks[i])).Status
				}
			})
			wg.Go(func() {
				// The next node's token, from elsewhere, then the right
				// token with another URL.
				ag := agentFrom(srv, fmt.Sprint("10.4.1.", i+1))
				if st := ag.Do(t, "POST", "/v1/heartbeat/"+ids[i], beat(urls[i], toks[(i+1)%n])).Status; st != 400 {
					status[i][3] = st
				}
			})
		}
		wg.Wait()
		for i := range n {
			if fmt.Sprint(status[i][:3]) != "[202 202 202]" || status[i][3] != 0 {
				t.Errorf("node %d: heartbeats answered %v (a wrong token: %d, want 400)", i, status[i][:3], status[i][3])
			}
			// With the URL already recorded, another one is refused, even
			// from the agent's own address; from another address the
			// token itself is refused (a lookup bound it to the agent's).
			src := fmt.Sprint("10.4.0.", i+1)
			wantFault(t, agentFrom(srv, src).Do(t, "POST", "/v1/heartbeat/"+ids[i], beat("http://"+src+":9998", toks[i])), 400, "callback_url")
			wantFault(t, agentFrom(srv, "10.4.2.1").Do(t, "POST", "/v1/heartbeat/"+ids[i], beat("http://10.4.2.1:9999", toks[i])), 400, "Invalid or missing agent token")
			nd, err := srv.DB.Node.Query().Where(node.UUID(ids[i])).Only(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if nd.DriverInternalInfo[ramdisk.KeyURL] != urls[i] || nd.DriverInternalInfo[ramdisk.KeyLastHeartbeat] == nil {
				t.Errorf("node %d after the heartbeats: %v", i, nd.DriverInternalInfo)
			}
			c, err := srv.DB.AuditEvent.Query().Where(auditevent.Rule(ramdisk.RuleHeartbeat), auditevent.TargetID(ids[i]),
				auditevent.Result("allowed")).Count(context.Background())
			if err != nil || c != 1 {
				t.Errorf("node %d: %d heartbeats audited (%v), want its first only", i, c, err)
			}
		}
	})
}

// TestAgentRateLimit: one address gets a burst of lookups and heartbeats,
// then 429 with Retry-After; another address is not affected.
func TestAgentRateLimit(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _ := startAgents(t, setting)
		flood := agentFrom(srv, "10.2.0.1")
		var last *servertest.Response
		for i := 0; i < 40; i++ {
			// Lookups and heartbeats share the address's bucket.
			if i%2 == 0 {
				last = flood.Do(t, "GET", "/v1/lookup?addresses=52:54:00:ff:00:01", nil)
			} else {
				last = flood.Do(t, "POST", "/v1/heartbeat/x", beat("http://10.2.0.1:1", "t"))
			}
			if last.Status == 429 {
				break
			}
		}
		wantFault(t, last, 429, "Too many requests")
		if ra := last.Header.Get("Retry-After"); ra == "" || ra == "0" {
			t.Errorf("Retry-After %q", ra)
		}
		wantFault(t, agentFrom(srv, "10.2.0.2").Do(t, "GET", "/v1/lookup?addresses=52:54:00:ff:00:01", nil), 404)
	})
}

// TestAgentRealIPA: the real ironic-python-agent, on a loop device, finds
// its node (in clean wait, with a port of one of its MACs) through
// /v1/lookup, takes its token and heartbeats: system admins see its URL,
// version and last heartbeat, and nobody sees the token.
func TestAgentRealIPA(t *testing.T) {
	agenttest.Need(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, cs := startLocal(t, setting)
		admin := cs["system-admin"]
		id := agentNode(t, srv, admin, "ipa", "clean wait", "52:54:48:0c:0a:02")
		m := agenttest.Start(t, agenttest.LoopDisk(t), "52:54:48:0c:0a:01,52:54:48:0c:0a:02", srv.URL)
		var dii map[string]any
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
			dii = internal(t, admin, id)
			if dii["agent_last_heartbeat"] != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no heartbeat from the agent; driver_internal_info %v\n%s", dii, m.LogTail(4000))
			}
		}
		if u, _ := dii["agent_url"].(string); !strings.HasSuffix(u, "://127.0.0.1:"+strconv.Itoa(m.Port)) {
			t.Errorf("agent_url %v, want the agent's port %d", dii["agent_url"], m.Port)
		}
		if v, _ := dii["agent_version"].(string); v == "" {
			t.Errorf("no agent_version: %v", dii)
		}
		n, err := srv.DB.Node.Query().Where(node.UUID(id)).Only(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		tok, _ := n.DriverInternalInfo["agent_secret_token"].(string)
		if len(tok) < 43 {
			t.Fatalf("stored token %q", tok)
		}
		srv.Audit.Flush(context.Background())
		for _, p := range personas {
			for _, path := range []string{"/v1/nodes/" + id, "/v1/nodes/detail", "/v1/nodes/" + id + "/history", "/v1/events?limit=1000"} {
				if r := cs[p.name].Do(t, "GET", path, nil); strings.Contains(string(r.Body), tok) {
					t.Errorf("%s GET %s shows the agent token", p.name, path)
				}
			}
		}
	})
}
