package bmc

import (
	"errors"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count the calls made to BMCs, at the one place every driver's
// call passes (caller.call): how many, how long, and how they ended. The
// labels are bounded by construction: the driver (and bmclib provider)
// from the driver table, the operation from opClasses, never a node, an
// address or what the BMC said. The fake driver makes no call and counts
// none.
type Metrics struct {
	calls   *prometheus.CounterVec
	latency *prometheus.HistogramVec
	errs    *prometheus.CounterVec
}

// NewMetrics creates the BMC call metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_bmc_calls_total",
			Help: "BMC calls by driver (bmclib:PROVIDER for bmclib), operation and outcome (ok, error, timeout); retries of a call that did not answer are one call.",
		}, []string{"driver", "operation", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "anvil_bmc_call_duration_seconds",
			Help: "BMC call latency by driver and operation, retries included.",
			// BMCs answer in tens of milliseconds to tens of seconds; the
			// default --bmc-timeout is 20 s a try.
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 40, 80},
		}, []string{"driver", "operation"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_bmc_call_errors_total",
			Help: "Failed BMC calls by driver and kind (auth, unreachable, tls, bmc, unsupported, network): what to fix, credentials or network or the BMC.",
		}, []string{"driver", "kind"}),
	}
	reg.MustRegister(m.calls, m.latency, m.errs)
	return m
}

// observe records one call of op through driver that took d and ended
// with err (nil, or what classify made of it).
func (m *Metrics) observe(driver, op string, d time.Duration, err error) {
	if m == nil {
		return
	}
	class := opClass(op)
	outcome := "ok"
	if err != nil {
		outcome = "error"
		kind := errKind(err)
		var e *Error
		if kind == "unreachable" && errors.As(err, &e) && e.Reason == "timeout" {
			outcome = "timeout"
		}
		m.errs.WithLabelValues(driver, kind).Inc()
	}
	m.calls.WithLabelValues(driver, class, outcome).Inc()
	m.latency.WithLabelValues(driver, class).Observe(d.Seconds())
}

// errKinds name the error kinds in the kind label.
var errKinds = []struct {
	kind error
	name string
}{
	{ErrAuth, "auth"}, {ErrUnreachable, "unreachable"}, {ErrTLS, "tls"}, {ErrBMC, "bmc"},
	{ErrUnsupported, "unsupported"}, {ErrNetwork, "network"},
}

func errKind(err error) string {
	for _, k := range errKinds {
		if errors.Is(err, k.kind) {
			return k.name
		}
	}
	return "other"
}

// opClasses map the words a call is made with (its op, which also heads
// its error message) to the operation label: the op carries a device,
// a power target, a RAID level or a volume id, and the label must not.
// The first prefix that matches wins; an op none matches is "other".
var opClasses = []struct{ prefix, class string }{
	{"reading power state", "power_get"},
	{"setting power", "power_set"},
	{"rebooting", "power_set"},
	{"soft rebooting", "power_set"},
	{"injecting an NMI", "nmi"},
	{"reading the boot device", "boot_device_get"},
	{"setting boot device", "boot_device_set"},
	{"reading the boot mode", "boot_mode_get"},
	{"setting boot mode", "boot_mode_set"},
	{"setting secure boot", "secure_boot_set"},
	{"reading virtual media", "vmedia_get"},
	{"inserting virtual media", "vmedia_insert"},
	{"ejecting virtual media", "vmedia_eject"},
	{"resetting the BMC", "bmc_reset"},
	{"reading BIOS settings", "bios_get"},
	{"staging BIOS settings", "bios_set"},
	{"resetting BIOS settings", "bios_reset"},
	{"reading firmware", "firmware_get"},
	{"updating ", "firmware_update"},
	{"following the", "firmware_task"},
	{"reading RAID", "raid_get"},
	{"creating a RAID", "raid_create"},
	{"deleting RAID", "raid_delete"},
	{"following RAID", "raid_task"},
	{"reading the inventory", "inventory_get"},
	{"reading indicators", "indicator_get"},
	{"setting indicator", "indicator_set"},
	{"reading the event log", "event_log_get"},
	{"clearing the event log", "event_log_clear"},
	{"reading the POST code", "post_code_get"},
	{"taking a console screenshot", "screenshot"},
	{"ending the serial console session", "console_end"},
}

func opClass(op string) string {
	for _, c := range opClasses {
		if strings.HasPrefix(op, c.prefix) {
			return c.class
		}
	}
	return "other"
}
