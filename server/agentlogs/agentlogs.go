// Package agentlogs keeps the ramdisk agent's logs of failed runs: the
// conductor asks the agent for them (Ironic's collect_system_logs) on
// every failure and stores each as one gzipped tarball under a stable
// name, which the node's history records; retention by count, age and
// total size bounds the directory. System readers read them through
// the API and the portal: the agent's journal shows the whole machine,
// disks and network included, which a tenant's project is not shown.
package agentlogs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anvilproject/anvil/ent/nodeevent"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
)

// RuleGet guards listing and reading a node's agent logs.
const RuleGet = "anvil:node:agent_logs:get"

// Retention defaults: what a fleet's operator can read a month of
// failures from without the directory growing without bound.
const (
	DefaultMaxPerNode = 10
	DefaultMaxAge     = 30 * 24 * time.Hour
	DefaultMaxBytes   = 1 << 30
)

// stamp is the UTC time in a log's name: sortable, and free of
// characters a file system or a URL would mind.
const stamp = "20060102T150405.000000000Z"

// nameRE is a log's name: <node uuid>_<stamp>.tar.gz. Anything else in
// the directory is not a log and is neither served nor removed.
var nameRE = regexp.MustCompile(`^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})_(\d{8}T\d{6}\.\d{9}Z)\.tar\.gz$`)

// Log is one kept log.
type Log struct {
	Name      string    `json:"name"`
	Node      string    `json:"node_uuid"`
	Size      int64     `json:"size"`
	CreatedAt time.Time `json:"created_at"`
	// Operation is the run whose failure left the log ("deploy",
	// "clean", …), as the node's history recorded it; "" when the
	// history no longer says.
	Operation string `json:"operation,omitempty"`
}

// keptSuffix ends the history message that records a kept log, followed
// by the log's name: how the log is found from its record and back.
const keptSuffix = " as agent log "

// KeptMessage is the node history's message for a log of size bytes
// kept as name; the event's type is the operation that failed, which
// List reads back.
func KeptMessage(size int, name string) string {
	return fmt.Sprintf("Kept the ramdisk agent's logs (%d bytes)%s%s", size, keptSuffix, name)
}

// Store is the directory of logs and its retention.
type Store struct {
	Dir string
	// MaxPerNode keeps a node's newest logs only (0 keeps none).
	MaxPerNode int
	// MaxAge removes older logs; MaxBytes bounds all logs together,
	// removing the oldest first. Zero means no such bound.
	MaxAge   time.Duration
	MaxBytes int64
	// now is the clock; nil is time.Now.
	now func() time.Time
	mu  sync.Mutex
}

func (s *Store) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// ErrNotKept says why a log was not stored although the agent gave it.
var ErrNotKept = errors.New("not kept")

// Save stores one node's log and applies the retention; it returns the
// log's name, which stays the same for as long as the log is kept.
func (s *Store) Save(nodeUUID string, tgz []byte) (string, error) {
	if s.MaxPerNode <= 0 {
		return "", fmt.Errorf("%w: the store keeps no logs", ErrNotKept)
	}
	if s.MaxBytes > 0 && int64(len(tgz)) > s.MaxBytes {
		return "", fmt.Errorf("%w: %d bytes is more than --agent-log-max-bytes (%d)", ErrNotKept, len(tgz), s.MaxBytes)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.MkdirAll(s.Dir, 0o750); err != nil {
		return "", err
	}
	name := strings.ToLower(nodeUUID) + "_" + s.clock().UTC().Format(stamp) + ".tar.gz"
	if !nameRE.MatchString(name) {
		return "", fmt.Errorf("%w: node %q is not a UUID", ErrNotKept, nodeUUID)
	}
	// Written aside and renamed, so a reader never sees half a log.
	tmp, err := os.CreateTemp(s.Dir, ".incoming-*")
	if err != nil {
		return "", err
	}
	_, err = tmp.Write(tgz)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(s.Dir, name))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	_, err = s.prune()
	return name, err
}

// Prune applies the retention now, as the conductor does when it starts
// (a directory left alone while no run failed still ages); it returns
// the names it removed.
func (s *Store) Prune() ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prune()
}

