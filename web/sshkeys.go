package web

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"
	"golang.org/x/crypto/ssh"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/sshkey"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/identity"
	"github.com/anvilproject/anvil/views"
)

// ruleSSHKey audits a change to one's own saved SSH keys. Like changing
// one's own password it is no policy rule: everyone signed in keeps
// their own profile, and nobody another's.
const ruleSSHKey = "anvil:user:ssh-key"

// sshKeyTypes are the public keys a config drive may carry.
var sshKeyTypes = []string{ssh.KeyAlgoED25519, ssh.KeyAlgoRSA, ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521,
	ssh.KeyAlgoSKED25519, ssh.KeyAlgoSKECDSA256}

// sshKeyWords say what an SSH key field takes, after its label.
const sshKeyWords = "this is not an OpenSSH public key: give one line, such as the contents of ~/.ssh/id_ed25519.pub " +
	"(ssh-ed25519, ssh-rsa, ecdsa-sha2-… or sk-… then the key), without options"

// parseSSHKey accepts one public key line: its type, the key, and an
// optional comment, with no authorized_keys options; it returns the
// key's SHA256 fingerprint. The error is the words after the label.
func parseSSHKey(key string) (string, error) {
	bad := errs.BadRequest("", sshKeyWords)
	if key == "" || len(key) > 16<<10 || strings.ContainsAny(key, "\r\n") {
		return "", bad
	}
	pk, _, opts, rest, err := ssh.ParseAuthorizedKey([]byte(key))
	if err != nil || len(opts) > 0 || len(rest) > 0 || !slices.Contains(sshKeyTypes, pk.Type()) || !strings.HasPrefix(key, pk.Type()+" ") {
		return "", bad
	}
	return ssh.FingerprintSHA256(pk), nil
}

// checkKeyName accepts a saved key's name: 1 to 64 characters, none a
// control character. The error is the words after the label.
func checkKeyName(name string) error {
	if name == "" || utf8.RuneCountInString(name) > 64 || strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return errs.BadRequest("", "give the key a name of 1 to 64 characters, such as laptop")
	}
	return nil
}

// keyOwner is whose saved keys a principal keeps: a local account by its
// name, an SSO identity by issuer and subject (as sessions name them),
// so neither sees the other's keys when their names match.
func keyOwner(pr *policies.Principal) string {
	if pr.Local() {
		return pr.User
	}
	return identity.SSOKey(pr.Issuer, pr.Subject)
}

// savedKeys are the viewer's saved keys, by name.
func (p *Portal) savedKeys(ctx context.Context) ([]*ent.SSHKey, error) {
	pr := policies.PrincipalFrom(ctx)
	return p.DB.SSHKey.Query().Where(sshkey.Principal(keyOwner(pr))).Order(ent.Asc(sshkey.FieldName)).All(ctx)
}

// keyRows shows saved keys.
func keyRows(keys []*ent.SSHKey) []views.SSHKeyRow {
	out := make([]views.SSHKeyRow, len(keys))
	for i, k := range keys {
		out[i] = views.SSHKeyRow{ID: strconv.Itoa(k.ID), Name: k.Name, Fingerprint: k.Fingerprint, Added: k.CreatedAt}
	}
	return out
}

// keyProblems checks a key to save under name, among those saved: every
// problem at once, for the fields nameField and keyField.
func keyProblems(saved []*ent.SSHKey, name, key, nameField, keyField string) []views.Problem {
	var ps []views.Problem
	if err := checkKeyName(name); err != nil {
		ps = append(ps, views.Problem{Field: nameField, Label: "Key name", Msg: err.Error()})
	} else if slices.ContainsFunc(saved, func(k *ent.SSHKey) bool { return k.Name == name }) {
		ps = append(ps, views.Problem{Field: nameField, Label: "Key name", Msg: "you already have a key named " + name + "; choose another name"})
	}
	if fp, err := parseSSHKey(key); err != nil {
		ps = append(ps, views.Problem{Field: keyField, Label: "Public key", Msg: err.Error()})
	} else if slices.ContainsFunc(saved, func(k *ent.SSHKey) bool { return k.Fingerprint == fp }) {
		ps = append(ps, views.Problem{Field: keyField, Label: "Public key", Msg: "this key is already saved in your profile"})
	}
	return ps
}

// saveKey stores a checked key in the viewer's profile, audited.
func (p *Portal) saveKey(ctx context.Context, name, key string) (err error) {
	pr := policies.PrincipalFrom(ctx)
	fp, _ := parseSSHKey(key)
	defer func() {
		p.Guard.Done(ctx, ruleSSHKey, "user", keyOwner(pr), err, map[string]any{"action": "add-ssh-key", "name": name, "fingerprint": fp})
	}()
	_, err = p.DB.SSHKey.Create().SetPrincipal(keyOwner(pr)).SetName(name).SetPublicKey(key).SetFingerprint(fp).Save(ctx)
	if ent.IsConstraintError(err) {
		// Another request saved that name meanwhile.
		return errs.Conflict("you already have a key named %s; choose another name", name)
	}
	return err
}

// addSSHKey saves a key from the account page's form.
func (p *Portal) addSSHKey(c *fiber.Ctx) error {
	ctx := c.UserContext()
	saved, err := p.savedKeys(ctx)
	if err != nil {
		return err
	}
	f := views.KeyForm{Name: strings.TrimSpace(c.FormValue("key_name")), Key: strings.TrimSpace(c.FormValue("public_key"))}
	if f.Problems = keyProblems(saved, f.Name, f.Key, "key_name", "public_key"); len(f.Problems) > 0 {
		return p.renderAccount(c, 400, f)
	}
	if err := p.saveKey(ctx, f.Name, f.Key); err != nil {
		if st := errs.Status(err); st < 500 {
			f.Problems = []views.Problem{{Field: "key_name", Label: "Key name", Msg: err.Error()}}
			return p.renderAccount(c, st, f)
		}
		return err
	}
	return p.flashTo(c, "/account#ssh-keys", "Saved SSH key "+f.Name+".")
}

// deleteSSHKey removes one of the viewer's saved keys: another's is
// not found, as if it did not exist.
func (p *Portal) deleteSSHKey(c *fiber.Ctx) error {
	ctx := c.UserContext()
	pr := policies.PrincipalFrom(ctx)
	id, err := strconv.Atoi(c.Params("id"))
	if err != nil {
		return p.fail(c, errs.NotFound("no such SSH key"))
	}
	k, err := p.DB.SSHKey.Query().Where(sshkey.ID(id), sshkey.Principal(keyOwner(pr))).Only(ctx)
	if ent.IsNotFound(err) {
		return p.fail(c, errs.NotFound("no such SSH key"))
	} else if err != nil {
		return err
	}
	err = p.DB.SSHKey.DeleteOne(k).Exec(ctx)
	p.Guard.Done(ctx, ruleSSHKey, "user", keyOwner(pr), err, map[string]any{"action": "delete-ssh-key", "name": k.Name, "fingerprint": k.Fingerprint})
	if err != nil {
		return err
	}
	return p.flashTo(c, "/account#ssh-keys", "Deleted SSH key "+k.Name+".")
}
