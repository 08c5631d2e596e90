package web_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/anvilproject/anvil/ent/allocation"
	"github.com/anvilproject/anvil/ent/auditevent"
	entnode "github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/agent/agenttest"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/deployimages"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestDeployFromPortal is a tenant's whole lease through the portal with
// the real agent on a loop disk: a lessee manager requests the node with
// a lease, deploys a published image with an SSH key and a host name,
// finds the image and a config drive holding both on the disk, and
// releases it: automated cleaning wipes the disk, the node is available
// again and the allocation is gone. Every refused form changes nothing.
func TestDeployFromPortal(t *testing.T) {
	agenttest.Need(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		ctx := context.Background()
		srv := servertest.Start(t, server.Options{Database: setting, Conductor: conductor.Config{Agent: conductor.AgentConfig{
			HeartbeatTimeout: 30 * time.Second, LogDir: t.TempDir(), Poll: 500 * time.Millisecond}}})
		im := agenttest.ServeImage(t, "ANVIL-PORTAL-MARKER")
		rack := agenttest.NewRack(t, srv.URL)
		// The agent retries a failed download 9 times 10 s apart; once
		// is enough here.
		sim := bmctest.StartRedfish(t, append(rack.Env(), "SIM_SYSTEMS=1",
			"OS_DEFAULT__IMAGE_DOWNLOAD_CONNECTION_RETRIES=0", "OS_DEFAULT__IMAGE_DOWNLOAD_CONNECTION_RETRY_INTERVAL=1")...)
		srv.Portal.DeployImages = []deployimages.Image{{Name: "Test disk 1", URL: im.URL + im.Raw, Checksum: "sha256:" + im.RawSum}}
		for _, u := range []struct {
			name  string
			scope identity.Scope
			role  string
		}{{"root", identity.Scope{System: true}, "admin"}, {"mia", identity.Scope{Project: "blue"}, "manager"},
			{"mel", identity.Scope{Project: "blue"}, "member"}, {"gus", identity.Scope{Project: "green"}, "manager"}} {
			if err := srv.IDs.CreateUser(ctx, u.name, u.name+"-password-1"); err != nil {
				t.Fatal(err)
			}
			if err := srv.IDs.Grant(ctx, u.name, identity.Assignment{Scope: u.scope, Role: u.role}); err != nil {
				t.Fatal(err)
			}
		}
		tok, _, err := srv.IDs.CreateToken(ctx, identity.TokenRequest{User: "root", Scope: identity.Scope{System: true}, Roles: []string{"admin"}})
		if err != nil {
			t.Fatal(err)
		}
		admin := srv.Client()
		admin.Header.Set("X-Auth-Token", tok)

		// An operator enrols the machine for project hw, leased to blue,
		// and makes it available; cleaning waits for the tenant's release.
		sys := sim.Systems[0]
		disk := rack.Machine(t, sys.ID)
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "metal-1", "driver": "redfish", "owner": "hw", "lessee": "blue",
			"resource_class": "metal", "boot_interface": "redfish-virtual-media", "automated_clean": false,
			"driver_info": map[string]any{"redfish_address": sim.URL, "redfish_system_id": sim.SystemPath(sys.ID), "redfish_username": "admin",
				"redfish_password": "password", "redfish_verify_ca": sim.CAPEM, "deploy_iso": servertest.ServeISO(t)}})
		if r.Status != 201 {
			t.Fatalf("enrol: %d %s", r.Status, r.Body)
		}
		id := r.JSON(t)["uuid"].(string)
		for _, mac := range sys.MACs {
			if r := admin.Do(t, "POST", "/v1/ports", map[string]any{"node_uuid": id, "address": mac}); r.Status != 201 {
				t.Fatalf("port: %d %s", r.Status, r.Body)
			}
		}
		for _, step := range []struct{ target, state string }{{"manage", "manageable"}, {"provide", "available"}} {
			if r := admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": step.target}); r.Status != 202 {
				t.Fatalf("%s: %d %s", step.target, r.Status, r.Body)
			}
			waitNode(t, admin, id, step.state, rack)
		}
		if r := admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "replace", "path": "/automated_clean", "value": true}}); r.Status != 200 {
			t.Fatalf("automated_clean: %d %s", r.Status, r.Body)
		}

		mia, mel, gus := signInAs(t, srv, "mia"), signInAs(t, srv, "mel"), signInAs(t, srv, "gus")
		before := time.Now().UTC().Truncate(time.Second)
		st, _, h := mia.do("POST", "/allocations", url.Values{"csrf": {mia.csrf}, "once": {newOnce(t, mia)}, "resource_class": {"metal"},
			"name": {"web"}, "quantity": {"1"}, "lease_hours": {"4"}})
		after := time.Now().UTC()
		if st != 303 || h.Get("Location") != "/nodes/"+id {
			t.Fatalf("request: %d %s", st, h.Get("Location"))
		}
		a, err := srv.DB.Allocation.Query().Only(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ends, err := time.Parse(time.RFC3339, fmt.Sprint(a.Extra["anvil_expires_at"]))
		if err != nil || deref(a.Name) != "web" || ends.Before(before.Add(4*time.Hour)) || ends.After(after.Add(4*time.Hour)) {
			t.Errorf("allocation %v extra %v: want name web and a lease ending 4 h after the request", deref(a.Name), a.Extra)
		}
		_, page, _ := mia.do("GET", "/allocations", nil)
		if !strings.Contains(page, `datetime="`+ends.Format(time.RFC3339)+`"`) || !strings.Contains(page, "ends in 4 h") || !strings.Contains(page, `href="/nodes/`+id+`#deploy"`) {
			t.Errorf("My allocations lacks the lease end or the deploy link:\n%s", page)
		}

		_, page, _ = mia.do("GET", "/nodes/"+id, nil)
		if !strings.Contains(page, `data-stage="form"`) || !strings.Contains(page, `value="Test disk 1"`) {
			t.Fatalf("the node page offers no deploy form:\n%s", page)
		}
		key := sshKey(t)
		deploy := func(b *browser, form url.Values) (int, string) {
			t.Helper()
			form.Set("csrf", b.csrf)
			st, page, _ := b.do("POST", "/nodes/"+id+"/deploy", form)
			return st, page
		}
		audits := func() int {
			n, err := srv.DB.AuditEvent.Query().Where(auditevent.TargetID(id), auditevent.RuleIn("baremetal:node:update", conductor.RuleProvision),
				auditevent.ResultNEQ("denied")).Count(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		unchanged := func(what string) {
			t.Helper()
			n := srv.DB.Node.Query().Where(entnode.UUID(id)).OnlyX(ctx)
			if n.ProvisionState != "available" || len(n.InstanceInfo) != 0 {
				t.Errorf("%s changed the node: %s %v", what, n.ProvisionState, n.InstanceInfo)
			}
		}
		good := url.Values{"image": {"Test disk 1"}, "ssh_key": {key}, "hostname": {"web-1"}}
		acted := audits()
		for _, bad := range []struct{ field, value string }{
			{"image", "No such image"}, {"ssh_key", "not a key"}, {"ssh_key", key + "\n" + key}, {"ssh_key", `command="x" ` + key},
			{"hostname", "-web"}, {"hostname", "web_1"}, {"hostname", strings.Repeat("a", 64)},
		} {
			form := url.Values{}
			for k, v := range good {
				form[k] = v
			}
			form.Set(bad.field, bad.value)
			st, page := deploy(mia, form)
			label := map[string]string{"image": "Image", "ssh_key": "SSH key", "hostname": "Host name"}[bad.field]
			if st != 400 || !strings.Contains(page, `data-testid="problem-`+bad.field+`"`) || !strings.Contains(page, `href="#`+bad.field+`">`+label+": ") {
				t.Errorf("%s %q: %d, or the page does not name the field by its label", bad.field, bad.value, st)
			}
			unchanged(bad.field)
		}
		for _, bad := range []struct{ field, url, sum string }{
			{"image_url", "ftp://images.example/disk.raw", "sha256:" + im.RawSum}, {"image_url", "", "sha256:" + im.RawSum},
			{"image_checksum", im.URL + im.Raw, "sha256:zz"}, {"image_checksum", im.URL + im.Raw, "sha256:" + im.RawSum[:10]}, {"image_checksum", im.URL + im.Raw, ""},
		} {
			st, page := deploy(mia, url.Values{"image": {"other"}, "image_url": {bad.url}, "image_checksum": {bad.sum}, "ssh_key": {key}, "hostname": {"web-1"}})
			if st != 400 || !strings.Contains(page, `data-testid="problem-`+bad.field+`"`) {
				t.Errorf("%s (%q, %q): %d", bad.field, bad.url, bad.sum, st)
			}
			unchanged(bad.field)
		}
		if audits() != acted {
			t.Errorf("refused forms wrote %d audited changes", audits()-acted)
		}
		// A member of the lessee may not deploy, and is told who may;
		// another project does not see the node.
		if _, page, _ := mel.do("GET", "/nodes/"+id, nil); !strings.Contains(page, "You cannot deploy this node.") ||
			!strings.Contains(page, "a manager of project blue (the lessee)") || strings.Contains(page, `action="/nodes/`+id+`/deploy"`) {
			t.Errorf("a lessee member's deploy panel:\n%s", page)
		}
		if st, _ := deploy(mel, good); st != 403 {
			t.Errorf("a lessee member's deploy: %d", st)
		}
		if st, _, _ := gus.do("GET", "/nodes/"+id, nil); st != 404 {
			t.Errorf("another project's node page: %d", st)
		}
		if st, page := deploy(gus, good); st != 404 || strings.Contains(page, "metal-1") {
			t.Errorf("another project's deploy: %d", st)
		}
		unchanged("refused callers")

		st, page = deploy(mia, good)
		if st != 303 {
			t.Fatalf("deploy: %d\n%s", st, page)
		}
		if _, page, _ := mia.do("GET", "/nodes/"+id, nil); !strings.Contains(page, "Deploying Test disk 1 to metal-1 as web-1.") {
			t.Error("the node page does not say the deployment started")
		}
		n := waitNode(t, admin, id, "active", rack)
		ii, _ := n["instance_info"].(map[string]any)
		if ii["image_source"] != im.URL+im.Raw || ii["image_os_hash_algo"] != "sha256" || ii["image_os_hash_value"] != im.RawSum || ii["display_name"] != "web-1" {
			t.Errorf("instance_info %v", ii)
		}
		if got := readDisk(t, disk, agenttest.MarkerOffset, len(im.Marker)); string(got) != im.Marker {
			t.Errorf("the image's marker is not on the disk: %q", got)
		}
		if !configDriveHolds(t, disk, `"hostname":"web-1"`) || !configDriveHolds(t, disk, key) {
			t.Error("the config drive on the disk lacks the host name or the key")
		}
		if _, page, _ := mia.do("GET", "/nodes/"+id, nil); !strings.Contains(page, `data-stage="running"`) || !strings.Contains(page, "Test disk 1") ||
			!strings.Contains(page, "as web-1") || !strings.Contains(page, "Release metal-1 (project blue gives it back)? Its disks are wiped (wipe policy express: NVMe format or ATA secure erase where the disk has it, else every byte overwritten).") {
			t.Errorf("the running node's panel:\n%s", page)
		}
		for _, rule := range []string{"baremetal:node:update", conductor.RuleProvision} {
			if n, _ := srv.DB.AuditEvent.Query().Where(auditevent.TargetID(id), auditevent.Rule(rule), auditevent.User("mia")).Count(ctx); n == 0 {
				t.Errorf("no audit of mia's %s", rule)
			}
		}

		// A member may not release it either.
		if _, page, _ := mel.do("GET", "/nodes/"+id, nil); !strings.Contains(page, "You cannot release this node.") {
			t.Error("a lessee member is not told it may not release the node")
		}
		if st, _, _ := mel.do("POST", "/nodes/"+id+"/undeploy", url.Values{"csrf": {mel.csrf}, "confirmed": {"yes"}}); st != 403 {
			t.Errorf("a lessee member's release: %d", st)
		}
		if st, _, h := mia.do("POST", "/nodes/"+id+"/undeploy", url.Values{"csrf": {mia.csrf}, "confirmed": {"yes"}}); st != 303 || h.Get("Location") != "/nodes/"+id {
			t.Fatalf("release: %d %s", st, h.Get("Location"))
		}
		n = waitNode(t, admin, id, "available", rack)
		if n["instance_uuid"] != nil || len(n["instance_info"].(map[string]any)) != 0 {
			t.Errorf("released node: instance_uuid %v instance_info %v", n["instance_uuid"], n["instance_info"])
		}
		if p := diskPartitions(t, disk); len(p) != 0 {
			t.Errorf("automated cleaning left partitions %v", p)
		}
		if got := readDisk(t, disk, 512, 8); string(got) == "EFI PART" {
			t.Error("automated cleaning left the GPT header")
		}
		if left, err := srv.DB.Allocation.Query().Where(allocation.UUID(a.UUID)).Count(ctx); err != nil || left != 0 {
			t.Errorf("the allocation outlived the release (%d, %v)", left, err)
		}
		if _, page, _ := mia.do("GET", "/nodes/"+id, nil); !strings.Contains(page, `data-stage="form"`) {
			t.Error("the released node does not offer the deploy form again")
		}
	})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// sshKey is a fresh ed25519 public key line.
func sshKey(t *testing.T) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pk))) + " tenant@laptop"
}

