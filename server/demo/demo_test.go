package demo_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent/runbook"
	"github.com/anvilproject/anvil/ent/runbookstep"
	"github.com/anvilproject/anvil/server/demo"
	"github.com/anvilproject/anvil/server/fwimages"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestSeed: the demo stores its image and its firmware runbook names the
// URL the image is served at; a second start enrols nothing but keeps
// the image there.
func TestSeed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, _ string, db *store.DB) {
		ctx := context.Background()
		images := &fwimages.Store{Dir: t.TempDir(), BaseURL: "http://anvil.test:6385", MaxBytes: 1 << 20}
		n, err := demo.Seed(ctx, db, images, 6)
		if err != nil || n != 6 {
			t.Fatalf("Seed: %d, %v", n, err)
		}
		step, err := db.RunbookStep.Query().Where(runbookstep.HasRunbookWith(runbook.Name(demo.FirmwareRunbook)), runbookstep.Interface("firmware")).Only(ctx)
		if err != nil {
			t.Fatal(err)
		}
		url := step.Args["settings"].([]any)[0].(map[string]any)["url"].(string)
		sum := strings.TrimSuffix(strings.TrimPrefix(url, images.BaseURL+fwimages.RoutePrefix), "/"+demo.ImageName)
		if images.URL(sum, demo.ImageName) != url {
			t.Fatalf("the runbook names %s, not an image URL of %s", url, images.BaseURL)
		}
		if b, err := os.ReadFile(filepath.Join(images.Dir, sum, demo.ImageName)); err != nil || !bytes.Equal(b, demo.Image()) {
			t.Fatalf("the runbook names %s, whose file is missing or different: %v", url, err)
		}
		for _, name := range []string{demo.FirmwareRunbook, demo.BIOSRunbook} {
			if ok, _ := db.Runbook.Query().Where(runbook.Name(name), runbook.Public(true)).Exist(ctx); !ok {
				t.Errorf("no public runbook %s", name)
			}
		}
		if err := os.RemoveAll(images.Dir); err != nil {
			t.Fatal(err)
		}
		if n, err := demo.Seed(ctx, db, images, 6); err != nil || n != 0 {
			t.Fatalf("second Seed: %d, %v", n, err)
		}
		if _, err := os.Stat(filepath.Join(images.Dir, sum, demo.ImageName)); err != nil {
			t.Errorf("image not stored again at start: %v", err)
		}
	})
}
