package web_test

import (
	"context"
	"html"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/anvilproject/anvil/ent/auditevent"
	entnode "github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/sshkey"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/demo"
	"github.com/anvilproject/anvil/server/deployimages"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestDeployPanelKeysAndAddresses is a tenant's deployment of a demo node
// (fake hardware) through the Deploy panel: she saves an SSH key in her
// profile (another project's manager neither sees nor deletes it), sends
// an empty and then a wrong form and is told every problem at once by
// the fields' labels with what she typed kept, deploys with the saved key
// plus a one-off key she saves too, sees the flash once, then the
// instance's addresses from the node's inventory with the ssh command,
// which nobody else is shown, and releases it only once she confirmed.
func TestDeployPanelKeysAndAddresses(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		ctx := context.Background()
		srv := servertest.Start(t, server.Options{Database: setting})
		if _, err := demo.Seed(ctx, srv.DB, srv.Firmware, 24); err != nil {
			t.Fatal(err)
		}
		srv.Portal.DeployImages = []deployimages.Image{{Name: "Demo disk 1.0", URL: "http://images.example/disk.raw",
			Checksum: "sha256:" + strings.Repeat("ab", 32), SSHUser: "debian"}}
		for _, u := range []struct{ name, project, role string }{{"mia", "tenant-blue", "manager"}, {"mel", "tenant-blue", "member"}, {"gus", "tenant-green", "manager"}} {
			if err := srv.IDs.CreateUser(ctx, u.name, u.name+"-password-1"); err != nil {
				t.Fatal(err)
			}
			if err := srv.IDs.Grant(ctx, u.name, identity.Assignment{Scope: identity.Scope{Project: u.project}, Role: u.role}); err != nil {
				t.Fatal(err)
			}
		}
		mia, mel, gus := signInAs(t, srv, "mia"), signInAs(t, srv, "mel"), signInAs(t, srv, "gus")
		keys := func() int { return srv.DB.SSHKey.Query().CountX(ctx) }

		// Her profile refuses a key with every problem at once, then
		// saves it and shows its fingerprint.
		laptop := sshKey(t)
		pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(laptop))
		if err != nil {
			t.Fatal(err)
		}
		st, page, _ := mia.do("POST", "/account/keys", url.Values{"csrf": {mia.csrf}, "key_name": {""}, "public_key": {"ssh-ed25519 nonsense"}})
		if st != 400 || !strings.Contains(page, "2 problems to fix") || !strings.Contains(page, `href="#key_name">Key name: give the key a name`) ||
			!strings.Contains(page, `href="#public_key">Public key: this is not an OpenSSH public key`) || !strings.Contains(page, "ssh-ed25519 nonsense</textarea>") || keys() != 0 {
			t.Errorf("a bad key: %d, %d stored\n%s", st, keys(), page)
		}
		// Each field is described by its own problem, which a screen
		// reader then reads with the field.
		for _, want := range []string{`aria-invalid="true" aria-describedby="problem-key_name"`, `aria-describedby="public-key-help problem-public_key"`, `id="problem-key_name"`, `id="problem-public_key"`} {
			if !strings.Contains(page, want) {
				t.Errorf("a bad key's form lacks %s", want)
			}
		}
		st, _, h := mia.do("POST", "/account/keys", url.Values{"csrf": {mia.csrf}, "key_name": {"laptop"}, "public_key": {laptop}})
		if st != 303 || h.Get("Location") != "/account#ssh-keys" || keys() != 1 {
			t.Fatalf("saving a key: %d %s, %d stored", st, h.Get("Location"), keys())
		}
		_, page, _ = mia.do("GET", "/account", nil)
		if !strings.Contains(page, "Saved SSH key laptop.") || !strings.Contains(page, `<tr data-key="laptop">`) || !strings.Contains(page, ssh.FingerprintSHA256(pk)) {
			t.Errorf("the account page after saving:\n%s", page)
		}
		if st, page, _ := mia.do("POST", "/account/keys", url.Values{"csrf": {mia.csrf}, "key_name": {"laptop"}, "public_key": {laptop}}); st != 400 ||
			!strings.Contains(page, "Key name: you already have a key named laptop") || !strings.Contains(page, "Public key: this key is already saved") || keys() != 1 {
			t.Errorf("the same key again: %d, %d stored", st, keys())
		}
		saved := srv.DB.SSHKey.Query().OnlyX(ctx)
		if _, page, _ := gus.do("GET", "/account", nil); strings.Contains(page, "laptop") {
			t.Error("another user sees mia's key")
		}
		if st, _, _ := gus.do("POST", "/account/keys/"+strconv.Itoa(saved.ID)+"/delete", url.Values{"csrf": {gus.csrf}}); st != 404 || keys() != 1 {
			t.Errorf("another user deletes mia's key: %d, %d left", st, keys())
		}
		if n := srv.DB.AuditEvent.Query().Where(auditevent.Rule("anvil:user:ssh-key"), auditevent.User("mia")).CountX(ctx); n != 1 {
			t.Errorf("%d audited key changes by mia, want 1", n)
		}

		// She requests a node, whose panel offers her key, chosen.
		st, _, h = mia.do("POST", "/allocations", url.Values{"csrf": {mia.csrf}, "once": {newOnce(t, mia)}, "resource_class": {"baremetal-large"}})
		if st != 303 || !strings.HasPrefix(h.Get("Location"), "/nodes/") {
			t.Fatalf("request: %d %s", st, h.Get("Location"))
		}
		path := h.Get("Location")
		id := strings.TrimPrefix(path, "/nodes/")
		_, page, _ = mia.do("GET", path, nil)
		if !strings.Contains(page, `name="ssh_key_id" value="`+strconv.Itoa(saved.ID)+`" checked`) {
			t.Fatalf("the panel does not offer the saved key, chosen:\n%s", page)
		}
		deploy := func(form url.Values) (int, string, string) {
			t.Helper()
			form.Set("csrf", mia.csrf)
			st, page, h := mia.do("POST", path+"/deploy", form)
			return st, page, h.Get("Location")
		}
		unchanged := func(what string) {
			t.Helper()
			n := srv.DB.Node.Query().Where(entnode.UUID(id)).OnlyX(ctx)
			if n.ProvisionState != "available" || len(n.InstanceInfo) != 0 || keys() != 1 {
				t.Errorf("%s changed something: %s %v, %d keys", what, n.ProvisionState, n.InstanceInfo, keys())
			}
		}
		// An empty form: three problems, each by its label, at once.
		st, page, _ = deploy(url.Values{})
		for _, want := range []string{"3 problems to fix", `href="#image">Image: choose a listed image`, `href="#ssh_key">SSH key: choose a saved key or paste a public key`,
			`href="#hostname">Host name: give a host name`, `data-testid="problem-image"`, `data-testid="problem-ssh_key"`, `data-testid="problem-hostname"`} {
			if st != 400 || !strings.Contains(page, want) {
				t.Errorf("the empty form: %d, the page lacks %q", st, want)
			}
		}
		unchanged("the empty form")
		// Every field wrong: five problems, none named like a form field,
		// and what she typed is still there.
		st, page, _ = deploy(url.Values{"image": {"other"}, "image_url": {"ftp://x/disk.raw"}, "image_checksum": {"sha256:zz"}, "ssh_key": {"not a key"},
			"save_key": {"yes"}, "key_name": {""}, "hostname": {"web_1"}})
		for _, want := range []string{"4 problems to fix", "Image URL: give the http:// or https:// address", "Checksum: give the image", "SSH key: this is not an OpenSSH public key",
			"Host name: give a host name", `value="ftp://x/disk.raw"`, `value="sha256:zz"`, ">not a key</textarea>", `value="web_1"`, `name="save_key" value="yes" checked`} {
			if st != 400 || !strings.Contains(page, want) {
				t.Errorf("the wrong form: %d, the page lacks %q", st, want)
			}
		}
		for _, field := range []string{"ssh_key:", "hostname:", "image_url:", "image_checksum:"} {
			if strings.Contains(page, field) {
				t.Errorf("a problem names the form field %s", field)
			}
		}
		unchanged("the wrong form")
		// A key to save needs a name; a key of someone else is no choice.
		if st, page, _ := deploy(url.Values{"image": {"Demo disk 1.0"}, "ssh_key": {sshKey(t)}, "save_key": {"yes"}, "hostname": {"web-1"}}); st != 400 ||
			!strings.Contains(page, "Key name: give the key a name") {
			t.Errorf("saving a key without a name: %d", st)
		}
		if st, page, _ := deploy(url.Values{"image": {"Demo disk 1.0"}, "ssh_key_id": {"999999"}, "hostname": {"web-1"}}); st != 400 || !strings.Contains(page, "SSH key: choose among your saved keys") {
			t.Errorf("a key that is not hers: %d", st)
		}
		unchanged("the refused keys")

		// The saved key and a one-off one she saves as desk.
		desk := sshKey(t)
		st, _, to := deploy(url.Values{"image": {"Demo disk 1.0"}, "ssh_key_id": {strconv.Itoa(saved.ID)}, "ssh_key": {desk}, "save_key": {"yes"}, "key_name": {"desk"}, "hostname": {"web-1"}})
		if st != 303 || to != path+"#deploy" {
			t.Fatalf("deploy: %d %s", st, to)
		}
		if n := srv.DB.SSHKey.Query().Where(sshkey.Name("desk"), sshkey.PublicKey(desk), sshkey.Principal("mia")).CountX(ctx); n != 1 {
			t.Error("the one-off key was not saved as desk")
		}
		waitSettled(t, srv, id, "active")
		n := srv.DB.Node.Query().Where(entnode.UUID(id)).OnlyX(ctx)
		if n.InstanceInfo["display_name"] != "web-1" || n.InstanceInfo["image_source"] != "http://images.example/disk.raw" {
			t.Errorf("instance_info %v", n.InstanceInfo)
		}
		_, page, _ = mia.do("GET", path, nil)
		if !strings.Contains(page, "Deploying Demo disk 1.0 to ") || !strings.Contains(page, "Your key is saved in your profile as desk.") {
			t.Errorf("the node page does not say once what was done:\n%s", page)
		}
		// The flash was shown; the next load has none, and the status
		// update of a node at rest empties the page's flash.
		_, page, _ = mia.do("GET", path, nil)
		if strings.Contains(page, "Deploying Demo disk 1.0 to ") {
			t.Error("the flash shows again on the next load")
		}
		if _, part, _ := mia.do("GET", path+"/status", nil, "HX-Request", "true"); !strings.Contains(part, `<div id="flash" hx-swap-oob="true"></div>`) {
			t.Errorf("the status update of a node at rest leaves the flash:\n%s", part)
		}
		// Her instance's addresses, from the demo inventory, each with the
		// image's login.
		addr := regexp.MustCompile(`data-testid="address">(192\.0\.2\.\d+)<`).FindStringSubmatch(page)
		if addr == nil || !strings.Contains(page, ">ssh debian@"+addr[1]+"<") || !strings.Contains(page, "2001:db8::") {
			t.Fatalf("the running panel shows no address and ssh command:\n%s", page)
		}
		// The release question is asked, not printed.
		question := "Release " + deref(n.Name) + " (project tenant-blue gives it back)?"
		if strings.Count(html.UnescapeString(page), question) != 1 || !strings.Contains(page, `data-confirm="`+question) {
			t.Errorf("the release question is not only the button's confirmation:\n%s", page)
		}
		// A member of the lessee sees the instance but not its addresses;
		// another project does not see the node.
		if _, page, _ := mel.do("GET", path, nil); !strings.Contains(page, `data-stage="running"`) || strings.Contains(page, addr[1]) {
			t.Error("a lessee member who may not release the node is shown its addresses")
		}
		if st, page, _ := gus.do("GET", path, nil); st != 404 || strings.Contains(page, addr[1]) {
			t.Errorf("another project's view of the node: %d", st)
		}

		// Without the browser's confirmation the page asks; nothing is done
		// until she confirms there.
		st, page, _ = mia.do("POST", path+"/undeploy", url.Values{"csrf": {mia.csrf}})
		if st != 200 || !strings.Contains(page, `data-testid="confirm-release"`) || !strings.Contains(page, `name="confirmed" value="yes"`) {
			t.Errorf("an unconfirmed release: %d\n%s", st, page)
		}
		if n := srv.DB.Node.Query().Where(entnode.UUID(id)).OnlyX(ctx); n.ProvisionState != "active" || n.TargetProvisionState != nil {
			t.Fatalf("an unconfirmed release changed the node: %s", n.ProvisionState)
		}
		if st, _, _ := mia.do("POST", path+"/undeploy", url.Values{"csrf": {mia.csrf}, "confirmed": {"yes"}}); st != 303 {
			t.Fatalf("release: %d", st)
		}
		waitSettled(t, srv, id, "available")
	})
}
