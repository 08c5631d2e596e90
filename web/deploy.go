package web

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/deployimages"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/views"
)

// deployRules are what deploying from the portal takes: the image goes
// into instance_info, then the provision state changes to active.
var deployRules = []string{nodes.RuleUpdateInstInfo, conductor.RuleProvision}

// deployPanel fills the Deploy panel for the node's state and what the
// viewer may do; the services decide everything again when it is used.
func (p *Portal) deployPanel(ctx context.Context, d *views.NodeDetail, v *nodes.View) error {
	t := nodes.Target(v.Node)
	dp := &d.Deploy
	dp.Fake = bmc.Canonical(v.Driver) == "fake-hardware"
	switch v.ProvisionState {
	case nodes.StateAvailable:
		dp.Stage = "form"
		for _, r := range deployRules {
			if !p.Guard.Allowed(ctx, r, t) {
				dp.Why, dp.WhoMay = p.denied(ctx, "may not deploy this node", r), p.whoMay(ctx, t, "Deploying", deployRules...)
				break
			}
		}
		for _, im := range p.DeployImages {
			dp.Images = append(dp.Images, views.DeployImage{Name: im.Name})
		}
		if dp.Why != "" {
			return nil
		}
		keys, err := p.savedKeys(ctx)
		if err != nil {
			return err
		}
		dp.Keys = keyRows(keys)
		if len(keys) == 1 {
			// A fresh form chooses the only saved key; a refused form
			// shows the choices as sent instead.
			dp.Chosen = []string{dp.Keys[0].ID}
		}
		return nil
	case conductor.StateDeploying, conductor.StateDeployWait, conductor.StateDeployHold:
		dp.Stage = "deploying"
		if s, _ := v.DeployStep["step"].(string); s != "" {
			i, _ := v.DeployStep["interface"].(string)
			dp.Step = i + "." + s
		}
		if total, ok := v.Node.DriverInternalInfo["deploy_step_total"].(float64); ok {
			idx, _ := v.Node.DriverInternalInfo["deploy_step_index"].(float64)
			dp.StepIndex, dp.StepTotal = int(idx)+1, int(total)
		}
	case nodes.StateActive:
		dp.Stage = "running"
	case conductor.StateDeployFailed:
		dp.Stage, dp.Failed = "failed", deref(v.LastError)
		if dp.Failed == "" {
			dp.Failed = "no reason was recorded"
		}
	case conductor.StateDeleting:
		dp.Stage, dp.Wipe = "wiping", p.Ops.C.WipePromise(v.Node)
		return nil
	case nodes.StateCleaning, nodes.StateCleanWait:
		if deref(v.TargetProvisionState) == nodes.StateAvailable {
			dp.Stage, dp.Wipe = "wiping", p.Ops.C.WipePromise(v.Node)
		}
		return nil
	default:
		return nil
	}
	dp.Deployed, dp.DeployedHost = p.deployedImage(v.InstanceInfo), str(v.InstanceInfo["display_name"])
	if dp.Stage == "deploying" {
		return nil
	}
	if dp.Stage == "running" {
		if err := p.instanceAddresses(ctx, dp, v); err != nil {
			return err
		}
	}
	if !p.Guard.Allowed(ctx, conductor.RuleProvision, t) {
		dp.Why, dp.WhoMay = p.denied(ctx, "may not release this node", conductor.RuleProvision), p.whoMay(ctx, t, "Releasing", conductor.RuleProvision)
		return nil
	}
	holder := v.Lessee
	if holder == "" {
		holder = v.Owner
	}
	// What the release does to the disks, in the words of the node's
	// wipe policy: never "wiped" for a node that will not be.
	dp.Release = "Release " + nameOr(deref(v.Name), v.UUID) + " (" + views.OwnerText(holder) + " gives it back)? " + p.Ops.C.WipePromise(v.Node)
	dp.ReleaseLabel = "Release"
	if conductor.Wipes(v.Node) {
		dp.ReleaseLabel = "Release and wipe"
	}
	return nil
}

