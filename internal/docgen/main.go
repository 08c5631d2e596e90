// Command docgen writes the reference pages under docs/reference from the
// code: serve's flags with their environment variables and config keys,
// the anvil command tree, the policy rules and their defaults, the
// microversion ladder, the schema migration steps and the metrics. Run it from the checkout (go run
// ./internal/docgen, or go tool task docs) after changing any of them;
// TestReferenceCurrent fails until the committed pages match.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/anvilproject/anvil/internal/reference"
)

func main() {
	if err := write(); err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
}

func write() error {
	root := reference.Root()
	if root == "" {
		return fmt.Errorf("run it inside the checkout: no go.mod above the working directory")
	}
	pages, err := generate(root)
	if err != nil {
		return err
	}
	dir := filepath.Join(root, refDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Pages the generator no longer makes would go stale unseen.
	old, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if _, ok := pages[filepath.Base(f)]; !ok {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	for name, b := range pages {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("wrote %d pages to %s\n", len(pages), refDir)
	return nil
}
