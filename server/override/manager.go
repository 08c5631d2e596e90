package override

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/policyoverride"
	"github.com/anvilproject/anvil/ent/setting"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/audit"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/store"
)

// The setting that carries a refused upload's reason to every replica.
const failedSetting = "policy_override_failed"

// RuleUpdate is the rule an upload needs.
const RuleUpdate = "anvil:policy:update"

// Manager keeps one replica's enforcer in step with the stored override
// and its policy.d directory.
type Manager struct {
	DB      *store.DB
	Enf     *policies.Enforcer
	Dir     string
	Enabled bool
	Log     *slog.Logger

	mu       sync.Mutex
	status   string
	syncedTo int64  // the stored revision written to the directory
	applied  string // digest of the files in force
	// The verdict on the last set of files refused, kept until the files
	// change, so a broken directory is not rendered again every poll.
	refused    string
	refusedErr error
	// fallback names the stored revision Start put in force because
	// policy.d was broken at start-up, until a good set replaces it.
	fallback string
}

// Status is the one-line policy state: "" when overrides are disabled,
// "PO: …" when an override is in force, "PO (broken): …" when the last
// attempt failed and the previous policy stays.
func (m *Manager) Status() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status
}

func (m *Manager) setStatus(s string) {
	m.mu.Lock()
	if m.fallback != "" && strings.HasPrefix(s, "PO (broken)") {
		s += "; in force: " + m.fallback
	}
	changed := s != m.status
	m.status = s
	m.mu.Unlock()
	if changed {
		if strings.HasPrefix(s, "PO (broken)") {
			m.Log.Error("policy override", "status", s)
		} else {
			m.Log.Info("policy override", "status", s)
		}
	}
}

// Run syncs at once and then every interval until ctx ends. With
// overrides disabled it does nothing: the defaults stay, whatever the
// directory holds.
func (m *Manager) Run(ctx context.Context, every time.Duration) {
	if !m.Enabled {
		return
	}
	m.Sync(ctx)
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				m.Sync(ctx)
			}
		}
	}()
}

// Start applies the policy before the server answers anything, failing
// closed: when policy.d cannot be applied, the last stored override that
// validates is put in force (and the status says so); with none, Start
// returns the error, naming the file, and the server must not start, for
// the defaults are wider than what the operator meant.
func (m *Manager) Start(ctx context.Context) error {
	if !m.Enabled {
		return nil
	}
	broken := m.sync(ctx)
	if broken == nil {
		return nil
	}
	revs, err := m.DB.PolicyOverride.Query().Order(ent.Desc(policyoverride.FieldRevision)).All(ctx)
	if err != nil {
		return fmt.Errorf("policy override: %v; and the stored overrides cannot be read: %w", broken, err)
	}
	for _, r := range revs {
		files := Files{}
		for k, v := range r.Files {
			files[k] = []byte(v)
		}
		rules, err := Rules(files)
		if err == nil {
			err = m.Enf.Reload(rules)
		}
		if err != nil {
			continue
		}
		m.mu.Lock()
		m.fallback = fmt.Sprintf("the last good stored override, revision %d (%s)", r.Revision, strings.Join(files.Names(), ", "))
		m.mu.Unlock()
		m.Log.Error("policy override: policy.d is broken at start-up; the last good stored override is in force instead",
			"dir", m.Dir, "err", broken, "revision", r.Revision)
		m.setStatus("PO (broken): " + broken.Error())
		return nil
	}
	return fmt.Errorf("policy override: refusing to start: %v (in %s; no stored override validates to fall back on; fix the file, or start without --policy-override-enabled for the defaults)", broken, m.Dir)
}

// Sync writes a newer stored revision into the directory, then applies
// the directory if it changed. A failure keeps the policy in force.
func (m *Manager) Sync(ctx context.Context) {
	if !m.Enabled {
		return
	}
	_ = m.sync(ctx) // the status says why
}