// instanceAddresses fills the running instance's addresses from this
// node's stored inventory (what its agent reported: Ironic's interfaces
// with ipv4_address and ipv6_address) and the SSH command to reach it.
// The addresses are the tenant's to know even where the policy keeps
// the rest of the inventory from them: whoever may read the inventory
// or deploy and release the node sees them, nobody else.
func (p *Portal) instanceAddresses(ctx context.Context, dp *views.DeployPanel, v *nodes.View) error {
	t := nodes.Target(v.Node)
	if !p.Guard.Allowed(ctx, conductor.RuleInventoryGet, t) && !p.Guard.Allowed(ctx, conductor.RuleProvision, t) {
		return nil
	}
	inv, err := v.Node.QueryInventory().Only(ctx)
	if ent.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	dp.Addresses = inventoryAddresses(inv.Inventory)
	src := str(v.InstanceInfo["image_source"])
	for _, im := range p.DeployImages {
		if im.URL == src {
			dp.SSHUser = im.SSHUser
		}
	}
	return nil
}

// inventoryAddresses lists the usable addresses of an agent's inventory,
// IPv4 first, each once, in the inventory's order; loopback, link-local,
// multicast and unspecified ones reach nobody.
func inventoryAddresses(inv map[string]any) []string {
	var v4, v6 []string
	nics, _ := inv["interfaces"].([]any)
	for _, raw := range nics {
		nic, _ := raw.(map[string]any)
		for _, key := range []string{"ipv4_address", "ipv6_address"} {
			s, _ := nic[key].(string)
			// An agent may report a prefix length with the address.
			s, _, _ = strings.Cut(s, "/")
			a, err := netip.ParseAddr(s)
			if err != nil || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified() || a.IsMulticast() {
				continue
			}
			a = a.WithZone("").Unmap()
			switch s := a.String(); {
			case a.Is4() && !slices.Contains(v4, s):
				v4 = append(v4, s)
			case a.Is6() && !slices.Contains(v6, s):
				v6 = append(v6, s)
			}
		}
	}
	return append(v4, v6...)
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// deployedImage names the deployed image: its published name, else its
// URL (as the viewer may read it).
func (p *Portal) deployedImage(info map[string]any) string {
	src := str(info["image_source"])
	for _, im := range p.DeployImages {
		if im.URL == src {
			return im.Name
		}
	}
	if src == "" {
		return "an instance"
	}
	return src
}

// whoMay names, for a refusal, the least role of the node's lessee, of
// its owner and of the system that passes every rule, as the policy in
// force decides it.
func (p *Portal) whoMay(ctx context.Context, t policies.Target, what string, rules ...string) string {
	passes := func(pr *policies.Principal) bool {
		c := policies.WithPrincipal(ctx, pr)
		for _, r := range rules {
			if !p.Guard.Allowed(c, r, t) {
				return false
			}
		}
		return true
	}
	var who []string
	for _, s := range []struct{ project, as string }{{t.NodeLessee, "the lessee"}, {t.NodeOwner, "the owner"}, {"", ""}} {
		if s.project == "" && s.as != "" {
			continue
		}
		for _, role := range []string{"member", "manager", "admin"} {
			pr := &policies.Principal{User: "someone", Project: s.project, System: s.project == "", Roles: policies.ExpandRoles([]string{role})}
			if !passes(pr) {
				continue
			}
			if s.project == "" {
				who = append(who, "an operator (system "+role+")")
			} else {
				who = append(who, "a "+role+" of project "+s.project+" ("+s.as+")")
			}
			break
		}
	}
	switch len(who) {
	case 0:
		return what + " this node is allowed to nobody by the policy in force."
	case 1:
		return what + " this node takes " + who[0] + "."
	}
	return what + " this node takes " + strings.Join(who[:len(who)-1], ", ") + " or " + who[len(who)-1] + "."
}

// hostnameRE is an RFC 1123 host name: dot-separated labels of letters,
// digits and inner hyphens, up to 63 characters each.
var hostnameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)

func hostnameOK(h string) bool { return len(h) <= 253 && hostnameRE.MatchString(h) }

// deployLabels name the Deploy form's fields, as the form labels them,
// in its problems.
var deployLabels = map[string]string{
	"image": "Image", "image_url": "Image URL", "image_checksum": "Checksum", "ssh_key": "SSH key", "key_name": "Key name", "hostname": "Host name",
}

// deployForm reads the Deploy panel's form.
func deployForm(c *fiber.Ctx) views.DeployPanel {
	f := views.DeployPanel{Image: c.FormValue("image"), URL: strings.TrimSpace(c.FormValue("image_url")),
		Checksum: strings.TrimSpace(c.FormValue("image_checksum")), Key: strings.TrimSpace(c.FormValue("ssh_key")),
		Hostname: strings.TrimSpace(c.FormValue("hostname")), SaveKey: c.FormValue("save_key") == "yes",
		KeyName: strings.TrimSpace(c.FormValue("key_name"))}
	for _, id := range c.Request().PostArgs().PeekMulti("ssh_key_id") {
		f.Chosen = append(f.Chosen, string(id))
	}
	return f
}

