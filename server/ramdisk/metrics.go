package ramdisk

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/anvilproject/anvil/server/errs"
)

// Metrics count the agents' lookups and heartbeats by outcome. The
// counters are resolved once (so each outcome is served from zero): a
// heartbeat adds one, with no label lookup, on a path every agent takes
// every minute or two.
type Metrics struct {
	lookups, heartbeats outcomes
}

// outcomes are one family's counters: ok; refused, the caller's fault
// or not allowed (a 4xx: no such node, a wrong token, a node not
// expecting its agent); failed, Anvil's (a 5xx: the database).
type outcomes struct{ ok, refused, failed prometheus.Counter }

func (o *outcomes) count(err error) {
	switch {
	case err == nil:
		o.ok.Inc()
	case errs.Status(err) < 500:
		o.refused.Inc()
	default:
		o.failed.Inc()
	}
}

// NewMetrics creates the agent metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	lookups := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_agent_lookups_total",
		Help: "Ramdisk agent lookups by outcome: ok, refused (no node expects an agent with those addresses, or not allowed) or failed (a server error).",
	}, []string{"outcome"})
	heartbeats := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_agent_heartbeats_total",
		Help: "Ramdisk agent heartbeats by outcome: ok, refused (a wrong token or address, a changed callback) or failed (a server error).",
	}, []string{"outcome"})
	reg.MustRegister(lookups, heartbeats)
	of := func(v *prometheus.CounterVec) outcomes {
		return outcomes{v.WithLabelValues("ok"), v.WithLabelValues("refused"), v.WithLabelValues("failed")}
	}
	return &Metrics{lookups: of(lookups), heartbeats: of(heartbeats)}
}