// sync is Sync; it returns why the directory's policy is not in force.
func (m *Manager) sync(ctx context.Context) error {
	latest, err := m.DB.PolicyOverride.Query().Order(ent.Desc(policyoverride.FieldRevision)).First(ctx)
	if err != nil && !ent.IsNotFound(err) {
		err = fmt.Errorf("cannot read the stored override: %w", err)
		m.setStatus("PO (broken): " + err.Error())
		return err
	}
	if latest != nil && latest.Revision > m.syncedTo {
		if err := m.writeDir(latest.Files); err != nil {
			err = fmt.Errorf("cannot write %s: %w", m.Dir, err)
			m.setStatus("PO (broken): " + err.Error())
			return err
		}
		m.syncedTo = latest.Revision
	}
	files, err := ReadDir(m.Dir)
	if err != nil {
		m.setStatus("PO (broken): " + err.Error())
		return err
	}
	failed := ""
	if s, err := m.DB.Setting.Query().Where(setting.Key(failedSetting)).Only(ctx); err == nil {
		failed = string(s.Value)
	}
	if d := files.Digest(); d == m.refused {
		m.setStatus("PO (broken): " + m.refusedErr.Error())
		return m.refusedErr
	} else if d != m.applied {
		m.Log.Info("policy override: validating policy.d", "dir", m.Dir, "files", len(files), "digest", d)
		rules, err := Rules(files)
		if err == nil {
			err = m.Enf.Reload(rules)
		}
		if err != nil {
			m.refused, m.refusedErr = d, err
			m.setStatus("PO (broken): " + err.Error())
			return err
		}
		m.applied, m.refused, m.refusedErr = d, "", nil
		m.mu.Lock()
		m.fallback = ""
		m.mu.Unlock()
	}
	switch {
	case failed != "":
		m.setStatus("PO (broken): " + failed)
	case len(files) == 0:
		m.setStatus("PO: no override files; defaults in force")
	default:
		m.setStatus(fmt.Sprintf("PO: %d file(s) in force (%s)", len(files), strings.Join(files.Names(), ", ")))
	}
	return nil
}