// deployRequest checks the whole form against the viewer's saved keys
// (every problem at once, each named by its field's label) and returns
// the instance_info it sets and the config drive it deploys with.
func (p *Portal) deployRequest(f views.DeployPanel, saved []*ent.SSHKey) (map[string]any, map[string]any, []views.Problem) {
	var ps []views.Problem
	problem := func(field, msg string) {
		ps = append(ps, views.Problem{Field: field, Label: deployLabels[field], Msg: msg})
	}
	var info map[string]any
	switch i := slices.IndexFunc(p.DeployImages, func(im deployimages.Image) bool { return im.Name == f.Image }); {
	case f.Image == views.OtherImage:
		if deployimages.CheckURL("image_url", f.URL) != nil {
			problem("image_url", "give the http:// or https:// address of a whole-disk image (at most 2048 characters)")
		}
		var err error
		if info, err = deployimages.InstanceInfo(f.URL, f.Checksum, "image_checksum"); err != nil {
			problem("image_checksum", "give the image's checksum: sha256:<hex> (or md5, sha1, sha384, sha512), or its hex digest alone")
		}
	case i >= 0:
		info, _ = deployimages.InstanceInfo(p.DeployImages[i].URL, p.DeployImages[i].Checksum, "image_checksum")
	default:
		problem("image", "choose a listed image, or another image by URL")
	}
	keys := map[string]any{}
	for _, id := range f.Chosen {
		i := slices.IndexFunc(saved, func(k *ent.SSHKey) bool { return strconv.Itoa(k.ID) == id })
		if i < 0 {
			problem("ssh_key", "choose among your saved keys; one you chose is no longer saved")
			continue
		}
		keys[saved[i].Name] = saved[i].PublicKey
	}
	switch {
	case f.Key != "":
		if _, err := parseSSHKey(f.Key); err != nil {
			problem("ssh_key", err.Error())
		} else if f.SaveKey {
			for _, pr := range keyProblems(saved, f.KeyName, f.Key, "key_name", "ssh_key") {
				pr.Label = deployLabels[pr.Field]
				ps = append(ps, pr)
			}
		}
		// The config drive names each key; the one-off key is the
		// default, as Nova names a key pair's.
		name := "default"
		if _, taken := keys[name]; taken {
			name = "one-off"
		}
		keys[name] = f.Key
	case len(f.Chosen) == 0:
		problem("ssh_key", "choose a saved key or paste a public key, so that you can log in to the instance")
	}
	if f.SaveKey && f.Key == "" && len(f.Chosen) > 0 {
		problem("ssh_key", "paste the key to save in the box; the keys you chose are saved already")
	}
	if !hostnameOK(f.Hostname) {
		problem("hostname", "give a host name of letters, digits and hyphens, dot-separated, each part at most 63 characters and not starting or ending with a hyphen (RFC 1123)")
	}
	if len(ps) > 0 {
		return nil, nil, ps
	}
	// Nova names the instance in display_name; the page shows it.
	info["display_name"] = f.Hostname
	cd := map[string]any{"meta_data": map[string]any{"public_keys": keys, "hostname": f.Hostname}}
	return info, cd, nil
}

// imageKeys are the instance_info keys a portal deployment sets; any
// other image's are removed, so the conductor reads only this one's.
var imageKeys = []string{"image_source", "image_checksum", "image_os_hash_algo", "image_os_hash_value", "display_name"}

// instanceInfoPatch is the JSON patch from instance_info old to one
// with set's image keys.
func instanceInfoPatch(old, set map[string]any) []byte {
	var ops []map[string]any
	for _, k := range imageKeys {
		if v, ok := set[k]; ok {
			ops = append(ops, map[string]any{"op": "add", "path": "/instance_info/" + k, "value": v})
		} else if _, had := old[k]; had {
			ops = append(ops, map[string]any{"op": "remove", "path": "/instance_info/" + k})
		}
	}
	raw, _ := json.Marshal(ops)
	return raw
}

