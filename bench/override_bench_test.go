package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/policies"
	anvil "github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/override"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// BenchmarkPolicyOverride validates and stores 50 files overriding 200
// rules, then waits until a second PostgreSQL replica enforces them.
func BenchmarkPolicyOverride(b *testing.B) {
	setting := storetest.Setting(&keepAlive{b}, "postgres")
	a := servertest.Start(b, anvil.Options{Database: setting, AuthNone: true, PolicyOverrideEnabled: true, PolicyDir: filepath.Join(b.TempDir(), "a")})
	rep := servertest.Start(b, anvil.Options{Database: setting, AuthNone: true, PolicyOverrideEnabled: true, PolicyDir: filepath.Join(b.TempDir(), "b")})
	var names []string
	for _, r := range policies.Defaults() {
		if len(r.Scopes) > 0 && !strings.HasPrefix(r.Name, "anvil:") {
			names = append(names, r.Name)
		}
	}
	for i := len(names); i < 200; i++ {
		names = append(names, fmt.Sprintf("baremetal:step:execute:custom.step_%03d", i))
	}
	var last string
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		files := override.Files{}
		for i, name := range names[:200] {
			f := fmt.Sprintf("%02d-rules.yaml", i%50)
			check := fmt.Sprintf("rule:system_member or role:x%d", n)
			files[f] = append(files[f], fmt.Sprintf("%q: %q\n", name, check)...)
			last = name
		}
		start := time.Now()
		if _, err := override.Apply(context.Background(), a.DB, a.Audit, files, "bench"); err != nil {
			b.Fatal(err)
		}
		applied := time.Since(start)
		want := fmt.Sprintf("rule:system_member or role:x%d", n)
		for rep.Policy.Effective()[last] != want {
			if time.Since(start) > 10*time.Second {
				b.Fatal("the replica never enforced the override")
			}
			time.Sleep(5 * time.Millisecond)
		}
		b.ReportMetric(float64(applied.Microseconds())/1000, "apply-ms")
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "replica-ms")
	}
}
