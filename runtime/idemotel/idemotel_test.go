package idemotel_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemotel"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// TestMetricsAndSpans: an executed request and its replay are counted by
// outcome, and each is a span carrying its outcome, a child of the
// request's span.
func TestMetricsAndSpans(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	obs, err := idemotel.New(mp, tp)
	if err != nil {
		t.Fatal(err)
	}
	e, err := idem.New(idem.Config{
		Store:    memstore.New(),
		Policies: []idem.Policy{idemtest.Policy("createTransfer", "/transfers", func(p *idem.Policy) { p.Required = false })},
		Tenant:   func(*http.Request) (string, bool) { return "acme", true },
		Observer: obs,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }))
	parentCtx, parent := tp.Tracer("test").Start(context.Background(), "POST /transfers")
	for range 2 {
		r := httptest.NewRequestWithContext(parentCtx, http.MethodPost, "/transfers", strings.NewReader(`{}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", "k1")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	parent.End()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "idem.requests" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				outcome, _ := dp.Attributes.Value(attribute.Key("idem.outcome"))
				counts[outcome.AsString()] += dp.Value
			}
		}
	}
	if counts["executed"] != 1 || counts["replayed"] != 1 {
		t.Errorf("idem.requests by outcome = %v, want executed 1 and replayed 1", counts)
	}

	var outcomes []string
	for _, s := range spans.Ended() {
		if s.Name() != "idem createTransfer" {
			continue
		}
		if s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %s is not a child of the request's span", s.Name())
		}
		for _, a := range s.Attributes() {
			if a.Key == "idem.outcome" {
				outcomes = append(outcomes, a.Value.AsString())
			}
		}
	}
	if strings.Join(outcomes, ",") != "executed,replayed" {
		t.Errorf("spans' outcomes = %v, want executed, replayed", outcomes)
	}
}

// TestEffectMetrics: as the outbox's observer, the instruments count
// effects by name and outcome and record the delivery lag of delivered
// ones only.
func TestEffectMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	obs, err := idemotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), sdktrace.NewTracerProvider())
	if err != nil {
		t.Fatal(err)
	}
	var o idemoutbox.Observer = obs
	ctx := context.Background()
	o.ObserveEffect(ctx, idemoutbox.Event{Name: "receipt", Outcome: idemoutbox.OutcomeStaged})
	o.ObserveEffect(ctx, idemoutbox.Event{Name: "receipt", Outcome: idemoutbox.OutcomeDelivered, Attempt: 1, Lag: 2 * time.Second})
	o.ObserveEffect(ctx, idemoutbox.Event{Name: "webhook", Outcome: idemoutbox.OutcomeDead, Attempt: 8})
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	var lags []float64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "idem.effects":
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					name, _ := dp.Attributes.Value("idem.effect")
					outcome, _ := dp.Attributes.Value("idem.outcome")
					counts[name.AsString()+" "+outcome.AsString()] += dp.Value
				}
			case "idem.effect.delivery.lag":
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					lags = append(lags, dp.Sum)
				}
			}
		}
	}
	if counts["receipt staged"] != 1 || counts["receipt delivered"] != 1 || counts["webhook dead"] != 1 || len(counts) != 3 {
		t.Errorf("idem.effects = %v", counts)
	}
	if len(lags) != 1 || lags[0] != 2 {
		t.Errorf("delivery lags = %v, want one of 2s", lags)
	}
}
