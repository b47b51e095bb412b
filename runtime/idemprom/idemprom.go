// Package idemprom exports what the idempotency engine does as Prometheus
// metrics. It is a package of its own so that the engine (runtime/idem)
// pulls in no metrics library: a service that uses Prometheus imports
// this one and passes its Metrics as idem.Config.Observer.
//
// The metrics, labelled by operation ID and outcome (idem.Outcome):
//
//	idem_requests_total{operation,outcome}              counter
//	idem_request_duration_seconds{operation,outcome}    histogram, handler included
//	idem_store_duration_seconds{operation}              histogram, time waiting on the store
//	idem_indeterminate_keys                             gauge, with WithIndeterminate
//
// As an idemoutbox.Observer (the outbox's Options.Observer and its
// runner's Config.Observer), by effect name and outcome
// (idemoutbox.Outcome: staged, delivered, retried, dead):
//
//	idem_effects_total{effect,outcome}                  counter
//	idem_effect_delivery_lag_seconds{effect}            histogram, staging to recorded delivery
//	idem_effects_pending, idem_effects_dead             gauges, with WithEffectBacklog
//	idem_effect_oldest_pending_seconds                  gauge, with WithEffectBacklog
//
// The tenant is not a label: tenants are unbounded, and a label per
// tenant would grow the series without limit.
package idemprom

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
)

// Metrics is an idem.Observer that records every event in Prometheus
// metrics.
type Metrics struct {
	requests      *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	storeDuration *prometheus.HistogramVec
	effects       *prometheus.CounterVec
	lag           *prometheus.HistogramVec
}

// LagBuckets are the buckets of the delivery lag, in seconds: from a
// delivery at once to one after an hour of retries.
var LagBuckets = []float64{0.05, 0.25, 1, 5, 30, 120, 600, 3600}

// Option configures New.
type Option func(*config)

type config struct {
	namespace     string
	buckets       []float64
	indeterminate func(context.Context) (int64, error)
	countTimeout  time.Duration
	backlog       func(context.Context) (idemoutbox.Backlog, error)
}

// WithNamespace prefixes every metric name ("payments" gives
// payments_idem_requests_total).
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithBuckets sets the histograms' buckets, in seconds; the default is
// prometheus.DefBuckets.
func WithBuckets(b []float64) Option { return func(c *config) { c.buckets = b } }

// WithIndeterminate adds the gauge idem_indeterminate_keys, read on every
// scrape from count (a store query that counts the keys in the
// indeterminate state, each of which waits for an operator). A scrape
// waits for it at most timeout; a failed count leaves the gauge out of
// that scrape rather than reporting a wrong number.
func WithIndeterminate(count func(context.Context) (int64, error), timeout time.Duration) Option {
	return func(c *config) { c.indeterminate, c.countTimeout = count, timeout }
}

// WithEffectBacklog adds the gauges idem_effects_pending,
// idem_effects_dead and idem_effect_oldest_pending_seconds, read on every
// scrape from backlog (the outbox's Store.Backlog). The oldest pending
// effect's age is the delivery lag that grows when no runner delivers at
// all, which the lag of delivered effects cannot show. A scrape waits for
// it as long as WithIndeterminate's count (5 s unless set there); a
// failed read leaves the gauges out of that scrape.
func WithEffectBacklog(backlog func(context.Context) (idemoutbox.Backlog, error)) Option {
	return func(c *config) { c.backlog = backlog }
}

