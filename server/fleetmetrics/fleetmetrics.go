// Package fleetmetrics exports the fleet as an operator alerts on it:
// nodes by provision state, maintenance, fault and conductor group; each
// conductor's liveness and the nodes it holds locked; allocations and
// campaigns by state; and the build that answers. They are read from the
// database at each scrape (a few grouped queries, however many nodes),
// so every replica reports the same fleet: aggregate them with max, not
// sum.
package fleetmetrics

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/anvilproject/anvil/internal/version"
	"github.com/anvilproject/anvil/server/allocations"
	"github.com/anvilproject/anvil/server/campaigns"
	"github.com/anvilproject/anvil/server/store"
)

// scrapeTimeout bounds the queries of one scrape: a scrape that waits on
// a locked database must not pile up behind Prometheus' retries.
const scrapeTimeout = 5 * time.Second

var (
	nodesDesc = prometheus.NewDesc("anvil_nodes", "Nodes by provision state, maintenance, fault (empty: none) and conductor group.",
		[]string{"provision_state", "maintenance", "fault", "conductor_group"}, nil)
	conductorUpDesc = prometheus.NewDesc("anvil_conductor_online", "1 for a conductor registered online, 0 for one that stopped or was taken over.",
		[]string{"conductor", "conductor_group"}, nil)
	conductorBeatDesc = prometheus.NewDesc("anvil_conductor_heartbeat_timestamp_seconds", "When each conductor last reported itself alive (Unix time); alert on time() minus this past --heartbeat-timeout.",
		[]string{"conductor", "conductor_group"}, nil)
	reservedDesc = prometheus.NewDesc("anvil_conductor_reserved_nodes", "Nodes each conductor holds locked (reservation) for work under way; a count that stays on a conductor that is gone is a lock nobody releases.",
		[]string{"conductor"}, nil)
	allocationsDesc = prometheus.NewDesc("anvil_allocations", "Allocations by state (allocating, active, error).",
		[]string{"state"}, nil)
	campaignsDesc = prometheus.NewDesc("anvil_campaigns", "Campaigns by state (pending_approval, scheduled, running, paused, completed, failed, cancelled).",
		[]string{"state"}, nil)
	buildDesc = prometheus.NewDesc("anvil_build_info", "1, labelled with the version and commit of the anvil binary answering.",
		[]string{"version", "commit"}, nil)
)

// Collector reads the fleet at each scrape.
type Collector struct {
	db     *store.DB
	log    *slog.Logger
	errors prometheus.Counter
}

// New is a Collector over db; failed reads are logged and counted in
// anvil_fleet_metrics_errors_total, and the scrape answers without the
// fleet's families rather than failing whole.
func New(db *store.DB, log *slog.Logger) *Collector {
	return &Collector{db: db, log: log, errors: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "anvil_fleet_metrics_errors_total", Help: "Scrapes whose fleet metrics could not be read from the database.",
	})}
}

// Describe is prometheus.Collector's.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- nodesDesc
	ch <- conductorUpDesc
	ch <- conductorBeatDesc
	ch <- reservedDesc
	ch <- allocationsDesc
	ch <- campaignsDesc
	ch <- buildDesc
	c.errors.Describe(ch)
}

// Collect is prometheus.Collector's.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	v := version.Get()
	ch <- prometheus.MustNewConstMetric(buildDesc, prometheus.GaugeValue, 1, v.Version, v.Commit)
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	if err := c.nodes(ctx, ch); err != nil {
		c.failed("nodes", err)
	}
	if err := c.conductors(ctx, ch); err != nil {
		c.failed("conductors", err)
	}
	if err := c.byState(ctx, ch, reservedDesc, `SELECT reservation, COUNT(*) FROM nodes WHERE reservation IS NOT NULL GROUP BY reservation`, nil); err != nil {
		c.failed("reservations", err)
	}
	if err := c.byState(ctx, ch, allocationsDesc, `SELECT state, COUNT(*) FROM allocations GROUP BY state`,
		[]string{allocations.StateAllocating, allocations.StateActive, allocations.StateError}); err != nil {
		c.failed("allocations", err)
	}
	if err := c.byState(ctx, ch, campaignsDesc, `SELECT state, COUNT(*) FROM campaigns GROUP BY state`, campaigns.States); err != nil {
		c.failed("campaigns", err)
	}
	c.errors.Collect(ch)
}

func (c *Collector) failed(what string, err error) {
	c.errors.Inc()
	c.log.Warn("fleet metrics: reading "+what+" failed", "err", err)
}

func (c *Collector) nodes(ctx context.Context, ch chan<- prometheus.Metric) error {
	rows, err := c.db.SQL.QueryContext(ctx, `SELECT provision_state, maintenance, COALESCE(fault, ''), conductor_group, COUNT(*)
		FROM nodes GROUP BY provision_state, maintenance, COALESCE(fault, ''), conductor_group`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var state, fault, group string
		var maint bool
		var n float64
		if err := rows.Scan(&state, &maint, &fault, &group, &n); err != nil {
			return err
		}
		ch <- prometheus.MustNewConstMetric(nodesDesc, prometheus.GaugeValue, n, state, strconv.FormatBool(maint), fault, group)
	}
	return rows.Err()
}

func (c *Collector) conductors(ctx context.Context, ch chan<- prometheus.Metric) error {
	cs, err := c.db.Conductor.Query().All(ctx)
	if err != nil {
		return err
	}
	for _, k := range cs {
		up := 0.0
		if k.Online {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(conductorUpDesc, prometheus.GaugeValue, up, k.Hostname, k.ConductorGroup)
		ch <- prometheus.MustNewConstMetric(conductorBeatDesc, prometheus.GaugeValue, float64(k.HeartbeatAt.UnixMilli())/1000, k.Hostname, k.ConductorGroup)
	}
	return nil
}

// byState answers query, one label value and its count a row, as desc's
// gauges; each of zeroes is served from zero when no row has it, so that
// an alert on a state has a series before the first one gets there.
func (c *Collector) byState(ctx context.Context, ch chan<- prometheus.Metric, desc *prometheus.Desc, query string, zeroes []string) error {
	rows, err := c.db.SQL.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	counts := make(map[string]float64, len(zeroes))
	for _, s := range zeroes {
		counts[s] = 0
	}
	for rows.Next() {
		var value string
		var n float64
		if err := rows.Scan(&value, &n); err != nil {
			return err
		}
		counts[value] = n
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for value, n := range counts {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, n, value)
	}
	return nil
}
