package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/notice"
	"github.com/anvilproject/anvil/server/inbox"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// portalServer serves the fixture's database with the power sync off: its
// sweep over 10,000 nodes every minute would otherwise land in the CPU
// time measured per page.
func portalServer(b *testing.B, f *fixture) *server {
	port := freePort(b)
	cmd := exec.Command(binary(b), "serve", "--listen", "127.0.0.1:"+port, "--database", f.setting, "--log-level", "warn", "--power-sync", "0")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	s := &server{url: "http://127.0.0.1:" + port, cmd: cmd}
	waitReady(b, s.url)
	return s
}

// portalClient signs a system admin in to the portal at srv and returns a
// browser-like client with its cookie.
func portalClient(b *testing.B, f *fixture, srv *server) *http.Client {
	return portalClientAs(b, f, srv, "bench-portal", "--system", "--role", "admin")
}

// portalClientAs signs user in, granted the role in scope (user grant's
// flags) first.
func portalClientAs(b *testing.B, f *fixture, srv *server, user string, scope ...string) *http.Client {
	bin := binary(b)
	create := exec.Command(bin, "user", "create", user, "--password-stdin", "--database", f.setting)
	create.Stdin = strings.NewReader(user + "-password-1\n")
	if out, err := create.CombinedOutput(); err != nil && !strings.Contains(string(out), "exists") {
		b.Fatalf("user create: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, append(append([]string{"user", "grant", user}, scope...), "--database", f.setting)...).CombinedOutput(); err != nil && !strings.Contains(string(out), "exists") {
		b.Fatalf("user grant: %v\n%s", err, out)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	resp, err := c.Get(srv.url + "/login")
	if err != nil {
		b.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := csrfField.FindStringSubmatch(string(body))
	if m == nil {
		b.Fatal("no CSRF token on the login page")
	}
	resp, err = c.PostForm(srv.url+"/login", url.Values{"csrf": {m[1]}, "username": {user}, "password": {user + "-password-1"}})
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.Request.URL.Path != "/nodes" {
		b.Fatalf("sign-in ended at %s", resp.Request.URL)
	}
	return c
}

// measurePage loads a portal page b.N times and reports p50 and p95 of
// the whole request: session, three filtered queries (page, total,
// counts by state) and the render.
func measurePage(b *testing.B, srv *server, c *http.Client, u string, rows int) {
	// A page that redirected (to sign in, say) is not the page measured.
	want, err := url.Parse(u)
	if err != nil {
		b.Fatal(err)
	}
	load := func() int {
		resp, err := c.Get(u)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Request.URL.Path != want.Path {
			b.Fatalf("GET %s: %d at %s", u, resp.StatusCode, resp.Request.URL)
		}
		if got := strings.Count(string(body), "<tr data-node="); rows >= 0 && got != rows {
			b.Fatalf("GET %s: %d rows, want %d", u, got, rows)
		}
		return len(body)
	}
	load()
	lat := make([]time.Duration, b.N)
	size := 0
	cpu0 := srv.cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		size = load()
		lat[i] = time.Since(t)
	}
	b.StopTimer()
	// The server's own CPU time per page is the figure a loaded machine
	// disturbs least; the latencies include waiting for a core.
	b.ReportMetric(float64((srv.cpuTime()-cpu0).Microseconds())/1000/float64(b.N), "server-cpu-ms/op")
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95-ms")
	b.ReportMetric(float64(size), "bytes")
}

// BenchmarkPortalNodeList: the portal's node list over 10,000 nodes, a
// 50-row page under each filter and sort the list offers, as a system
// admin (who sees all of them). Issue #16 asks for p50 ≤ 10 ms each.
//
//	go test -run '^$' -bench PortalNodeList -benchtime 200x ./bench/
func BenchmarkPortalNodeList(b *testing.B) {
	for _, backend := range storetest.Backends {
		b.Run(backend, func(b *testing.B) {
			f := setup(b, backend)
			srv := portalServer(b, f)
			c := portalClient(b, f, srv)
			// Every filter and sort column the list offers, and a late page.
			for _, q := range []struct {
				name, query string
				rows        int
			}{
				{"all", "", 50},
				{"search", "q=bench-01", 50},
				{"search-uuid", "q=" + f.showID[:8], 1},
				// Two letters make no trigram, so PostgreSQL reads every
				// node; every node matches.
				{"search-short", "q=H-", 50},
				// A pattern every name contains, which the trigram index
				// could answer only by reading every node.
				{"search-broad", "q=BENCH", 50},
				{"state", "state=enroll", 50},
				// The conductor's power sync fills power_state meanwhile.
				{"power", "power=unknown", -1},
				{"state-power", "state=enroll&power=unknown", -1},
				{"owner", "owner=p123", 20},
				{"lessee", "lessee=big-tenant", 50},
				{"trait", "trait=CUSTOM_RACK_3", 50},
				{"class", "class=baremetal", 50},
				{"maintenance", "maint=no", 50},
				{"failed", "failed=1", 0},
				{"sort-name-desc", "sort=name&dir=desc", 50},
				{"sort-state", "sort=provision_state", 50},
				{"sort-power", "sort=power_state", 50},
				{"sort-owner", "sort=owner", 50},
				{"sort-lessee-desc", "sort=lessee&dir=desc", 50},
				{"sort-class", "sort=resource_class", 50},
				{"sort-created-desc", "sort=created_at&dir=desc", 50},
				{"class-sorted-desc", "class=baremetal&sort=owner&dir=desc", 50},
				{"page-100", "page=100", 50},
				{"lessee-size-200", "lessee=big-tenant&size=200", 200},
			} {
				b.Run(q.name, func(b *testing.B) {
					measurePage(b, srv, c, fmt.Sprintf("%s/nodes?%s", srv.url, q.query), q.rows)
				})
			}
		})
	}
}

// BenchmarkPortalNodeListPicks: the node list with its pick-lists'
// counts (six GROUP BY queries and the state strip's), group-by and page
// jumps, over 10,000 nodes in 500 projects, for a system reader (every
// node) and a member of big-tenant (the 1,000 nodes it leases). Issue #28
// asks for p95 ≤ 50 ms.
//
//	go test -run '^$' -bench PortalNodeListPicks -benchtime 100x ./bench/
func BenchmarkPortalNodeListPicks(b *testing.B) {
	for _, backend := range storetest.Backends {
		b.Run(backend, func(b *testing.B) {
			f := setup(b, backend)
			srv := portalServer(b, f)
			for _, who := range []struct {
				name  string
				scope []string
				pages []struct{ name, query string }
			}{
				{"reader", []string{"--system", "--role", "reader"}, []struct{ name, query string }{
					{"all", ""},
					{"filters", "class=baremetal&trait=CUSTOM_RACK_3&power=unknown&maint=no"},
					{"owner-lessee", "owner=p123&lessee=p130"},
					{"group-owner", "group=owner"},
					{"group-state-filtered", "group=state&trait=CUSTOM_RACK_3&lessee=big-tenant"},
					{"group-class-page-40", "group=class&page=40&size=100"},
					{"search-group-lessee", "q=bench-01&group=lessee"},
				}},
				{"member", []string{"--project", "big-tenant", "--role", "member"}, []struct{ name, query string }{
					{"all", ""},
					{"filters", "trait=CUSTOM_RACK_3&power=unknown&class=baremetal"},
					{"group-owner", "group=owner"},
					{"group-state-page-10", "group=state&lessee=big-tenant&page=10"},
				}},
			} {
				c := portalClientAs(b, f, srv, "bench-"+who.name, who.scope...)
				for _, q := range who.pages {
					b.Run(who.name+"-"+q.name, func(b *testing.B) {
						measurePage(b, srv, c, fmt.Sprintf("%s/nodes?%s", srv.url, q.query), -1)
					})
				}
			}
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func (s *server) cpuTime() time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// BenchmarkPortalNodePage: one node's page (status, power, recovery, the
// runbooks for it, hardware, history and the operator section) in the
// 10,000-node fixture, for a system admin and for a member of the project
// that leases the node. Issue #28 asks for p95 ≤ 50 ms.
//
//	go test -run '^$' -bench PortalNodePage -benchtime 100x ./bench/
func BenchmarkPortalNodePage(b *testing.B) {
	for _, backend := range storetest.Backends {
		b.Run(backend, func(b *testing.B) {
			f := setup(b, backend)
			srv := portalServer(b, f)
			var leased struct {
				Nodes []struct{ UUID string } `json:"nodes"`
			}
			get(b, f.srv.url+"/v1/nodes?lessee=big-tenant&limit=1", &leased)
			if len(leased.Nodes) == 0 {
				b.Fatal("the fixture leases no node to big-tenant")
			}
			for _, who := range []struct {
				name  string
				scope []string
			}{
				{"admin", []string{"--system", "--role", "admin"}},
				{"member", []string{"--project", "big-tenant", "--role", "member"}},
			} {
				c := portalClientAs(b, f, srv, "bench-page-"+who.name, who.scope...)
				b.Run(who.name, func(b *testing.B) {
					measurePage(b, srv, c, srv.url+"/nodes/"+leased.Nodes[0].UUID, -1)
				})
			}
		})
	}
}

// BenchmarkPortalInbox: the inbox of a project holding 10,000 notices
// (2,000 unread), and the node list, whose header counts the unread ones
// on every page; as a member of that project.
//
//	go test -run '^$' -bench PortalInbox -benchtime 200x ./bench/
func BenchmarkPortalInbox(b *testing.B) {
	for _, backend := range storetest.Backends {
		b.Run(backend, func(b *testing.B) {
			f := setup(b, backend)
			ctx := context.Background()
			db, err := store.Open(ctx, f.setting)
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			if n, err := db.Notice.Query().Where(notice.Project("big-tenant")).Count(ctx); err != nil {
				b.Fatal(err)
			} else if n == 0 {
				read := time.Now()
				for batch := 0; batch < 10; batch++ {
					cs := make([]*ent.NoticeCreate, 1000)
					for i := range cs {
						k := batch*1000 + i
						cs[i] = db.Notice.Create().SetUUID(uuid.NewString()).SetProject("big-tenant").SetKind(inbox.LeaseStarted).
							SetKey(fmt.Sprintf("bench:%d", k)).SetSubject(fmt.Sprintf("Your lease of node bench-%05d has started", k)).
							SetBody("Project big-tenant holds the node until next week.")
						if k%5 != 0 {
							cs[i].SetReadAt(read)
						}
					}
					if err := db.Notice.CreateBulk(cs...).Exec(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
			srv := portalServer(b, f)
			c := portalClientAs(b, f, srv, "bench-inbox", "--project", "big-tenant", "--role", "member")
			b.Run("inbox", func(b *testing.B) { measurePage(b, srv, c, srv.url+"/inbox", -1) })
			b.Run("nodes", func(b *testing.B) { measurePage(b, srv, c, srv.url+"/nodes", -1) })
		})
	}
}
