package web_test

import (
	"context"
	"encoding/csv"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

var eventRow = regexp.MustCompile(`<tr data-event="(\d+)"`)

// TestAuditPage: a system reader reads the audit log newest first, 50 a
// page, filtered by user, project, node (by name, found by its UUID),
// rule, result and time range, every filter kept in the paging and
// export links; a bad result or time is a 400 naming the field; a
// project member may not see it and has no nav link to it.
func TestAuditPage(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _, ids := fleet(t, setting)
		ctx := context.Background()
		readerAndProjectAdmin(t, srv)
		day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
		// 60 events by "ann" of project blue on six days, ten a day, of
		// which every third was denied.
		for i := range 60 {
			res := "allowed"
			if i%3 == 0 {
				res = "denied"
			}
			if err := srv.DB.AuditEvent.Create().SetCreatedAt(day.Add(time.Duration(i/10)*24*time.Hour + time.Duration(i)*time.Minute)).
				SetUser("ann").SetProject("blue").SetRule("test:thing").SetTargetType("thing").SetTargetID(fmt.Sprint("t-", i)).
				SetResult(res).SetStatus(200).Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
		rhea := signInAs(t, srv, "rhea")
		st, page, _ := rhea.do("GET", "/audit?user=ann&rule=test:thing", nil)
		rows := eventRow.FindAllStringSubmatch(page, -1)
		if st != 200 || len(rows) != 50 || !strings.Contains(page, `href="/audit"`) {
			t.Fatalf("first page: %d, %d rows\n%s", st, len(rows), page)
		}
		newest, err := srv.DB.AuditEvent.Query().Where(auditevent.User("ann")).Order(auditevent.ByID()).All(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rows[0][1] != fmt.Sprint(newest[59].ID) || rows[49][1] != fmt.Sprint(newest[10].ID) {
			t.Errorf("not newest first: %s … %s", rows[0][1], rows[49][1])
		}
		older := regexp.MustCompile(`href="(/audit\?[^"]*marker=[^"]*)" rel="next"`).FindStringSubmatch(page)
		if older == nil {
			t.Fatalf("no link to older events")
		}
		_, page, _ = rhea.do("GET", strings.ReplaceAll(older[1], "&amp;", "&"), nil)
		if rows := eventRow.FindAllStringSubmatch(page, -1); len(rows) != 10 || strings.Contains(page, `rel="next"`) || !strings.Contains(page, "Newest events") {
			t.Errorf("second page: %d rows\n%s", len(rows), page)
		}
		// Day three (20..29) and denied only: 21, 24, 27.
		q := url.Values{"user": {"ann"}, "result": {"denied"}, "since": {"2026-03-03T00:00"}, "until": {"2026-03-04"}}
		_, page, _ = rhea.do("GET", "/audit?"+q.Encode(), nil)
		var got []string
		for _, r := range eventRow.FindAllStringSubmatch(page, -1) {
			got = append(got, r[1])
		}
		want := []string{fmt.Sprint(newest[27].ID), fmt.Sprint(newest[24].ID), fmt.Sprint(newest[21].ID)}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("time range and result: %v, want %v", got, want)
		}
		if !strings.Contains(page, `value="2026-03-03T00:00"`) || !strings.Contains(page, "/audit/export.csv?") || !strings.Contains(page, "result=denied") {
			t.Errorf("the filters are not kept in the form and the export link")
		}
		// A node by name: its creation by root's token, and nothing else.
		_, page, _ = rhea.do("GET", "/audit?node=f-03", nil)
		if rows := eventRow.FindAllStringSubmatch(page, -1); len(rows) == 0 || !strings.Contains(page, ids["f-03"]) || strings.Contains(page, ids["f-04"]) ||
			!strings.Contains(page, "baremetal:node:create") {
			t.Errorf("node by name: %d rows\n%s", len(rows), page)
		}
		_, page, _ = rhea.do("GET", "/audit?project=nobody", nil)
		if !strings.Contains(page, `data-testid="no-events"`) {
			t.Errorf("an unknown project lists events")
		}
		for q, field := range map[string]string{"result=maybe": "result:", "since=yesterday": "since:", "since=2026-03-04&until=2026-03-03": "until:", "marker=x": "marker:"} {
			if st, page, _ := rhea.do("GET", "/audit?"+q, nil); st != 400 || !strings.Contains(page, field) {
				t.Errorf("%s: %d, want 400 naming %s", q, st, field)
			}
		}
		pat := signInAs(t, srv, "pat")
		if st, _, _ := pat.do("GET", "/audit", nil); st != 403 {
			t.Errorf("a project member reads the audit log: %d", st)
		}
		if _, page, _ := pat.do("GET", "/nodes", nil); strings.Contains(page, `href="/audit"`) {
			t.Errorf("a project member has a nav link to the audit log")
		}
		if st, _, _ := pat.do("GET", "/audit/export.csv", nil); st != 403 {
			t.Errorf("a project member exports the audit log: %d", st)
		}
	})
}

