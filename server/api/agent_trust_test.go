package api_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/nodeinventory"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/agent"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/ramdisk"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// The attack suite of docs/agent-trust.md: what a caller who is not a
// node's own agent can do with the agent's unauthenticated calls.

// TestAgentTrustNetworks: with --agent-networks, lookups, heartbeats,
// inspection data and iPXE scripts from elsewhere are refused before
// anything is read, whatever X-Forwarded-For claims from an untrusted
// peer; inside, a heartbeat's callback URL must be its own address; the
// lookup shows instance_info as a reader sees it; /readyz says when no
// agent networks are set while a node can boot an agent.
func TestAgentTrustNetworks(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, lo, _ := net.ParseCIDR("127.0.0.1/32")
		o := server.Options{TrustedProxies: []net.IPNet{*lo}}
		o.Conductor.Agent.Client.Networks = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
		srv, cs := startLocal(t, setting, o)
		admin := cs["system-admin"]
		id := agentNode(t, srv, admin, "tn", "clean wait", "52:54:00:71:00:01")
		secretURL := "http://user:hunter2@images.example.com/img.raw?X-Amz-Signature=abc123&X-Amz-Credential=AKIA"
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{
			{"op": "add", "path": "/instance_info/image_source", "value": secretURL},
			{"op": "add", "path": "/instance_info/configdrive", "value": map[string]any{"user_data": "#cloud-config\npassword: s3cret"}}}), 200)

		// Outside: the peer itself (127.0.0.1 with no X-Forwarded-For),
		// and a forwarded address outside the networks.
		for _, c := range []*servertest.Client{srv.Client(), agentFrom(srv, "198.51.100.7")} {
			wantFault(t, c.Do(t, "GET", "/v1/lookup?addresses=52:54:00:71:00:01", nil), 403, "agent networks")
			wantFault(t, c.Do(t, "POST", "/v1/heartbeat/"+id, beat("http://198.51.100.7:9999", "x")), 403, "agent networks")
			wantFault(t, c.Do(t, "POST", "/v1/continue_inspection", map[string]any{"inventory": map[string]any{
				"interfaces": []any{map[string]any{"mac_address": "52:54:00:71:00:01"}}}}), 403, "agent networks")
			mustStatus(t, c.Do(t, "GET", "/ipxe/52-54-00-71-00-01", nil), 403)
		}
		if dii := internal(t, admin, id); dii["agent_secret_token"] != nil || dii["agent_url"] != nil {
			t.Fatalf("refused calls left %v", dii)
		}

		// Inside: the lookup issues the token, bound to its address.
		ag := agentFrom(srv, "192.0.2.10")
		r := ag.Do(t, "GET", "/v1/lookup?addresses=52:54:00:71:00:01", nil)
		tok := lookupToken(t, r).(string)
		// instance_info exactly as a reader of the node sees it: no
		// password, no signed query, no config drive.
		got := r.JSON(t)["node"].(map[string]any)["instance_info"]
		reader := cs["owner-reader"].Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["instance_info"]
		if !reflect.DeepEqual(got, reader) {
			t.Errorf("lookup's instance_info %v, a reader's %v", got, reader)
		}
		if b := string(r.Body); strings.Contains(b, "hunter2") || strings.Contains(b, "abc123") || strings.Contains(b, "s3cret") {
			t.Errorf("lookup leaks instance_info secrets: %s", b)
		}
		// A callback URL that is not the caller, whichever way it is
		// written, is refused and records nothing.
		for _, cb := range []string{"http://192.0.2.11:9999", "http://attacker.example.com:9999", "http://127.0.0.1:9999"} {
			wantFault(t, ag.Do(t, "POST", "/v1/heartbeat/"+id, beat(cb, tok)), 400, "callback_url")
		}
		if dii := internal(t, admin, id); dii["agent_url"] != nil {
			t.Fatalf("a refused heartbeat recorded %v", dii["agent_url"])
		}
		// The token from another address inside the networks.
		wantFault(t, agentFrom(srv, "192.0.2.12").Do(t, "POST", "/v1/heartbeat/"+id, beat("http://192.0.2.12:9999", tok)), 400, "Invalid or missing agent token")
		mustStatus(t, ag.Do(t, "POST", "/v1/heartbeat/"+id, beat("http://192.0.2.10:9999", tok)), 202)
		if dii := internal(t, admin, id); dii["agent_url"] != "http://192.0.2.10:9999" {
			t.Errorf("agent_url %v", dii["agent_url"])
		}
		// The node's history says a lookup issued the token, and system
		// scope reads from where.
		h := admin.Do(t, "GET", "/v1/nodes/"+id+"/history?detail=true", nil)
		mustStatus(t, h, 200)
		if b := string(h.Body); !strings.Contains(b, "Issued the agent's token to the first lookup") || !strings.Contains(b, "192.0.2.10") {
			t.Errorf("history: %s", b)
		}

		// /readyz warns without agent networks only.
		if b := string(srv.Client().Do(t, "GET", "/readyz", nil).Body); strings.Contains(b, "agent_networks") {
			t.Errorf("/readyz with --agent-networks: %s", b)
		}
	})
}

