package bmctest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"sync"
)

// RPCWebhook is a loopback consumer of bmclib's rpc provider: it checks
// every request's HMAC-SHA256 signature (X-BMCLIB-Signature-256:
// sha256=<hex of HMAC(secret, body)>) as a real consumer must, refuses a
// wrong one with 401, and otherwise keeps a machine's power and boot
// device.
type RPCWebhook struct {
	Secret string
	mu     sync.Mutex
	power  string
	boot   string
	calls  []string // methods accepted, in order, with the power state asked for: "setPowerState soft"
	bad    int      // requests refused for their signature
}

// NewRPCWebhook is a webhook checking signatures made with secret, its
// machine in power state power ("on" or "off").
func NewRPCWebhook(secret, power string) *RPCWebhook {
	return &RPCWebhook{Secret: secret, power: power}
}

func (h *RPCWebhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	mac := hmac.New(sha256.New, []byte(h.Secret))
	mac.Write(body)
	want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	h.mu.Lock()
	defer h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if got := r.Header.Get("X-BMCLIB-Signature-256"); !hmac.Equal([]byte(got), []byte(want)) || r.Header.Get("X-BMCLIB-Timestamp") == "" {
		h.bad++
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":{"code":401,"message":"signature refused"}}`))
		return
	}
	var req struct {
		ID     int64  `json:"id"`
		Host   string `json:"host"`
		Method string `json:"method"`
		Params struct {
			State  string `json:"state"`
			Device string `json:"device"`
		} `json:"params"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":{"code":400,"message":"not json"}}`))
		return
	}
	call := req.Method
	if req.Params.State != "" {
		call += " " + req.Params.State
	}
	h.calls = append(h.calls, call)
	resp := map[string]any{"id": req.ID, "host": req.Host}
	switch req.Method {
	case "getPowerState":
		resp["result"] = h.power
	case "setPowerState":
		switch req.Params.State {
		case "on":
			h.power = "on"
		case "off", "soft":
			h.power = "off"
		}
	case "setBootDevice":
		h.boot = req.Params.Device
	}
	_ = json.NewEncoder(w).Encode(resp)
}

// State is the machine's power and boot device, how many requests were
// refused for their signature, and the methods accepted, in order (a
// power change with its state: "setPowerState on").
func (h *RPCWebhook) State() (power, boot string, bad int, calls []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.power, h.boot, h.bad, append([]string(nil), h.calls...)
}