// TestAuditExport: the CSV export is an attachment holding every event
// the filters select across pages, as GET /v1/events gives them field for
// field, and a cell a spreadsheet would run as a formula is defused.
func TestAuditExport(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, api, _ := fleet(t, setting)
		ctx := context.Background()
		readerAndProjectAdmin(t, srv)
		for i := range 1205 {
			if err := srv.DB.AuditEvent.Create().SetUser("=cmd|' /C calc'!A0").SetRule("test:export").SetTargetID(fmt.Sprint("t-", i)).
				SetResult("failed").SetStatus(409).SetDetail(map[string]any{"n": i}).Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
		rhea := signInAs(t, srv, "rhea")
		req, _ := http.NewRequest("GET", srv.URL+"/audit/export.csv?rule=test:export", nil)
		resp, err := rhea.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/csv") ||
			!strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment; filename=") {
			t.Fatalf("export: %d %v", resp.StatusCode, resp.Header)
		}
		recs, err := csv.NewReader(resp.Body).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1206 || recs[0][0] != "id" || recs[0][13] != "detail" {
			t.Fatalf("want a header and 1205 rows, got %d: %v", len(recs), recs[0])
		}
		r := api.Do(t, "GET", "/v1/events?rule=test:export&limit=1", nil)
		if r.Status != 200 {
			t.Fatalf("events: %d", r.Status)
		}
		ev := r.JSON(t)["events"].([]any)[0].(map[string]any)
		row := recs[1]
		for i, col := range []string{"id", "created_at", "user", "rule", "target_id", "result", "status"} {
			want := fmt.Sprint(ev[col])
			if col == "user" {
				want = "'" + want
			}
			got := row[map[string]int{"id": 0, "created_at": 1, "user": 3, "rule": 6, "target_id": 10, "result": 11, "status": 12}[col]]
			if got != want {
				t.Errorf("column %d %s: %q, the API says %q", i, col, got, want)
			}
		}
		if row[13] != `{"n":1204}` || recs[1205][10] != "t-0" {
			t.Errorf("detail and order: %q, last %q", row[13], recs[1205][10])
		}
	})
}

// auditRowText is each event row's text as a person reads it, tags
// dropped and spaces collapsed, by event id; outside is the same without
// what the rows hide behind their Details.
func auditRowText(page string) (rows map[string]string, outside map[string]string) {
	rows, outside = map[string]string{}, map[string]string{}
	tags, space := regexp.MustCompile(`<[^>]+>`), regexp.MustCompile(`\s+`)
	hidden := regexp.MustCompile(`(?s)<details.*?</details>`)
	text := func(s string) string {
		return strings.TrimSpace(space.ReplaceAllString(tags.ReplaceAllString(s, " "), " "))
	}
	for _, m := range regexp.MustCompile(`(?s)<tr data-event="(\d+)"[^>]*>(.*?)</details>\s*</td>\s*</tr>`).FindAllStringSubmatch(page, -1) {
		rows[m[1]] = text(m[2])
		outside[m[1]] = text(hidden.ReplaceAllString(m[2]+"</details>", ""))
	}
	return rows, outside
}

