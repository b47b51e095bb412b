package fingerprint

import (
	"encoding/json"
	"testing"
	"time"
)

// paymentBody is a realistic request of about 1 KiB: a transfer with
// metadata, a nested counterparty, line items and escaped text, written
// the way client libraries write it (keys in declaration order, not sorted).
const paymentBody = `{
  "amount": 125000,
  "currency": "EUR",
  "from_account": "acc_7Hq2Lm9PzX4tR1vB",
  "to_account": "acc_3Nd8Kw5YcJ6sF0gE",
  "memo": "Invoice 2024-0117 \u2014 consulting, J\u00e9r\u00f4me Dupont",
  "description": "Monthly retainer for January; see attached statement of work.",
  "statement_descriptor": "ACME CONSULTING",
  "capture": true,
  "fee_rate": 0.0125,
  "metadata": {
    "order_id": "ord_000184467",
    "customer_ref": "C-99812",
    "campaign": null,
    "channel": "api",
    "region": "eu-west"
  },
  "counterparty": {
    "name": "Dupont & Fils SARL",
    "iban": "FR7630006000011234567890189",
    "bic": "AGRIFRPP",
    "address": {"line1": "12 rue de la Paix", "city": "Paris", "postal_code": "75002", "country": "FR"}
  },
  "line_items": [
    {"sku": "CONS-HR", "quantity": 40, "unit_amount": 2500, "tax_rate": 0.2},
    {"sku": "TRAVEL", "quantity": 1, "unit_amount": 12500, "tax_rate": 0},
    {"sku": "EXPENSES", "quantity": 3, "unit_amount": 4166.67, "tax_rate": 0.055}
  ],
  "tags": ["retainer", "q1", "priority"],
  "requested_at": "2024-01-31T09:15:27Z"
}`

func benchSum(b *testing.B, spec Spec) {
	c := mustCompile(b, spec)
	in := Input{MediaType: jsonType, Body: []byte(paymentBody)}
	b.SetBytes(int64(len(paymentBody)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Sum(in); err != nil {
			b.Fatal(err)
		}
	}
}

func benchUnmarshal(b *testing.B) {
	body := []byte(paymentBody)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSumSelected(b *testing.B) { benchSum(b, transfer) }

func BenchmarkSumWholeBody(b *testing.B) { benchSum(b, Spec{}) }

func BenchmarkUnmarshalAny(b *testing.B) { benchUnmarshal(b) }

// BenchmarkSum_vs_Unmarshal measures a fingerprint against decoding the
// same body into any with encoding/json. Each iteration runs both, one
// after the other, so that both meet the same machine load; the ratio of
// their total times is reported as x-vs-unmarshal (the target is at most
// 1.0).
func BenchmarkSum_vs_Unmarshal(b *testing.B) {
	for _, tc := range []struct {
		name string
		spec Spec
	}{
		{"selected4", transfer},
		{"whole", Spec{}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := mustCompile(b, tc.spec)
			body := []byte(paymentBody)
			in := Input{MediaType: jsonType, Body: body}
			var fp, un time.Duration
			for b.Loop() {
				t0 := time.Now()
				if _, err := c.Sum(in); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				var v any
				if err := json.Unmarshal(body, &v); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				fp += t1.Sub(t0)
				un += t2.Sub(t1)
			}
			b.ReportMetric(float64(fp.Nanoseconds())/float64(b.N), "fp-ns/op")
			b.ReportMetric(float64(un.Nanoseconds())/float64(b.N), "unmarshal-ns/op")
			b.ReportMetric(float64(fp)/float64(un), "x-vs-unmarshal")
		})
	}
}

// BenchmarkSumLookup_vs_Apart measures what an operation whose key travels
// in the body pays: one SumLookup against Sum and Lookup apart, alternated
// per iteration like the benchmark above; x-vs-apart is the ratio of their
// times.
func BenchmarkSumLookup_vs_Apart(b *testing.B) {
	c := mustCompile(b, transfer)
	body := []byte(`{"idempotency_key":"k-4f1c9b2e",` + paymentBody[1:])
	in := Input{MediaType: jsonType, Body: body}
	var one, apart time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, _, found, err := c.SumLookup(in, "/idempotency_key"); err != nil || !found {
			b.Fatal(found, err)
		}
		t1 := time.Now()
		if _, err := c.Sum(in); err != nil {
			b.Fatal(err)
		}
		if _, found, err := Lookup(jsonType, body, "/idempotency_key"); err != nil || !found {
			b.Fatal(found, err)
		}
		t2 := time.Now()
		one += t1.Sub(t0)
		apart += t2.Sub(t1)
	}
	b.ReportMetric(float64(one.Nanoseconds())/float64(b.N), "sumlookup-ns/op")
	b.ReportMetric(float64(apart.Nanoseconds())/float64(b.N), "apart-ns/op")
	b.ReportMetric(float64(one)/float64(apart), "x-vs-apart")
}

func TestPaymentBodyIsAboutOneKiB(t *testing.T) {
	if n := len(paymentBody); n < 900 || n > 1300 {
		t.Errorf("benchmark body is %d bytes, want about 1 KiB", n)
	}
	if _, err := CanonicalJSON(nil, []byte(paymentBody)); err != nil {
		t.Fatal(err)
	}
}