// TestAgentTrustReadyz: a server without --agent-networks says so on
// /readyz once a node can boot the agent.
func TestAgentTrustReadyz(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		open, ocs := startLocal(t, setting)
		if b := string(open.Client().Do(t, "GET", "/readyz", nil).Body); strings.Contains(b, "agent_networks") {
			t.Errorf("/readyz with only fake nodes: %s", b)
		}
		mustStatus(t, ocs["system-admin"].Do(t, "POST", "/v1/nodes", map[string]any{"name": "px", "driver": "ipmi", "driver_info": map[string]any{
			"ipmi_address": "192.0.2.7", "deploy_kernel": "http://192.0.2.1/k", "deploy_ramdisk": "http://192.0.2.1/r"}}), 201)
		ready := open.Client().Do(t, "GET", "/readyz", nil)
		mustStatus(t, ready, 200)
		if note, _ := ready.JSON(t)["agent_networks"].(string); !strings.Contains(note, "--agent-networks") {
			t.Errorf("/readyz without --agent-networks, a node able to boot an agent: %s", ready.Body)
		}
	})
}

// standIn is a stand-in agent: an HTTP server that records the commands
// the conductor sends it, with the token each carried, and answers
// every one "done" without doing anything.
type standIn struct {
	*httptest.Server
	mu     sync.Mutex
	tokens []string
}

func startStandIn(t *testing.T, ip string) *standIn {
	s := &standIn{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.tokens = append(s.tokens, r.URL.Query().Get("agent_token"))
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Method == "GET" {
			_, _ = w.Write([]byte(`{"commands": []}`))
			return
		}
		_, _ = w.Write([]byte(`{"id": "1", "command_name": "x", "command_status": "SUCCEEDED", "command_result": {"clean_steps": {}}, "command_error": null}`))
	}))
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	s.Listener = l
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// waitProv polls a node until its provision state is want, whoever
// holds its lock (a wait state keeps the conductor's).
func waitProv(t *testing.T, c *servertest.Client, id, want string) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		n := c.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
		if n["provision_state"] == want {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s is %v (last_error %v), want %s", id, n["provision_state"], n["last_error"], want)
		}
	}
}

func (s *standIn) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.tokens...)
}

var mediumToken = regexp.MustCompile(`ipa-agent-token=(\S+)`)

