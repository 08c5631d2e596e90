package cli

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/anvilproject/anvil/server/audit"
	"github.com/anvilproject/anvil/server/config"
	"github.com/anvilproject/anvil/server/fwimages"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/store"
)

// firmwareFlags are the firmware image settings serve and the firmware
// subcommands share, so both find the same images under the same URLs.
type firmwareFlags struct {
	dir, url string
	maxMiB   int64
}

func (f *firmwareFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.dir, "firmware-dir", "", `directory of uploaded firmware images (default: "firmware" beside the SQLite database file, or in the working directory with PostgreSQL)`)
	fs.StringVar(&f.url, "firmware-url", "", "Anvil's base URL as BMCs reach it, which firmware image URLs start with, e.g. https://anvil.example.com (default: http:// and the listen address, https:// with --tls-cert, the host name for a wildcard address; with --acme-domain, https:// and its first name)")
	fs.Int64Var(&f.maxMiB, "firmware-max-mib", fwimages.DefaultMaxBytes>>20, "largest firmware image accepted, in MiB")
}

type firmwareOptions struct {
	dir, url string
	max      int64
}

// options settles the settings for a server listening on listen.
func (f *firmwareFlags) options(database, scheme, listen string) (firmwareOptions, error) {
	o := firmwareOptions{dir: f.dir, url: f.url, max: f.maxMiB << 20}
	if f.maxMiB <= 0 || f.maxMiB > 1<<20 {
		return o, fmt.Errorf("--firmware-max-mib %d: give a size in MiB from 1 to 1048576", f.maxMiB)
	}
	if o.dir == "" {
		o.dir = config.FirmwareDir(database)
	}
	if o.url == "" {
		var err error
		if o.url, err = config.PublicURL(scheme, listen); err != nil {
			return o, fmt.Errorf("--firmware-url: %w", err)
		}
	}
	if u, err := url.Parse(o.url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return o, fmt.Errorf("--firmware-url %q: give an http:// or https:// base URL such as https://anvil.example.com", f.url)
	}
	return o, nil
}

func firmwareCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "firmware", Short: "Firmware images BMCs download for firmware.update steps"}
	cmd.AddCommand(firmwareAddCmd(), firmwareListCmd())
	return cmd
}

// withFirmware opens the database (for the audit log) and runs fn with
// the image store the server with these settings uses.
func withFirmware(cmd *cobra.Command, g *globals, fw *firmwareFlags, listen string, fn func(ctx context.Context, s *fwimages.Store) error) error {
	o, err := fw.options(g.database, "http", listen)
	if err != nil {
		return err
	}
	enf, err := enforcer()
	if err != nil {
		return err
	}
	return withAudit(cmd, g, func(ctx context.Context, _ *store.DB, a *audit.Log) error {
		return fn(ctx, &fwimages.Store{Dir: o.dir, BaseURL: o.url, MaxBytes: o.max, Guard: &guard.Guard{Enforcer: enf, Audit: a}})
	})
}

func firmwareAddCmd() *cobra.Command {
	var (
		g      globals
		fw     firmwareFlags
		listen string
		name   string
	)
	cmd := &cobra.Command{
		Use:   "add FILE",
		Short: "Store a firmware image and print the URL a firmware.update step names",
		Long: `Store FILE under its SHA-256 in --firmware-dir, where the server serves it to
BMCs without credentials at --firmware-url/firmware/SHA256/NAME. Give the
same --database, --firmware-* and --listen settings as serve (or the same
--config file), so the URL printed is the one the server answers.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withFirmware(cmd, &g, &fw, listen, func(ctx context.Context, s *fwimages.Store) error {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				if name == "" {
					name = filepath.Base(args[0])
				}
				img, err := s.Add(ctx, func() (string, io.Reader, error) { return name, f, nil })
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "stored %s (%d bytes, sha256 %s)\n%s\n", img.Name, img.Size, img.SHA256, img.URL)
				return nil
			})
		},
	}
	addGlobals(cmd, &g)
	fw.add(cmd.Flags())
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:6385", "the server's listen address, for the default --firmware-url")
	cmd.Flags().StringVar(&name, "name", "", "the image's name, last in its URL (default: the file's name)")
	return cmd
}

func firmwareListCmd() *cobra.Command {
	var (
		g      globals
		fw     firmwareFlags
		listen string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the stored firmware images with their sizes, hashes and URLs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withFirmware(cmd, &g, &fw, listen, func(ctx context.Context, s *fwimages.Store) error {
				list, err := s.List(ctx)
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAME\tSIZE\tSHA256\tURL")
				for _, img := range list {
					fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", img.Name, img.Size, img.SHA256, img.URL)
				}
				return w.Flush()
			})
		},
	}
	addGlobals(cmd, &g)
	fw.add(cmd.Flags())
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:6385", "the server's listen address, for the default --firmware-url")
	return cmd
}
