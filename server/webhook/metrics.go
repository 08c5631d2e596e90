package webhook

import "github.com/prometheus/client_golang/prometheus"

// Metrics count this replica's deliveries: each replica sends the rows
// it claimed, so sum them over replicas.
type Metrics struct {
	deliveries *prometheus.CounterVec
	retries    prometheus.Counter
	queued     prometheus.Gauge
}

// Delivery outcomes, the values of the outcome label.
const (
	outcomeDelivered = "delivered"
	outcomeFailed    = "failed"
	outcomeLost      = "lost"
)

// NewMetrics creates the webhook metrics and registers them with reg.
// They are registered with no webhook configured too, at zero, so that
// a dashboard reads the same on every server.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_webhook_deliveries_total",
			Help: "Webhook events by outcome: delivered, failed (refused, or still failing after the retries: dropped) or lost (claimed, then not sent at shutdown).",
		}, []string{"outcome"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "anvil_webhook_retries_total",
			Help: "Webhook delivery attempts after a first one failed with a network error or a 5xx answer.",
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "anvil_webhook_queue_depth",
			Help: "Webhook events this replica claimed from the audit log and has not yet delivered or given up on.",
		}),
	}
	for _, o := range []string{outcomeDelivered, outcomeFailed, outcomeLost} {
		m.deliveries.WithLabelValues(o)
	}
	reg.MustRegister(m.deliveries, m.retries, m.queued)
	return m
}