// writeDir makes the directory hold exactly files, logging each file it
// removes that Anvil did not put there.
func (m *Manager) writeDir(files map[string]string) error {
	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(m.Dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if _, keep := files[e.Name()]; keep || e.IsDir() {
			continue
		}
		if err := os.Remove(filepath.Join(m.Dir, e.Name())); err != nil {
			return err
		}
		m.Log.Warn("policy.d: removed a file the applied override does not contain", "file", e.Name())
	}
	for name, body := range files {
		tmp := filepath.Join(m.Dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(m.Dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// Apply validates an upload whole and stores it as the next revision,
// which every replica then applies. A refused upload changes nothing but
// the status, which says why. Both outcomes are audited with the diff of
// effective rules.
func Apply(ctx context.Context, db *store.DB, log *audit.Log, files Files, who string) (int64, error) {
	return ApplyChange(ctx, db, log, files, Change{Who: who})
}

// Change says who applies a set of files and how, for the audit record,
// and which revision they saw.
type Change struct {
	Who string
	// How is recorded beside an upload's diff: "restore of revision 3",
	// "revert to defaults"; empty for an upload.
	How string
	// Base, when set, is the revision the operator's preview or choice
	// was made against: if another has been stored since, the change is
	// refused (409) and nothing is written, not even the status.
	Base *int64
}

// ApplyChange is Apply with the change's provenance and base revision.
func ApplyChange(ctx context.Context, db *store.DB, log *audit.Log, files Files, ch Change) (int64, error) {
	before := map[string]string{}
	latest, err := db.PolicyOverride.Query().Order(ent.Desc(policyoverride.FieldRevision)).First(ctx)
	if err != nil && !ent.IsNotFound(err) {
		return 0, err
	}
	var current int64
	if latest != nil {
		current = latest.Revision
	}
	if ch.Base != nil && *ch.Base != current {
		stale := errs.Conflict("the stored policy is revision %d now, not %d as when you chose; review it and try again", current, *ch.Base)
		log.Done(ctx, RuleUpdate, "policy", "", stale, map[string]any{"files": files.Names(), "by": ch.Who, "how": ch.How})
		return 0, stale
	}
	if latest != nil {
		prev := Files{}
		for k, v := range latest.Files {
			prev[k] = []byte(v)
		}
		if r, err := Rules(prev); err == nil {
			before = r
		}
	}
	rules, verr := Rules(files)
	detail := map[string]any{"files": files.Names(), "by": ch.Who}
	if ch.How != "" {
		detail["how"] = ch.How
	}
	if verr == nil {
		detail["diff"] = Diff(before, rules)
	}
	if verr != nil {
		refused := errs.BadRequest("policy", "%s", verr)
		log.Done(ctx, RuleUpdate, "policy", "", refused, detail)
		if err := setFailed(ctx, db, verr.Error()); err != nil {
			return 0, err
		}
		return 0, refused
	}
	rev := current + 1
	stored := map[string]string{}
	for k, v := range files {
		stored[k] = string(v)
	}
	err = store.WithTx(ctx, db, func(tx *ent.Client) error {
		if err := tx.PolicyOverride.Create().SetRevision(rev).SetFiles(stored).SetUploadedBy(ch.Who).Exec(ctx); err != nil {
			return err
		}
		_, err := tx.Setting.Delete().Where(setting.Key(failedSetting)).Exec(ctx)
		return err
	})
	if err != nil {
		return 0, err
	}
	log.Done(ctx, RuleUpdate, "policy", fmt.Sprint(rev), nil, detail)
	return rev, nil
}

func setFailed(ctx context.Context, db *store.DB, reason string) error {
	n, err := db.Setting.Update().Where(setting.Key(failedSetting)).SetValue([]byte(reason)).Save(ctx)
	if err == nil && n == 0 {
		err = db.Setting.Create().SetKey(failedSetting).SetValue([]byte(reason)).Exec(ctx)
	}
	return err
}

// WideningMark starts the note on a diff line whose change lets personas
// through that were denied before.
const WideningMark = "WIDENS access for "

// Diff lists effective-rule changes as "rule: old -> new", and marks each
// change that widens access with the personas of the persona × rule
// matrix that gain it; a rule that widens only through a helper it
// refers to gets a line of its own.
func Diff(before, after map[string]string) []string {
	keys := slices.Sorted(maps.Keys(after))
	for k := range before {
		if _, ok := after[k]; !ok {
			keys = append(keys, k)
		}
	}
	// Both sides have been validated; should either fail to build, the
	// diff is still shown, unmarked.
	wider, _ := policies.Widening(before, after)
	var out []string
	for _, k := range keys {
		if before[k] != after[k] {
			line := fmt.Sprintf("%s: %q -> %q", k, before[k], after[k])
			if ps := wider[k]; len(ps) > 0 {
				line += "  " + WideningMark + strings.Join(ps, ", ")
			}
			out = append(out, line)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(wider)) {
		if before[k] == after[k] {
			out = append(out, fmt.Sprintf("%s: unchanged, but a rule it refers to changed  %s%s", k, WideningMark, strings.Join(wider[k], ", ")))
		}
	}
	return out
}

// StoredStatus describes the stored override for the CLI: its revision
// and whether it validates with this binary, or the refused upload.
func StoredStatus(ctx context.Context, db *store.DB) (string, error) {
	if s, err := db.Setting.Query().Where(setting.Key(failedSetting)).Only(ctx); err == nil {
		return "PO (broken): " + string(s.Value), nil
	}
	latest, err := db.PolicyOverride.Query().Order(ent.Desc(policyoverride.FieldRevision)).First(ctx)
	if ent.IsNotFound(err) {
		return "PO: no override uploaded; defaults in force", nil
	}
	if err != nil {
		return "", err
	}
	files := Files{}
	for k, v := range latest.Files {
		files[k] = []byte(v)
	}
	if _, err := Rules(files); err != nil {
		return "PO (broken): revision " + fmt.Sprint(latest.Revision) + ": " + err.Error(), nil
	}
	return fmt.Sprintf("PO: revision %d, %d file(s) (%s), uploaded by %s at %s", latest.Revision, len(files),
		strings.Join(files.Names(), ", "), latest.UploadedBy, latest.UploadedAt.UTC().Format(time.RFC3339)), nil
}
