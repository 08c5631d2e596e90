// Command testop runs internal/oidctest's OpenID provider on loopback for
// the browser journeys only.
package main

import (
	"flag"
	"log"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/anvilproject/anvil/internal/oidctest"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18090", "address to serve on (loopback only)")
	redirect := flag.String("redirect", "", "the client's redirect URL")
	groups := flag.String("groups", "", "comma-separated groups claim for the user")
	flag.Parse()
	if !strings.HasPrefix(*listen, "127.0.0.1:") {
		log.Fatal("testop serves on loopback only")
	}
	issuer := "http://" + *listen
	h := oidctest.Handler(issuer, "anvil", "anvil-secret", *redirect, strings.Split(*groups, ","),
		slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	log.Fatal(http.ListenAndServe(*listen, h))
}
