// Package idemotel exports what the idempotency engine does through
// OpenTelemetry: metrics, and a span per protected request. It is a
// package of its own so that the engine (runtime/idem) pulls in no
// telemetry library: pass an Observer as idem.Config.Observer.
//
// Metrics (attributes idem.operation and idem.outcome):
//
//	idem.requests          counter
//	idem.request.duration  histogram, seconds, handler included
//	idem.store.duration    histogram, seconds, time waiting on the store
//
// As an idemoutbox.Observer (attributes idem.effect and idem.outcome):
//
//	idem.effects                 counter: staged, delivered, retried, dead
//	idem.effect.delivery.lag     histogram, seconds, staging to recorded delivery
//
// The span, named "idem <operation>", covers the engine's work on the
// request from its claim to its completion, as a child of the request's
// span when the context carries one. The engine reports a request once
// it has answered, so the span is recorded then, with its start set back
// by the request's duration. Its attributes are the operation, the
// outcome, the HTTP status sent and the time spent on the store; a
// store, handler or fencing error marks it as failed.
package idemotel

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/idemgen/idemgen/runtime/idemotel"

// Observer is an idem.Observer that records every event as OpenTelemetry
// metrics and a span.
type Observer struct {
	tracer        trace.Tracer
	requests      metric.Int64Counter
	duration      metric.Float64Histogram
	storeDuration metric.Float64Histogram
	effects       metric.Int64Counter
	lag           metric.Float64Histogram
	now           func() time.Time
}

// New creates the instruments from mp and the tracer from tp.
func New(mp metric.MeterProvider, tp trace.TracerProvider) (*Observer, error) {
	meter := mp.Meter(ScopeName)
	o := &Observer{tracer: tp.Tracer(ScopeName), now: time.Now}
	var err error
	if o.requests, err = meter.Int64Counter("idem.requests",
		metric.WithDescription("Protected requests by operation and by what the idempotency engine did with them."),
		metric.WithUnit("{request}")); err != nil {
		return nil, fmt.Errorf("idemotel: %w", err)
	}
	if o.duration, err = meter.Float64Histogram("idem.request.duration",
		metric.WithDescription("Time spent in the idempotency engine per protected request, handler included."),
		metric.WithUnit("s")); err != nil {
		return nil, fmt.Errorf("idemotel: %w", err)
	}
	if o.storeDuration, err = meter.Float64Histogram("idem.store.duration",
		metric.WithDescription("Time a protected request spent waiting on the idempotency store."),
		metric.WithUnit("s")); err != nil {
		return nil, fmt.Errorf("idemotel: %w", err)
	}
	if o.effects, err = meter.Int64Counter("idem.effects",
		metric.WithDescription("Effects of the transactional outbox by name and outcome: staged, delivered, retried, dead."),
		metric.WithUnit("{effect}")); err != nil {
		return nil, fmt.Errorf("idemotel: %w", err)
	}
	if o.lag, err = meter.Float64Histogram("idem.effect.delivery.lag",
		metric.WithDescription("Time from an effect's staging to its recorded delivery."),
		metric.WithUnit("s")); err != nil {
		return nil, fmt.Errorf("idemotel: %w", err)
	}
	return o, nil
}

// Observe records ev; it implements idem.Observer.
func (o *Observer) Observe(ctx context.Context, ev idem.Event) {
	op := attribute.String("idem.operation", ev.Operation)
	both := metric.WithAttributes(op, attribute.String("idem.outcome", string(ev.Outcome)))
	o.requests.Add(ctx, 1, both)
	o.duration.Record(ctx, ev.Duration.Seconds(), both)
	o.storeDuration.Record(ctx, ev.StoreDuration.Seconds(), metric.WithAttributes(op))

	end := o.now()
	_, span := o.tracer.Start(ctx, "idem "+ev.Operation,
		trace.WithTimestamp(end.Add(-ev.Duration)),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(op,
			attribute.String("idem.outcome", string(ev.Outcome)),
			attribute.Int("http.response.status_code", ev.Status),
			attribute.Float64("idem.store.duration", ev.StoreDuration.Seconds()),
		))
	if ev.Err != nil {
		span.RecordError(ev.Err)
		span.SetStatus(codes.Error, ev.Err.Error())
	}
	span.End(trace.WithTimestamp(end))
}

// ObserveEffect records ev; it implements idemoutbox.Observer.
func (o *Observer) ObserveEffect(ctx context.Context, ev idemoutbox.Event) {
	name := attribute.String("idem.effect", ev.Name)
	o.effects.Add(ctx, 1, metric.WithAttributes(name, attribute.String("idem.outcome", string(ev.Outcome))))
	if ev.Outcome == idemoutbox.OutcomeDelivered {
		o.lag.Record(ctx, ev.Lag.Seconds(), metric.WithAttributes(name))
	}
}
