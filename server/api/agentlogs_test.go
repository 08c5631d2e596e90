package api_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestAgentLogsForSystemReaders: a deploy the real agent fails (an image
// checksum that does not match) leaves the agent's logs with no flag
// given, beside the SQLite database by default; the node's history
// names the log, a system reader lists it (as left by a deploy) and reads it (a gzipped tarball
// of the agent's journal), and the node's own projects get 403, another
// project 404.
func TestAgentLogsForSystemReaders(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		rg := newRig(t, setting, conductor.AgentConfig{HeartbeatTimeout: 30 * time.Second}, 1)
		admin, reader := rg.cs["system-admin"], rg.cs["system-reader"]
		if f, ok := store.SQLiteFile(setting); ok && rg.logs != filepath.Join(filepath.Dir(f), "agent-logs") {
			t.Errorf("agent logs default to %s, want agent-logs beside %s", rg.logs, f)
		}
		id, _ := rg.node(t, 0, "logs-1", true, nil)
		path := "/v1/nodes/" + id + "/agent_logs"
		if l := reader.Do(t, "GET", path, nil); l.Status != 200 || len(l.JSON(t)["agent_logs"].([]any)) != 0 {
			t.Fatalf("agent logs before any failure: %d %s", l.Status, l.Body)
		}
		setState(t, rg.srv, id, "available")
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/instance_info", "value": map[string]any{
			"image_source": rg.im.URL + rg.im.Raw, "image_os_hash_algo": "sha256", "image_os_hash_value": strings.Repeat("ab", 32)}}}), 200)
		provision(t, admin, id, map[string]any{"target": "active"}, 202)
		waitAny(t, admin, id, "deploy failed")

		r := reader.Do(t, "GET", path, nil)
		mustStatus(t, r, 200)
		logs := r.JSON(t)["agent_logs"].([]any)
		if len(logs) != 1 {
			t.Fatalf("agent logs after a failed deploy: %s", r.Body)
		}
		l := logs[0].(map[string]any)
		name, _ := l["name"].(string)
		if !strings.HasPrefix(name, id+"_") || !strings.HasSuffix(name, ".tar.gz") || l["size"].(float64) <= 0 || l["operation"] != "deploy" {
			t.Errorf("agent log entry %v", l)
		}
		if events := eventsOf(t, admin, id); !strings.Contains(events, "agent log "+name) {
			t.Errorf("the node's history does not name agent log %s:\n%s", name, events)
		}
		got := reader.Do(t, "GET", path+"/"+name, nil)
		mustStatus(t, got, 200)
		if ct := got.Header.Get("Content-Type"); ct != "application/gzip" {
			t.Errorf("Content-Type %q", ct)
		}
		zr, err := gzip.NewReader(bytes.NewReader(got.Body))
		if err != nil {
			t.Fatalf("the log is not gzipped: %v", err)
		}
		tr := tar.NewReader(zr)
		var files []string
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("the log is not a tarball: %v", err)
			}
			files = append(files, h.Name)
		}
		if !strings.Contains(strings.Join(files, " "), "journal") {
			t.Errorf("the agent's log tarball has no journal: %v", files)
		}

		for who, want := range map[string]int{"owner-admin": 403, "owner-reader": 403, "lessee-reader": 403, "other-admin": 404, "anonymous": 401} {
			for _, p := range []string{path, path + "/" + name} {
				if s := rg.cs[who].Do(t, "GET", p, nil).Status; s != want {
					t.Errorf("%s GET %s: %d, want %d", who, p, s, want)
				}
			}
		}
		// Only a log of this node, by its exact name.
		for _, bad := range []string{"x.tar.gz", "..%2F..%2Fanvil.db", strings.Replace(name, id, "00000000-0000-0000-0000-000000000000", 1)} {
			if s := reader.Do(t, "GET", path+"/"+bad, nil).Status; s != 404 {
				t.Errorf("GET %s: %d, want 404", bad, s)
			}
		}
		if s := reader.Do(t, "GET", fmt.Sprintf("/v1/nodes/%s/agent_logs", "no-such-node"), nil).Status; s != 404 {
			t.Errorf("agent logs of a node that does not exist: %d", s)
		}
	})
}
