package idemprom_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemprom"
	"github.com/idemgen/idemgen/runtime/memstore"
)

func policy() idem.Policy {
	return idemtest.Policy("createTransfer", "/transfers")
}

// server is a service with the engine and the adapter, and /metrics.
func server(t *testing.T, opts ...idemprom.Option) *httptest.Server {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := idemprom.New(reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	e, err := idem.New(idem.Config{
		Store:    memstore.New(),
		Policies: []idem.Policy{policy()},
		Tenant:   func(*http.Request) (string, bool) { return "acme", true },
		Observer: m,
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, srv *httptest.Server, key, body string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/transfers", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

func scrape(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d\n%s", resp.StatusCode, b)
	}
	return string(b)
}

// TestMetricsShowOutcomes: after an executed request, its replay, a
// reused key and a request without its required key, /metrics counts
// each outcome of the operation and times the store.
func TestMetricsShowOutcomes(t *testing.T) {
	srv := server(t)
	post(t, srv, "k1", `{"amount":1}`)
	post(t, srv, "k1", `{"amount":1}`)
	post(t, srv, "k1", `{"amount":1}`)
	post(t, srv, "k1", `{"amount":2}`)
	post(t, srv, "", `{"amount":1}`)
	got := scrape(t, srv)
	for _, want := range []string{
		`idem_requests_total{operation="createTransfer",outcome="executed"} 1`,
		`idem_requests_total{operation="createTransfer",outcome="replayed"} 2`,
		`idem_requests_total{operation="createTransfer",outcome="mismatch"} 1`,
		`idem_requests_total{operation="createTransfer",outcome="rejected"} 1`,
		`idem_request_duration_seconds_count{operation="createTransfer",outcome="replayed"} 2`,
		`idem_store_duration_seconds_count{operation="createTransfer"} 5`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("/metrics lacks %s\n%s", want, got)
		}
	}
}

// TestIndeterminateGauge: the gauge reads the count at scrape time.
func TestIndeterminateGauge(t *testing.T) {
	n := int64(0)
	srv := server(t, idemprom.WithNamespace("payments"),
		idemprom.WithIndeterminate(func(context.Context) (int64, error) { return n, nil }, time.Second))
	n = 3
	if got, want := scrape(t, srv), "payments_idem_indeterminate_keys 3"; !strings.Contains(got, want) {
		t.Fatalf("/metrics lacks %s\n%s", want, got)
	}
}

// TestEffectMetrics: as the outbox's observer, the metrics count effects
// by name and outcome and time the delivery lag of delivered ones only.
func TestEffectMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := idemprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	var obs idemoutbox.Observer = m
	ctx := context.Background()
	for _, ev := range []idemoutbox.Event{
		{Name: "receipt", Outcome: idemoutbox.OutcomeStaged},
		{Name: "receipt", Outcome: idemoutbox.OutcomeRetried, Attempt: 1},
		{Name: "receipt", Outcome: idemoutbox.OutcomeDelivered, Attempt: 2, Lag: 3 * time.Second},
		{Name: "webhook", Outcome: idemoutbox.OutcomeDead, Attempt: 8},
	} {
		obs.ObserveEffect(ctx, ev)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	got := scrape(t, srv)
	for _, want := range []string{
		`idem_effects_total{effect="receipt",outcome="staged"} 1`,
		`idem_effects_total{effect="receipt",outcome="retried"} 1`,
		`idem_effects_total{effect="receipt",outcome="delivered"} 1`,
		`idem_effects_total{effect="webhook",outcome="dead"} 1`,
		`idem_effect_delivery_lag_seconds_sum{effect="receipt"} 3`,
		`idem_effect_delivery_lag_seconds_count{effect="receipt"} 1`,
		`idem_effect_delivery_lag_seconds_bucket{effect="receipt",le="1"} 0`,
		`idem_effect_delivery_lag_seconds_bucket{effect="receipt",le="5"} 1`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("/metrics lacks %s\n%s", want, got)
		}
	}
	if strings.Contains(got, `idem_effect_delivery_lag_seconds_count{effect="webhook"}`) {
		t.Error("a dead effect has a delivery lag")
	}
}

// TestEffectBacklogGauges: the backlog is read at scrape time.
func TestEffectBacklogGauges(t *testing.T) {
	b := idemoutbox.Backlog{}
	srv := server(t, idemprom.WithEffectBacklog(func(context.Context) (idemoutbox.Backlog, error) { return b, nil }))
	b = idemoutbox.Backlog{Pending: 4, Dead: 1, OldestPending: 90 * time.Second}
	got := scrape(t, srv)
	for _, want := range []string{"idem_effects_pending 4", "idem_effects_dead 1", "idem_effect_oldest_pending_seconds 90"} {
		if !strings.Contains(got, want) {
			t.Errorf("/metrics lacks %s\n%s", want, got)
		}
	}
}