// TestAuditSentences: each event reads as a sentence naming the user and
// the node by name (the node's UUID when it has none or is gone, an SSO
// user by display name), with the result in words and the change as
// before and after; the rule id, the stored user and the raw JSON are
// behind Details only; and a reader finds events by a node's name, a
// user's display name, part of a rule's name and a time range.
func TestAuditSentences(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, api, ids := fleet(t, setting)
		ctx := context.Background()
		readerAndProjectAdmin(t, srv)
		if r := api.Do(t, "PATCH", "/v1/nodes/"+ids["f-05"], []map[string]any{{"op": "replace", "path": "/name", "value": "rack1-n07"}}); r.Status != 200 {
			t.Fatalf("rename: %d %s", r.Status, r.Body)
		}
		was := api.Do(t, "GET", "/v1/nodes/"+ids["f-05"], nil).JSON(t)["power_state"]
		if r := api.Do(t, "PUT", "/v1/nodes/"+ids["f-05"]+"/states/power", map[string]any{"target": "power off"}); r.Status != 202 {
			t.Fatalf("power off: %d %s", r.Status, r.Body)
		}
		// What the API cannot make here: an SSO user's power-on last
		// week, a denial three times over and a failure, and an event on
		// a node since deleted.
		week := time.Now().UTC().Add(-6 * 24 * time.Hour)
		gone := "00000000-0000-4000-8000-000000000099"
		for _, e := range []struct {
			user, rule, target, result string
			status                     int
			at                         time.Time
			detail                     map[string]any
		}{
			{"sso:a1b2@https://idp.example (Ada Lovelace)", "baremetal:node:set_power_state", ids["f-02"], "allowed", 200, week,
				map[string]any{"target": "power on", "was": "power off"}},
			{"pat", "baremetal:node:delete", "", "denied", 403, time.Now(), map[string]any{"count": 3, "targets": []string{ids["f-03"], gone}}},
			{"root", "baremetal:node:set_power_state", ids["f-04"], "failed", 409, time.Now(),
				map[string]any{"target": "rebooting", "was": "power on", "error": "Node f-04 is locked by host c1"}},
			{"root", "baremetal:node:set_maintenance", gone, "allowed", 200, time.Now(), map[string]any{"maintenance": true, "reason": "fan"}},
		} {
			if err := srv.DB.AuditEvent.Create().SetCreatedAt(e.at).SetUser(e.user).SetScope("system").SetRule(e.rule).SetTargetType("node").
				SetTargetID(e.target).SetResult(e.result).SetStatus(e.status).SetDetail(e.detail).Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
		rhea := signInAs(t, srv, "rhea")
		st, page, _ := rhea.do("GET", "/audit", nil)
		if st != 200 {
			t.Fatalf("audit: %d", st)
		}
		rows, outside := auditRowText(page)
		want := []string{
			"root changed node rack1-n07 Field Before After name f-05 rack1-n07 Allowed",
			"root powered off node rack1-n07 Field Before After power state " + value(was) + " power off Allowed",
			"Ada Lovelace powered on node f-02 Field Before After power state power off power on Allowed",
			"pat was refused permission to delete nodes f-03, " + gone + " (not enrolled now) Denied by policy, 3 times",
			"root tried to reboot node f-04, which failed asked for: power state = rebooting Failed (409): Node f-04 is locked by host c1",
			"root put into maintenance node " + gone + " (not enrolled now) asked for: maintenance = true asked for: reason = fan Allowed",
		}
		for _, w := range want {
			found := false
			for _, r := range outside {
				found = found || strings.Contains(r, w)
			}
			if !found {
				t.Errorf("no row reads %q; rows:\n%s", w, strings.Join(slices.Collect(maps.Values(outside)), "\n"))
			}
		}
		// The before/after cells are a table's: field, before, after.
		if !strings.Contains(page, `<tr><th scope="row">name</th><td>f-05</td><td>rack1-n07</td></tr>`) {
			t.Errorf("no before/after row for the rename")
		}
		for id, r := range outside {
			for _, hidden := range []string{"baremetal:node:", "anvil:", "sso:a1b2", `"target"`, ids["f-05"]} {
				if strings.Contains(r, hidden) {
					t.Errorf("event %s shows %q outside its Details: %s", id, hidden, r)
				}
			}
			if !strings.Contains(rows[id], "Details") || !strings.Contains(rows[id], "Rule") {
				t.Errorf("event %s has no Details: %s", id, rows[id])
			}
		}
		if !strings.Contains(page, `<code data-testid="audit-rule">baremetal:node:set_power_state</code>`) ||
			!strings.Contains(page, "sso:a1b2@https://idp.example (Ada Lovelace)") {
			t.Errorf("the rule id or stored user is not in Details")
		}
		// A reader's search: the power changes of last week, by the node's
		// and the user's names.
		find := func(q url.Values) []string {
			t.Helper()
			st, page, _ := rhea.do("GET", "/audit?"+q.Encode(), nil)
			if st != 200 {
				t.Fatalf("%v: %d", q, st)
			}
			_, outside := auditRowText(page)
			return slices.Sorted(maps.Values(outside))
		}
		lastWeek := url.Values{"rule": {"Power"}, "since": {time.Now().UTC().Add(-8 * 24 * time.Hour).Format("2006-01-02")},
			"until": {time.Now().UTC().Add(-5 * 24 * time.Hour).Format("2006-01-02")}}
		if got := find(lastWeek); len(got) != 1 || !strings.HasPrefix(got[0], week.Format("2006-01-02")) || !strings.Contains(got[0], "Ada Lovelace powered on node f-02") {
			t.Errorf("last week's power changes: %q", got)
		}
		if got := find(url.Values{"user": {"Ada Lovelace"}}); len(got) != 1 {
			t.Errorf("by SSO display name: %q", got)
		}
		got := find(url.Values{"node": {"rack1-n07"}, "rule": {"power"}})
		if len(got) != 1 || !strings.Contains(got[0], "root powered off node rack1-n07") {
			t.Errorf("by node name and action: %q", got)
		}
	})
}

// value is how the page writes a detail's value, for what the test reads
// back from the API.
func value(v any) string {
	if s, ok := v.(string); ok && s != "" {
		return s
	}
	return "none"
}
