package conductor

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count the steps this conductor runs, at the one place every
// step of a clean, service or deploy run passes (runSteps around
// execStep). The step label is a catalogue step's name, or "other":
// steps come from users' runbooks and the agent, and a label must not.
type Metrics struct {
	runs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics creates the step metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_steps_total",
			Help: "Steps run by phase (clean, service, deploy), step (interface.step of the catalogue, else other) and outcome (ok, failed, aborted, hold, shutdown).",
		}, []string{"phase", "step", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "anvil_step_duration_seconds",
			Help: "How long steps ran, by phase and step, whatever their outcome.",
			// From a boot device set in a second to a disk wipe or a
			// firmware flash of an hour and more.
			Buckets: []float64{.1, .5, 1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200},
		}, []string{"phase", "step"}),
	}
	reg.MustRegister(m.runs, m.duration)
	return m
}

// stepLabels are the step label's values: every catalogue step. Built
// once, so labelling a step allocates nothing.
var stepLabels = func() map[[2]string]string {
	out := make(map[[2]string]string, len(catalogue))
	for _, s := range catalogue {
		out[[2]string{s.Interface, s.Step}] = s.Name()
	}
	return out
}()

// observe records step st of a phase that took d and ended with err.
func (m *Metrics) observe(phase string, st Step, d time.Duration, err error) {
	if m == nil {
		return
	}
	iface, step := canonical(st.Interface, st.Step)
	name, ok := stepLabels[[2]string{iface, step}]
	if !ok {
		name = "other"
	}
	outcome := "ok"
	switch {
	case errors.Is(err, errHold):
		outcome = "hold"
	case errors.Is(err, errAborted):
		outcome = "aborted"
	case errors.Is(err, errShutdown):
		outcome = "shutdown"
	case err != nil:
		outcome = "failed"
	}
	m.runs.WithLabelValues(phase, name, outcome).Inc()
	m.duration.WithLabelValues(phase, name).Observe(d.Seconds())
}