// TestAgentTrustMedium: a node that boots the agent from the network
// with Anvil's iPXE script (redfish-sim's system boots nothing itself:
// the test plays its agent) gets its token on the script's kernel line
// before it boots. A lookup then never issues the token, so a stand-in
// agent that would answer cleaning's commands "done" cannot heartbeat
// and is sent nothing; the script goes to the first address that fetches
// it only; the agent with the medium's token is the one the conductor
// drives. An inspection's medium puts the token in the inventory's
// callback URL: a forged inventory, without it, changes nothing and
// learns nothing; the agent's own is taken.
func TestAgentTrustMedium(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t, "SIM_SYSTEMS=1")
		_, lo, _ := net.ParseCIDR("127.0.0.1/32")
		o := server.Options{TrustedProxies: []net.IPNet{*lo}, Conductor: conductor.Config{Agent: conductor.AgentConfig{
			TokenOnMedia: true, Poll: 200 * time.Millisecond, BootTimeout: 5 * time.Minute,
			Client: agent.Options{Timeout: 5 * time.Second}}}}
		srv, cs := startLocal(t, setting, o)
		admin := cs["system-admin"]
		sys := sim.Systems[0]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "med", "driver": "redfish", "boot_interface": "ipxe",
			"inspect_interface": "agent", "driver_info": map[string]any{"redfish_address": sim.URL, "redfish_system_id": sim.SystemPath(sys.ID),
				"redfish_username": "admin", "redfish_password": "password", "redfish_verify_ca": sim.CAPEM,
				"deploy_kernel": "http://192.0.2.1/ipa.kernel", "deploy_ramdisk": "http://192.0.2.1/ipa.initramfs"}})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		mac := sys.MACs[0]
		mustStatus(t, admin.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": id, "address": mac}), 201)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		script := "/ipxe/" + strings.ReplaceAll(mac, ":", "-")
		stored := func() map[string]any {
			n, err := srv.DB.Node.Query().Where(node.UUID(id)).Only(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return n.DriverInternalInfo
		}

		// Inspection: the node waits for its inventory, and the script
		// carries the token in the callback URL.
		provision(t, admin, id, map[string]any{"target": "inspect"}, 202)
		waitProv(t, admin, id, "inspect wait")
		// The machine's agent calls from 127.0.0.1, an attacker on the
		// same network from 127.0.0.3.
		machine, evil := srv.Client(), agentFrom(srv, "127.0.0.3")
		sr := machine.Do(t, "GET", script, nil)
		mustStatus(t, sr, 200)
		tok := stored()[ramdisk.KeyToken].(string)
		if !strings.Contains(string(sr.Body), "ipa-inspection-callback-url="+srv.URL+"/v1/continue_inspection?agent_token="+tok+" ") ||
			!strings.Contains(string(sr.Body), "ipa-agent-token="+tok+"\n") {
			t.Fatalf("inspection's script:\n%s", sr.Body)
		}
		inv := map[string]any{"inventory": map[string]any{"bmc_address": "127.0.0.1",
			"interfaces": []any{map[string]any{"mac_address": mac}, map[string]any{"mac_address": "52:54:00:66:66:66"}},
			"cpu":        map[string]any{"count": 128, "architecture": "x86_64"}, "memory": map[string]any{"physical_mb": 1 << 20},
			"disks": []any{map[string]any{"name": "/dev/sda", "size": 1 << 40}}}}
		before := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["properties"]
		for _, q := range []string{"", "?agent_token=" + ramdisk.MaskedToken, "?agent_token=" + tok + "x", "?node_uuid=" + id} {
			f := at(evil, "1.84").Do(t, "POST", "/v1/continue_inspection"+q, inv)
			wantFault(t, f, 404, "could not be found")
			if strings.Contains(string(f.Body), id) {
				t.Errorf("a forged inspection learnt the node's UUID: %s", f.Body)
			}
		}
		nid, err := srv.DB.Node.Query().Where(node.UUID(id)).OnlyID(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n, err := srv.DB.NodeInventory.Query().Where(nodeinventory.NodeID(nid)).Count(context.Background()); err != nil || n != 0 {
			t.Fatalf("a forged inspection stored %d inventories (%v)", n, err)
		}
		if after := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["properties"]; !reflect.DeepEqual(before, after) {
			t.Errorf("forged inspections changed properties %v to %v", before, after)
		}
		if ports := admin.Do(t, "GET", "/v1/ports?node_uuid="+id, nil).JSON(t)["ports"].([]any); len(ports) != 1 {
			t.Errorf("ports after forged inspections: %v", ports)
		}
		if _, received := stored()[ramdisk.KeyInspectionReceived]; received {
			t.Fatalf("a forged inspection was taken")
		}
		// The agent's own, with the token its medium gave it.
		ok := machine.Do(t, "POST", "/v1/continue_inspection?agent_token="+tok, inv)
		mustStatus(t, ok, 202)
		if ok.JSON(t)["uuid"] != id {
			t.Errorf("the agent's inspection: %s", ok.Body)
		}
		n := waitState(t, admin, id, "manageable")
		if p := n["properties"].(map[string]any); fmt.Sprint(p["cpus"]) != "128" {
			t.Errorf("properties after the agent's inspection: %v", p)
		}

		// Cleaning: the conductor boots the node with a fresh token on
		// the script.
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/automated_clean", "value": true}}), 200)
		provision(t, admin, id, map[string]any{"target": "provide"}, 202)
		waitProv(t, admin, id, "clean wait")
		dii := stored()
		tok2, _ := dii[ramdisk.KeyToken].(string)
		if dii[ramdisk.KeyTokenPregenerated] != true || tok2 == "" || tok2 == tok {
			t.Fatalf("cleaning's boot: driver_internal_info %v", dii)
		}
		// The attacker: a stand-in agent that would answer "done".
		attacker := startStandIn(t, "127.0.0.3")
		lr := evil.Do(t, "GET", "/v1/lookup?addresses="+mac, nil)
		if got := lookupToken(t, lr); got != ramdisk.MaskedToken {
			t.Fatalf("a lookup for a node whose medium carries its token got %v", got)
		}
		for _, bad := range []string{ramdisk.MaskedToken, tok, "A" + tok2[1:]} {
			wantFault(t, evil.Do(t, "POST", "/v1/heartbeat/"+id, beat(attacker.URL, bad)), 400, "Invalid or missing agent token")
		}
		if _, ok := stored()[ramdisk.KeyURL]; ok {
			t.Fatalf("a heartbeat without the medium's token was recorded")
		}
		// The script goes to its first fetcher only: a second address
		// gets the local-disk script and the history says so; the first
		// address's retry gets the same token.
		first := machine.Do(t, "GET", script, nil)
		mustStatus(t, first, 200)
		m := mediumToken.FindStringSubmatch(string(first.Body))
		if m == nil || m[1] != tok2 {
			t.Fatalf("cleaning's script: %s", first.Body)
		}
		if b := string(evil.Do(t, "GET", script, nil).Body); strings.Contains(b, tok2) || !strings.Contains(b, "exit") {
			t.Errorf("a second address got %q", b)
		}
		if b := string(machine.Do(t, "GET", script, nil).Body); !strings.Contains(b, "ipa-agent-token="+tok2) {
			t.Errorf("the first address's retry got %q", b)
		}
		if b := string(admin.Do(t, "GET", "/v1/nodes/"+id+"/history", nil).Body); !strings.Contains(b, "Refused the iPXE script") {
			t.Errorf("history lacks the refused script: %s", b)
		}
		if got := attacker.seen(); len(got) != 0 {
			t.Fatalf("the conductor called the attacker's stand-in: %v", got)
		}
		// The machine's own agent (here a stand-in too, at the address
		// that fetched the script) heartbeats with the medium's token:
		// the conductor drives it, with that token.
		own := startStandIn(t, "127.0.0.1")
		mustStatus(t, machine.Do(t, "POST", "/v1/heartbeat/"+id, beat(own.URL, tok2)), 202)
		deadline := time.Now().Add(2 * time.Minute)
		for len(own.seen()) == 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		got := own.seen()
		if len(got) == 0 {
			t.Fatalf("the conductor never called the agent with the medium's token")
		}
		for _, g := range got {
			if g != tok2 {
				t.Errorf("the conductor called the agent with token %q, want the medium's", g)
			}
		}
		if got := attacker.seen(); len(got) != 0 {
			t.Errorf("the conductor called the attacker's stand-in: %v", got)
		}
	})
}
