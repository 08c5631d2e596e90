package campaigns

import "github.com/prometheus/client_golang/prometheus"

// Metrics count campaign nodes as their runs start and end on this
// replica; sum them over replicas. Each is counted where the row's
// status changes, after the change committed, so a transaction that
// rolled back counts nothing. The campaigns by state are read from the
// database at each scrape (fleetmetrics).
type Metrics struct {
	nodes *prometheus.CounterVec
}

// Node outcomes, the values of the outcome label.
var nodeOutcomes = []string{"started", NodeSucceeded, NodeFailed, NodeSkipped}

// NewMetrics creates the campaign metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{nodes: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_campaign_nodes_total",
		Help: "Campaign nodes by outcome: started (its run began), succeeded, failed, skipped (ineligible, in maintenance, cancelled, or past the failure budget).",
	}, []string{"outcome"})}
	// Every outcome from zero, so rate() sees the first failure.
	for _, o := range nodeOutcomes {
		m.nodes.WithLabelValues(o)
	}
	reg.MustRegister(m.nodes)
	return m
}

// count adds n nodes that reached outcome.
func (m *Metrics) count(outcome string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.nodes.WithLabelValues(outcome).Add(float64(n))
}
