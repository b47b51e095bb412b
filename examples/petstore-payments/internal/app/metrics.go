package app

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemprom"
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