// New creates the metrics and registers them with reg.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	c := config{buckets: prometheus.DefBuckets, countTimeout: 5 * time.Second}
	for _, o := range opts {
		o(&c)
	}
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: c.namespace, Subsystem: "idem", Name: "requests_total",
			Help: "Protected requests by operation and by what the idempotency engine did with them.",
		}, []string{"operation", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: c.namespace, Subsystem: "idem", Name: "request_duration_seconds",
			Help:    "Time spent in the idempotency engine per protected request, handler included.",
			Buckets: c.buckets,
		}, []string{"operation", "outcome"}),
		storeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: c.namespace, Subsystem: "idem", Name: "store_duration_seconds",
			Help:    "Time a protected request spent waiting on the idempotency store.",
			Buckets: c.buckets,
		}, []string{"operation"}),
	}
	m.effects = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: c.namespace, Subsystem: "idem", Name: "effects_total",
		Help: "Effects of the transactional outbox by name and outcome: staged, delivered, retried, dead.",
	}, []string{"effect", "outcome"})
	m.lag = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: c.namespace, Subsystem: "idem", Name: "effect_delivery_lag_seconds",
		Help:    "Time from an effect's staging to its recorded delivery.",
		Buckets: LagBuckets,
	}, []string{"effect"})
	cs := []prometheus.Collector{m.requests, m.duration, m.storeDuration, m.effects, m.lag}
	if c.indeterminate != nil {
		cs = append(cs, &indeterminate{
			desc:    prometheus.NewDesc(prometheus.BuildFQName(c.namespace, "idem", "indeterminate_keys"), "Keys whose outcome is unknown, waiting for an operator.", nil, nil),
			count:   c.indeterminate,
			timeout: c.countTimeout,
		})
	}
	if c.backlog != nil {
		name := func(n string) string { return prometheus.BuildFQName(c.namespace, "idem", n) }
		cs = append(cs, &backlog{
			pending: prometheus.NewDesc(name("effects_pending"), "Effects staged and not delivered yet.", nil, nil),
			dead:    prometheus.NewDesc(name("effects_dead"), "Effects whose every attempt failed, waiting for an operator.", nil, nil),
			oldest:  prometheus.NewDesc(name("effect_oldest_pending_seconds"), "Age of the oldest effect not delivered yet.", nil, nil),
			read:    c.backlog,
			timeout: c.countTimeout,
		})
	}
	for _, col := range cs {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("idemprom: register: %w", err)
		}
	}
	return m, nil
}

// Observe records ev; it implements idem.Observer.
func (m *Metrics) Observe(_ context.Context, ev idem.Event) {
	outcome := string(ev.Outcome)
	m.requests.WithLabelValues(ev.Operation, outcome).Inc()
	m.duration.WithLabelValues(ev.Operation, outcome).Observe(ev.Duration.Seconds())
	m.storeDuration.WithLabelValues(ev.Operation).Observe(ev.StoreDuration.Seconds())
}

// ObserveEffect records ev; it implements idemoutbox.Observer.
func (m *Metrics) ObserveEffect(_ context.Context, ev idemoutbox.Event) {
	m.effects.WithLabelValues(ev.Name, string(ev.Outcome)).Inc()
	if ev.Outcome == idemoutbox.OutcomeDelivered {
		m.lag.WithLabelValues(ev.Name).Observe(ev.Lag.Seconds())
	}
}

// indeterminate is the gauge of indeterminate keys, counted at scrape
// time: the count lives in the store, not in this process.
type indeterminate struct {
	desc    *prometheus.Desc
	count   func(context.Context) (int64, error)
	timeout time.Duration
}

func (g *indeterminate) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *indeterminate) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	n, err := g.count(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(g.desc, fmt.Errorf("count indeterminate keys: %w", err))
		return
	}
	ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(n))
}

// backlog is the gauges of the outbox's backlog, read at scrape time.
type backlog struct {
	pending, dead, oldest *prometheus.Desc
	read                  func(context.Context) (idemoutbox.Backlog, error)
	timeout               time.Duration
}

func (g *backlog) Describe(ch chan<- *prometheus.Desc) { ch <- g.pending; ch <- g.dead; ch <- g.oldest }

func (g *backlog) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	b, err := g.read(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(g.pending, fmt.Errorf("read the outbox's backlog: %w", err))
		return
	}
	ch <- prometheus.MustNewConstMetric(g.pending, prometheus.GaugeValue, float64(b.Pending))
	ch <- prometheus.MustNewConstMetric(g.dead, prometheus.GaugeValue, float64(b.Dead))
	ch <- prometheus.MustNewConstMetric(g.oldest, prometheus.GaugeValue, b.OldestPending.Seconds())
}
