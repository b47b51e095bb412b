package app

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/server"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemprom"
	"github.com/idemgen/idemgen/runtime/idemshed"
)

// metrics is the service's Prometheus registry with the idempotency
// layer's metrics, or nil when --metrics is off.
type metrics struct {
	reg *prometheus.Registry
	obs *idemprom.Metrics
}

func newMetrics(on bool) (*metrics, error) {
	if !on {
		return nil, nil
	}
	reg := prometheus.NewRegistry()
	obs, err := idemprom.New(reg)
	if err != nil {
		return nil, err
	}
	return &metrics{reg: reg, obs: obs}, nil
}

// observer is the engine's observer: the metrics, or none.
func (m *metrics) observer() idem.Observer {
	if m == nil {
		return nil
	}
	return m.obs
}

// handler serves GET /metrics beside the API. /metrics is not an API path
// and takes no API key; in production it is served to the monitoring
// network only, which the proxy in front of the service decides.
func (m *metrics) handler(api http.Handler) http.Handler {
	if m == nil {
		return api
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.Handle("/", api)
	return mux
}

// watch adds what the server and its admission did to the metrics:
//
//	petstore_handler_runs_client_gone_total      counter
//	petstore_admission_admitted_total            counter
//	petstore_admission_queued_total              counter
//	petstore_admission_refused_total{reason}     counter: full, waited, gone, displaced, read-ahead-full
//
// A handler run whose client had already hung up is work nobody reads;
// under a retry storm it should stay near zero, because admission and the
// idempotency layer refuse such requests before they start.
func (m *metrics) watch(srv *server.Server, shed *idemshed.Shedder) error {
	if m == nil {
		return nil
	}
	counter := func(name, help string, labels prometheus.Labels, f func() int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "petstore", Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(f()) })
	}
	cs := []prometheus.Collector{
		counter("handler_runs_client_gone_total", "Requests that reached a handler after their client had hung up.", nil, srv.GoneRuns),
		counter("admission_admitted_total", "Requests admitted to be served.", nil, func() int64 { return shed.Stats().Admitted }),
		counter("admission_queued_total", "Requests that waited for a slot, admitted or not.", nil, func() int64 { return shed.Stats().Queued }),
	}
	for _, why := range []idemshed.Reason{idemshed.Full, idemshed.Waited, idemshed.Gone, idemshed.Displaced, idemshed.ReadAheadFull} {
		cs = append(cs, counter("admission_refused_total", "Requests refused with 503 before anything ran, by reason.",
			prometheus.Labels{"reason": why.String()}, func() int64 { return shed.Stats().Refused[why] }))
	}
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}
