package bmctest

import (
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// HomeAssistant is a loopback fake of Home Assistant's REST API as
// bmclib's homeassistant provider uses it: a long-lived access token as
// a bearer token (anything else is 401 "401: Unauthorized", counted),
// GET /api/states/<entity> for a switch's state (404 "Entity not found."
// for any other entity), and POST /api/services/switch/turn_on|turn_off
// with the entity in the body. It serves TLS, as Anvil reaches Home
// Assistant over https only; CAPEM is its certificate. Written from
// Home Assistant's REST API documentation and bmclib's provider source.
// A request outside that API is 404 and recorded, so a change in what
// bmclib asks for fails loudly.
type HomeAssistant struct {
	Token  string
	Switch string
	// Port is where it listens on 127.0.0.1.
	Port  int
	CAPEM string

	mu       sync.Mutex
	power    string
	calls    []string // "GET state", "turn_on", "turn_off", in order
	bad      int      // requests refused for their token
	unknown  []string // requests outside the API bmclib uses
	entities []string // entity IDs a service call named
}

// StartHomeAssistant starts a fake Home Assistant whose switch entity
// sw is in state power ("on" or "off"), accepting token.
func StartHomeAssistant(t testing.TB, token, sw, power string) *HomeAssistant {
	t.Helper()
	h := &HomeAssistant{Token: token, Switch: sw, power: power}
	ts := httptest.NewTLSServer(h)
	t.Cleanup(ts.Close)
	h.Port = ts.Listener.Addr().(*net.TCPAddr).Port
	h.CAPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}))
	return h
}

func (h *HomeAssistant) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if r.Header.Get("Authorization") != "Bearer "+h.Token {
		h.bad++
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte("401: Unauthorized"))
		return
	}
	entity, isState := strings.CutPrefix(r.URL.Path, "/api/states/")
	switch {
	case r.Method == http.MethodGet && isState:
		if entity != h.Switch {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"message":"Entity not found."}`))
			return
		}
		h.calls = append(h.calls, "GET state")
		_ = json.NewEncoder(w).Encode(h.state())
	case r.Method == http.MethodPost && (r.URL.Path == "/api/services/switch/turn_on" || r.URL.Path == "/api/services/switch/turn_off"):
		var req struct {
			EntityID string `json:"entity_id"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"message":"Data should be valid JSON."}`))
			return
		}
		service := strings.TrimPrefix(r.URL.Path, "/api/services/switch/")
		h.calls = append(h.calls, service)
		h.entities = append(h.entities, req.EntityID)
		// Home Assistant answers a service call on an entity it does not
		// have with 200 and no changed states.
		if req.EntityID != h.Switch {
			_, _ = w.Write([]byte("[]"))
			return
		}
		h.power = strings.TrimPrefix(service, "turn_")
		_ = json.NewEncoder(w).Encode([]any{h.state()})
	default:
		h.unknown = append(h.unknown, r.Method+" "+r.URL.Path)
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"message":"Not found"}`))
	}
}

// state is the switch's state object as Home Assistant returns it.
func (h *HomeAssistant) state() map[string]any {
	return map[string]any{"entity_id": h.Switch, "state": h.power,
		"attributes": map[string]string{"friendly_name": "Rack power " + h.Switch}}
}

// HomeAssistantState is what the fake saw and holds.
type HomeAssistantState struct {
	Power string
	// Calls are the accepted requests, in order: "GET state",
	// "turn_on", "turn_off".
	Calls []string
	// Refused counts requests refused for their token.
	Refused int
	// Unknown are requests outside the API bmclib uses.
	Unknown []string
	// Entities are the entity IDs the service calls named.
	Entities []string
}

// State is the switch's power state and the requests seen.
func (h *HomeAssistant) State() HomeAssistantState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return HomeAssistantState{Power: h.power, Calls: append([]string(nil), h.calls...), Refused: h.bad,
		Unknown: append([]string(nil), h.unknown...), Entities: append([]string(nil), h.entities...)}
}
