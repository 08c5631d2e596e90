package cli

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// redirectToTLS listens on listen for plain HTTP and answers every
// request with a permanent redirect (308, which keeps the method and
// body) to the same host and path on the HTTPS listener at tlsAddr,
// until ctx ends. It is a few lines of net/http rather than a second
// fiber app: it serves nothing else. wrap, when not nil, wraps the
// redirect (ACME's HTTP-01 challenge answers, acmecert).
func redirectToTLS(ctx context.Context, listen, tlsAddr string, log *slog.Logger, wrap func(http.Handler) http.Handler) error {
	_, port, err := net.SplitHostPort(tlsAddr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host // no port given
		}
		if host == "" {
			http.Error(w, "a Host header is required", http.StatusBadRequest)
			return
		}
		target := "https://" + host
		if port != "443" {
			target = "https://" + net.JoinHostPort(host, port)
		}
		http.Redirect(w, r, target+r.URL.RequestURI(), http.StatusPermanentRedirect)
	})
	if wrap != nil {
		h = wrap(h)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: h}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("the HTTP to HTTPS redirect stopped", "listen", listen, "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("redirecting plain HTTP to HTTPS", "listen", "http://"+ln.Addr().String())
	return nil
}
