package web

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"

	"github.com/gofiber/fiber/v2"
	"golang.org/x/crypto/ssh"

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
func (p *Portal) deployPanel(ctx context.Context, d *views.NodeDetail, v *nodes.View) {
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
		return
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
		return
	case nodes.StateCleaning, nodes.StateCleanWait:
		if deref(v.TargetProvisionState) == nodes.StateAvailable {
			dp.Stage, dp.Wipe = "wiping", p.Ops.C.WipePromise(v.Node)
		}
		return
	default:
		return
	}
	dp.Deployed, dp.DeployedHost = p.deployedImage(v.InstanceInfo), str(v.InstanceInfo["display_name"])
	if dp.Stage == "deploying" {
		return
	}
	if !p.Guard.Allowed(ctx, conductor.RuleProvision, t) {
		dp.Why, dp.WhoMay = p.denied(ctx, "may not release this node", conductor.RuleProvision), p.whoMay(ctx, t, "Releasing", conductor.RuleProvision)
		return
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

// sshKeyTypes are the public keys a config drive may carry.
var sshKeyTypes = []string{ssh.KeyAlgoED25519, ssh.KeyAlgoRSA, ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521,
	ssh.KeyAlgoSKED25519, ssh.KeyAlgoSKECDSA256}

// checkSSHKey accepts one public key line: its type, the key, and an
// optional comment, with no authorized_keys options.
func checkSSHKey(key string) error {
	bad := errs.BadRequest("ssh_key", "ssh_key: give one public key line, such as the contents of ~/.ssh/id_ed25519.pub (ssh-ed25519, ssh-rsa, ecdsa-sha2-… or sk-…)")
	if key == "" || len(key) > 16<<10 || strings.ContainsAny(key, "\r\n") {
		return bad
	}
	pk, _, opts, rest, err := ssh.ParseAuthorizedKey([]byte(key))
	if err != nil || len(opts) > 0 || len(rest) > 0 || !slices.Contains(sshKeyTypes, pk.Type()) || !strings.HasPrefix(key, pk.Type()+" ") {
		return bad
	}
	return nil
}

// hostnameRE is an RFC 1123 host name: dot-separated labels of letters,
// digits and inner hyphens, up to 63 characters each.
var hostnameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)

func checkHostname(h string) error {
	if len(h) > 253 || !hostnameRE.MatchString(h) {
		return errs.BadRequest("hostname", "hostname: give a host name of letters, digits and hyphens, dot-separated, each part at most 63 characters and not starting or ending with a hyphen (RFC 1123)")
	}
	return nil
}

// deployForm reads the Deploy panel's form.
func deployForm(c *fiber.Ctx) views.DeployPanel {
	return views.DeployPanel{Image: c.FormValue("image"), URL: strings.TrimSpace(c.FormValue("image_url")),
		Checksum: strings.TrimSpace(c.FormValue("image_checksum")), Key: strings.TrimSpace(c.FormValue("ssh_key")),
		Hostname: strings.TrimSpace(c.FormValue("hostname"))}
}

// deployRequest validates the form: the instance_info it sets and the
// config drive it deploys with.
func (p *Portal) deployRequest(f views.DeployPanel) (map[string]any, map[string]any, error) {
	var info map[string]any
	switch i := slices.IndexFunc(p.DeployImages, func(im deployimages.Image) bool { return im.Name == f.Image }); {
	case f.Image == views.OtherImage:
		if err := deployimages.CheckURL("image_url", f.URL); err != nil {
			return nil, nil, err
		}
		var err error
		if info, err = deployimages.InstanceInfo(f.URL, f.Checksum, "image_checksum"); err != nil {
			return nil, nil, err
		}
	case i >= 0:
		info, _ = deployimages.InstanceInfo(p.DeployImages[i].URL, p.DeployImages[i].Checksum, "image_checksum")
	default:
		return nil, nil, errs.BadRequest("image", "image: choose a listed image, or another image by URL")
	}
	if err := checkSSHKey(f.Key); err != nil {
		return nil, nil, err
	}
	if err := checkHostname(f.Hostname); err != nil {
		return nil, nil, err
	}
	// Nova names the instance in display_name; the page shows it.
	info["display_name"] = f.Hostname
	cd := map[string]any{"meta_data": map[string]any{"public_keys": map[string]any{"default": f.Key}, "hostname": f.Hostname}}
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
func (p *Portal) nodeDeploy(c *fiber.Ctx) error {
	ctx := c.UserContext()
	n, err := p.Nodes.Authorized(ctx, c.Params("id"), append([]string{nodes.RuleGet}, deployRules...)...)
	if err != nil {
		return p.fail(c, err)
	}
	f := deployForm(c)
	info, cd, err := p.deployRequest(f)
	if err != nil {
		return p.deployRefused(c, f, err)
	}
	if _, err := p.Nodes.Patch(ctx, n.UUID, instanceInfoPatch(n.InstanceInfo, info), nil); err != nil {
		return p.deployRefused(c, f, err)
	}
	if err := p.Ops.Provision(ctx, n.UUID, conductor.ProvisionRequest{Target: "active", ConfigDrive: cd}); err != nil {
		if _, rerr := p.Nodes.Patch(ctx, n.UUID, instanceInfoPatch(info, n.InstanceInfo), nil); rerr != nil {
			return errors.Join(err, rerr)
		}
		return p.deployRefused(c, f, err)
	}
	return p.flashTo(c, "/nodes/"+n.UUID, "Deploying "+p.deployedImage(info)+" to "+nameOr(deref(n.Name), n.UUID)+" as "+f.Hostname+".")
}

// deployRefused shows the node page again with the form as sent and the
// refusal next to the field it names.
func (p *Portal) deployRefused(c *fiber.Ctx, f views.DeployPanel, err error) error {
	st := errs.Status(err)
	if st >= 500 || st == 404 {
		return p.fail(c, err)
	}
	var e *errs.Error
	field := ""
	if errors.As(err, &e) && slices.Contains([]string{"image", "image_url", "image_checksum", "ssh_key", "hostname"}, e.Field) {
		field = e.Field
	}
	return p.fullNodePage(c, st, "", func(d *views.NodeDetail) {
		if d.Deploy.Stage != "form" {
			// The node moved on meanwhile: the refusal goes to the status.
			return
		}
		d.Deploy.Image, d.Deploy.URL, d.Deploy.Checksum, d.Deploy.Key, d.Deploy.Hostname = f.Image, f.URL, f.Checksum, f.Key, f.Hostname
		d.Deploy.Field, d.Deploy.Problem = field, err.Error()
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
	if err := p.Ops.Provision(ctx, n.UUID, conductor.ProvisionRequest{Target: "deleted"}); err != nil {
		if errs.Status(err) >= 500 {
			return err
		}
		return p.fullNodePage(c, errs.Status(err), err.Error(), nil)
	}
	return p.flashTo(c, "/nodes/"+n.UUID, "Releasing "+nameOr(deref(n.Name), n.UUID)+". "+p.Ops.C.WipePromise(n)+" Then it is available again.")
}