// nodeDeploy deploys an available node from the Deploy panel through the
// services the API uses (node 404, rules 403, the form 400, then the
// instance_info patch and the provision request, each audited). A
// deployment the conductor refuses puts instance_info back as it was.
// A one-off key the viewer asked to keep is saved once the deployment
// is under way, so a refused form saves nothing.
func (p *Portal) nodeDeploy(c *fiber.Ctx) error {
	ctx := c.UserContext()
	n, err := p.Nodes.Authorized(ctx, c.Params("id"), append([]string{nodes.RuleGet}, deployRules...)...)
	if err != nil {
		return p.fail(c, err)
	}
	saved, err := p.savedKeys(ctx)
	if err != nil {
		return err
	}
	f := deployForm(c)
	info, cd, problems := p.deployRequest(f, saved)
	if len(problems) > 0 {
		return p.deployRefused(c, f, 400, problems)
	}
	if _, err := p.Nodes.Patch(ctx, n.UUID, instanceInfoPatch(n.InstanceInfo, info), nil); err != nil {
		return p.deployFailed(c, f, err)
	}
	if err := p.Ops.Provision(ctx, n.UUID, conductor.ProvisionRequest{Target: "active", ConfigDrive: cd}); err != nil {
		if _, rerr := p.Nodes.Patch(ctx, n.UUID, instanceInfoPatch(info, n.InstanceInfo), nil); rerr != nil {
			return errors.Join(err, rerr)
		}
		return p.deployFailed(c, f, err)
	}
	msg := "Deploying " + p.deployedImage(info) + " to " + nameOr(deref(n.Name), n.UUID) + " as " + f.Hostname + "."
	if f.SaveKey && f.Key != "" {
		if err := p.saveKey(ctx, f.KeyName, f.Key); err != nil {
			if errs.Status(err) >= 500 {
				return err
			}
			msg += " Your key was not saved: " + err.Error() + "."
		} else {
			msg += " Your key is saved in your profile as " + f.KeyName + "."
		}
	}
	return p.flashTo(c, "/nodes/"+n.UUID+"#deploy", msg)
}

// deployFailed shows a service's refusal of a checked form: the form
// again when it is the caller's to fix, else the error page.
func (p *Portal) deployFailed(c *fiber.Ctx, f views.DeployPanel, err error) error {
	st := errs.Status(err)
	if st >= 500 || st == 404 {
		return p.fail(c, err)
	}
	return p.deployRefused(c, f, st, []views.Problem{{Msg: err.Error()}})
}

// deployRefused shows the node page again with the form as sent and its
// problems, listed at its top and each next to its field.
func (p *Portal) deployRefused(c *fiber.Ctx, f views.DeployPanel, status int, problems []views.Problem) error {
	return p.fullNodePage(c, status, "", func(d *views.NodeDetail) {
		if d.Deploy.Stage != "form" {
			// The node moved on meanwhile: the panel shows where it is.
			return
		}
		d.Deploy.Image, d.Deploy.URL, d.Deploy.Checksum, d.Deploy.Key, d.Deploy.Hostname = f.Image, f.URL, f.Checksum, f.Key, f.Hostname
		d.Deploy.Chosen, d.Deploy.SaveKey, d.Deploy.KeyName, d.Deploy.Problems = f.Chosen, f.SaveKey, f.KeyName, problems
	})
}

// nodeUndeploy is "Release and wipe": the tear down Ironic's deleted
// target starts, whose automated cleaning wipes the disks; the node's
// allocation ends with it.
func (p *Portal) nodeUndeploy(c *fiber.Ctx) error {
	ctx := c.UserContext()
	n, err := p.Nodes.Authorized(ctx, c.Params("id"), nodes.RuleGet, conductor.RuleProvision)
	if err != nil {
		return p.fail(c, err)
	}
	if c.FormValue("confirmed") != "yes" {
		// The browser ran no script to ask: the page asks instead.
		return p.fullNodePage(c, 200, "", func(d *views.NodeDetail) { d.Deploy.ConfirmRelease = true })
	}
	if err := p.Ops.Provision(ctx, n.UUID, conductor.ProvisionRequest{Target: "deleted"}); err != nil {
		if errs.Status(err) >= 500 {
			return err
		}
		return p.fullNodePage(c, errs.Status(err), err.Error(), nil)
	}
	return p.flashTo(c, "/nodes/"+n.UUID, "Releasing "+nameOr(deref(n.Name), n.UUID)+". "+p.Ops.C.WipePromise(n)+" Then it is available again.")
}