func (s *Store) prune() ([]string, error) {
	all, err := s.all()
	if err != nil {
		return nil, err
	}
	// Newest first: what stays is decided in the order it would be kept.
	slices.SortFunc(all, func(a, b Log) int { return b.CreatedAt.Compare(a.CreatedAt) })
	now := s.clock()
	perNode := map[string]int{}
	var total int64
	var removed []string
	var errsSeen []error
	for _, l := range all {
		perNode[l.Node]++
		total += l.Size
		if perNode[l.Node] <= s.MaxPerNode && (s.MaxAge <= 0 || now.Sub(l.CreatedAt) <= s.MaxAge) && (s.MaxBytes <= 0 || total <= s.MaxBytes) {
			continue
		}
		total -= l.Size
		if err := os.Remove(filepath.Join(s.Dir, l.Name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errsSeen = append(errsSeen, err)
			continue
		}
		removed = append(removed, l.Name)
	}
	return removed, errors.Join(errsSeen...)
}

// all lists every log in the directory; a missing directory has none.
func (s *Store) all() ([]Log, error) {
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Log
	for _, e := range entries {
		l, ok := parse(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		l.Size = info.Size()
		out = append(out, l)
	}
	return out, nil
}

func parse(name string) (Log, bool) {
	m := nameRE.FindStringSubmatch(name)
	if m == nil {
		return Log{}, false
	}
	at, err := time.Parse(stamp, m[2])
	if err != nil {
		return Log{}, false
	}
	return Log{Name: name, Node: m[1], CreatedAt: at}, true
}

// List is one node's logs, newest first.
func (s *Store) List(nodeUUID string) ([]Log, error) {
	all, err := s.all()
	if err != nil {
		return nil, err
	}
	out := slices.DeleteFunc(all, func(l Log) bool { return l.Node != strings.ToLower(nodeUUID) })
	slices.SortFunc(out, func(a, b Log) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return out, nil
}

// Open opens one of a node's logs by name. A name that is not a log of
// that node is not found, whatever the directory holds.
func (s *Store) Open(nodeUUID, name string) (*os.File, Log, error) {
	l, ok := parse(name)
	if !ok || l.Node != strings.ToLower(nodeUUID) {
		return nil, Log{}, os.ErrNotExist
	}
	f, err := os.Open(filepath.Join(s.Dir, name))
	if err != nil {
		return nil, Log{}, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, Log{}, err
	}
	l.Size = info.Size()
	return f, l, nil
}

// Service is the logs as callers may read them: find the node (404),
// authorize RuleGet (403), then read.
type Service struct {
	Store *Store
	Nodes *nodes.Service
}

// List is a node's logs, newest first.
func (s *Service) List(ctx context.Context, ident string) ([]Log, error) {
	n, err := s.Nodes.Authorized(ctx, ident, RuleGet)
	if err != nil {
		return nil, err
	}
	logs, err := s.Store.List(n.UUID)
	if err != nil || len(logs) == 0 {
		return logs, err
	}
	// The store keeps bytes only; which run failed is in the event that
	// recorded the log, read in one query for all of them.
	evs, err := n.QueryEvents().Where(nodeevent.EventContains(keptSuffix)).
		Select(nodeevent.FieldEventType, nodeevent.FieldEvent).All(ctx)
	if err != nil {
		return nil, err
	}
	ops := make(map[string]string, len(evs))
	for _, e := range evs {
		// Logs kept before the event carried the run's kind were
		// recorded as type "agent", which names no run.
		if i := strings.LastIndex(e.Event, keptSuffix); i >= 0 && e.EventType != "agent" {
			ops[e.Event[i+len(keptSuffix):]] = e.EventType
		}
	}
	for i := range logs {
		logs[i].Operation = ops[logs[i].Name]
	}
	return logs, nil
}

// Open opens one log of a node for reading; the caller closes it.
func (s *Service) Open(ctx context.Context, ident, name string) (*os.File, Log, error) {
	n, err := s.Nodes.Authorized(ctx, ident, RuleGet)
	if err != nil {
		return nil, Log{}, err
	}
	f, l, err := s.Store.Open(n.UUID, name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, Log{}, errs.NotFound("That agent log of node %s could not be found.", n.UUID)
	}
	return f, l, err
}
