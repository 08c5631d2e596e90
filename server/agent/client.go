// Package agent drives a booted ironic-python-agent (IPA) over its REST
// API, as Ironic's conductor does: commands go to the callback URL the
// agent announced in its heartbeat, each with the node's agent token, and
// asynchronous ones are followed through the agent's command list.
package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// Defaults, as Ironic's [agent] command_timeout and a cap on what an
// agent may make the conductor read.
const (
	DefaultTimeout = 60 * time.Second
	// MaxResponse caps one answer. The command list carries every
	// result the agent kept, including a system-log tarball (a few MB),
	// so the cap is generous; an agent that sends more is refused rather
	// than allowed to fill the conductor's memory.
	MaxResponse = 64 << 20
)

// ErrNetwork: the callback URL points outside the networks agents may
// live on. The URL comes from an unauthenticated heartbeat (guarded by
// the token only), so without a limit it could aim the conductor at any
// internal service.
var ErrNetwork = errors.New("the agent address is outside the allowed agent networks")

// Options tune a Client; the zero value is usable.
type Options struct {
	// Timeout bounds each request (connect, TLS, answer); commands sent
	// with wait=true block in the agent for as long as they run, so
	// callers that wait pass a larger one. Default DefaultTimeout.
	Timeout time.Duration
	// Networks, when not empty, are the provisioning networks agents
	// boot on; the client dials only addresses inside them. This is not
	// the BMC allow-list: BMCs and ramdisks live on different networks,
	// and a BMC network is exactly where an agent should not point us.
	Networks []netip.Prefix
}

// Client talks to the agent of one node.
type Client struct {
	node  string // the node's UUID, named in every error
	base  *url.URL
	token string
	http  *http.Client
}

// New returns a client for the agent at callbackURL (as the heartbeat
// announced it) of node. token is the node's agent token, sent on every
// call as Ironic does. verifyCA is the agent's agent_verify_ca PEM: when
// given, the agent must present exactly that certificate, for its
// address; without it an https agent is verified against the system
// roots. Verification is never skipped.
func New(node, callbackURL, token string, verifyCA []byte, opts Options) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(callbackURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("node %s: agent callback URL is not an http(s) URL without credentials", node)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("node %s: agent callback URL has a query or fragment", node)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(verifyCA) > 0 {
		if err := pin(tlsConf, verifyCA); err != nil {
			return nil, fmt.Errorf("node %s: agent_verify_ca: %w", node, err)
		}
	}
	nets := append([]netip.Prefix(nil), opts.Networks...)
	tr := &http.Transport{
		// No proxy from the environment: the token travels in the URL
		// and agents are on a network the conductor reaches directly.
		Proxy:               nil,
		DialContext:         dialer(nets),
		TLSClientConfig:     tlsConf,
		TLSHandshakeTimeout: opts.Timeout,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
	}
	return &Client{
		node:  node,
		base:  u,
		token: token,
		http: &http.Client{
			Transport: tr,
			Timeout:   opts.Timeout,
			// A redirect would carry the conversation, and the conductor,
			// to an address the agent chose after the fact.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// pin makes conf accept only the certificate in pemData (the agent's
// self-signed one), still checking that it names the address dialled.
func pin(conf *tls.Config, pemData []byte) error {
	block, _ := pem.Decode(pemData)
	if block == nil || block.Type != "CERTIFICATE" {
		return errors.New("not a PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("not a certificate: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	conf.RootCAs = pool
	// The pool alone would also accept a certificate the pinned one
	// signed, were it a CA; the agent's is its own leaf.
	conf.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, cert.Raw) {
			return errors.New("the agent presented a certificate other than its agent_verify_ca")
		}
		return nil
	}
	return nil
}

// dialer dials only addresses inside nets (any when empty), and dials
// the address it checked so a DNS answer cannot change in between.
func dialer(nets []netip.Prefix) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	if len(nets) == 0 {
		return d.DialContext
	}
	inside := func(a netip.Addr) bool {
		a = a.Unmap()
		for _, p := range nets {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		var addrs []netip.Addr
		if a, err := netip.ParseAddr(host); err == nil {
			addrs = []netip.Addr{a}
		} else if addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
			return nil, err
		}
		for _, a := range addrs {
			if !inside(a) {
				return nil, fmt.Errorf("%s: %w", a, ErrNetwork)
			}
		}
		var last error
		for _, a := range addrs {
			c, err := d.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
			if err == nil {
				return c, nil
			}
			last = err
		}
		return nil, last
	}
}

// Node is the node's UUID, as errors name it.
func (c *Client) Node() string { return c.node }

// commandsURL is {callback_url}/v1/commands/ with the token and, for a
// command, wait.
func (c *Client) commandsURL(wait *bool) string {
	u := *c.base
	u.Path = strings.TrimRight(u.Path, "/") + "/v1/commands/"
	q := url.Values{}
	if wait != nil {
		q.Set("wait", fmt.Sprint(*wait))
	}
	if c.token != "" {
		q.Set("agent_token", c.token)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// do sends one request and decodes the JSON answer into out. Errors
// name the node and what was being done, and never the URL (it holds
// the token) nor more than a masked excerpt of what the agent said.
func (c *Client) do(ctx context.Context, what, method, target string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("node %s: %s: encoding the request: %v", c.node, what, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return fmt.Errorf("node %s: %s: %v", c.node, what, c.clean(err.Error()))
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// url.Error quotes the URL, token included: keep only its cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return &ConnectionError{Node: c.node, What: what, detail: c.clean(err.Error()), err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponse+1))
	if err != nil {
		return &ConnectionError{Node: c.node, What: what, detail: c.clean(err.Error()), err: err}
	}
	if len(data) > MaxResponse {
		return fmt.Errorf("node %s: %s: the agent's answer exceeds %d bytes", c.node, what, MaxResponse)
	}
	if resp.StatusCode >= 400 {
		// The agent's API errors are {"faultcode", "faultstring"}.
		var fault struct {
			Faultstring string `json:"faultstring"`
		}
		msg := ""
		if json.Unmarshal(data, &fault) == nil && fault.Faultstring != "" {
			msg = fault.Faultstring
		} else {
			msg = string(data)
		}
		return &APIError{Node: c.node, What: what, Status: resp.StatusCode, Message: c.clean(msg)}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("node %s: %s: the agent's answer (HTTP %d) is not the expected JSON", c.node, what, resp.StatusCode)
	}
	return nil
}