// waitNode polls the node through the API until it rests in state,
// failing at once on a failed state.
func waitNode(t *testing.T, c *servertest.Client, id, state string, rack *agenttest.Rack) map[string]any {
	t.Helper()
	var n map[string]any
	for deadline := time.Now().Add(4 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		n = c.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
		if n["provision_state"] == state && n["target_provision_state"] == nil && n["reservation"] == nil {
			return n
		}
		if s, _ := n["provision_state"].(string); strings.HasSuffix(s, "failed") && s != state {
			t.Fatalf("node went to %s: %v\n%s", s, n["last_error"], rack.Log("1", 5000))
		}
	}
	t.Fatalf("node did not reach %s: %v %v\n%s", state, n["provision_state"], n["last_error"], rack.Log("1", 5000))
	return nil
}

func readDisk(t *testing.T, disk string, off int64, n int) []byte {
	t.Helper()
	f, err := os.Open(disk)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}

// diskPartitions lists the start sectors of the disk's GPT partitions,
// read from the table itself: none when the table is gone.
func diskPartitions(t *testing.T, disk string) []int64 {
	t.Helper()
	hdr := readDisk(t, disk, 512, 92)
	if string(hdr[:8]) != "EFI PART" {
		return nil
	}
	entries := int64(binary.LittleEndian.Uint64(hdr[72:80]))
	count := int(binary.LittleEndian.Uint32(hdr[80:84]))
	size := int(binary.LittleEndian.Uint32(hdr[84:88]))
	table := readDisk(t, disk, entries*512, count*size)
	var out []int64
	for i := range count {
		e := table[i*size : (i+1)*size]
		if !bytes.Equal(e[:16], make([]byte, 16)) {
			out = append(out, int64(binary.LittleEndian.Uint64(e[32:40])))
		}
	}
	return out
}

// configDriveHolds tells whether the disk's config-2 partition (an ISO
// 9660 volume the agent writes, whose small files are stored plainly in
// its first MiB) contains want.
func configDriveHolds(t *testing.T, disk, want string) bool {
	t.Helper()
	for _, start := range diskPartitions(t, disk) {
		pvd := readDisk(t, disk, start*512+16*2048, 48)
		if string(pvd[1:6]) == "CD001" && strings.TrimSpace(string(pvd[40:48])) == "config-2" {
			return strings.Contains(string(readDisk(t, disk, start*512, 1<<20)), want)
		}
	}
	return false
}
