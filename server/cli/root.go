// Package cli is the anvil command: serve, migrate, node import, and the
// operator subcommands. Every subcommand takes --database like serve, and
// reads ANVIL_* variables and the --config file for flags not given.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/anvilproject/anvil/server/config"
	"github.com/anvilproject/anvil/server/store"
)

// Execute runs the anvil command with the process's arguments.
func Execute() int {
	root := NewRoot(os.Stdout, os.Stderr)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "anvil:", err)
		return 1
	}
	return 0
}

// NewRoot builds the command tree writing to out and errOut; tests drive it
// directly.
func NewRoot(out, errOut io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "anvil",
		Short:         "Bare-metal self-service: an Ironic-compatible API, a conductor and a portal in one binary",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	root.AddCommand(serveCmd(), migrateCmd(), nodeCmd(), userCmd(), tokenCmd(), policyCmd(), dbCmd(), firmwareCmd(), versionCmd(), campaignCmd())
	return root
}

// globals are the flags every subcommand shares.
type globals struct {
	database  string
	config    string
	logLevel  string
	logFormat string
}

func addGlobals(cmd *cobra.Command, g *globals) {
	f := cmd.Flags()
	f.StringVar(&g.database, "database", "anvil.db", "database: a SQLite file path, sqlite://PATH or postgres://…")
	f.StringVar(&g.config, "config", os.Getenv("ANVIL_CONFIG"), "YAML config file; keys are serve's flag names with underscores (default "+config.DefaultFile+" when it exists)")
	f.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	prev := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		g.config = config.File(g.config, defaultConfig)
		// Every command reads serve's file: settings it has no flag for
		// (listen, BMC timeouts) are serve's, not typos.
		var shared *pflag.FlagSet
		if c.Name() != "serve" {
			shared = serveCmd().Flags()
		}
		if err := config.ApplyShared(c.Flags(), g.config, shared); err != nil {
			return err
		}
		if prev != nil {
			return prev(c, args)
		}
		return nil
	}
}

func (g *globals) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(g.logFormat) {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", g.logFormat)
}

// defaultConfig is config.DefaultFile; tests point it elsewhere.
var defaultConfig = config.DefaultFile

// open opens and upgrades the database for an operator subcommand. It
// never creates one: an operator command aimed at the wrong place (no
// --database, the config file not found) would otherwise put its user or
// token into a new, empty database nobody serves, and say it succeeded.
func (g *globals) open(ctx context.Context) (*store.DB, error) {
	db, err := store.OpenExisting(ctx, g.database)
	if err != nil {
		return nil, g.missing(err)
	}
	if ok, err := db.HasSchema(ctx); err != nil || !ok {
		db.Close()
		if err == nil {
			err = errors.New("it has no Anvil tables")
		}
		return nil, g.missing(err)
	}
	if err := db.Migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// missing says where an operator command looked for its database and how
// to create one.
func (g *globals) missing(err error) error {
	where := store.Redacted(g.database)
	if f, ok := store.SQLiteFile(g.database); ok {
		if abs, aerr := filepath.Abs(f); aerr == nil {
			where = abs
		}
	}
	from := "no config file (" + defaultConfig + " does not exist)"
	if g.config != "" {
		from = "config file " + g.config
	}
	return fmt.Errorf("no Anvil database at %s (%v); looked there by --database, ANVIL_DATABASE and %s. Point one of them at serve's database, or create a new one with anvil db init", where, err, from)
}

// migrateCmd is db upgrade under the name the README and scripts
// used before versioned migrations.
func migrateCmd() *cobra.Command {
	cmd := dbUpgradeCmd()
	cmd.Use = "migrate"
	cmd.Short = "The same as anvil db upgrade"
	return cmd
}
