package idem

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
)

// readLimited reads what io.ReadAll reads through io.LimitReader(src,
// limit+1), whatever the declared length says and however src splits its
// reads, and stops once its context is done.
func TestReadLimitedReadsAsReadAll(t *testing.T) {
	const limit = 3 * firstRead
	sizes := []int{0, 1, 511, 512, 513, firstRead - 1, firstRead, firstRead + 1, limit - 1, limit, limit + 1, limit + 2, 2 * limit}
	readers := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"halves":   iotest.HalfReader,
		"data+EOF": iotest.DataErrReader,
	}
	for _, size := range sizes {
		body := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
		want, _ := io.ReadAll(io.LimitReader(bytes.NewReader(body), limit+1))
		for name, wrap := range readers {
			for _, hint := range []int64{-1, 0, int64(size) / 2, int64(size), int64(size) + 1, 1 << 40} {
				got, err := readLimited(context.Background(), wrap(bytes.NewReader(body)), limit, hint)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%d bytes, %s, declared %d: read %d bytes (%v), want %d", size, name, hint, len(got), err, len(want))
				}
			}
		}
	}
}

func TestReadLimitedStopsWhenDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := readLimited(ctx, bytes.NewReader([]byte("{}")), 10, 2); err == nil {
		t.Fatal("read the body of a request whose client is gone")
	}
	if _, err := readLimited(context.Background(), iotest.ErrReader(io.ErrUnexpectedEOF), 10, 2); err == nil {
		t.Fatal("a failed read was not reported")
	}
}

// A body of declared length is read into one buffer of its size.
func TestReadLimitedAllocatesOnceForDeclaredLength(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 4000)
	r := bytes.NewReader(body)
	n := testing.AllocsPerRun(50, func() {
		r.Reset(body)
		_, _ = readLimited(context.Background(), r, 1<<20, int64(len(body)))
	})
	if n != 1 {
		t.Errorf("%.0f allocations to read a body of declared length, want 1", n)
	}
}

// checkedBody is a body a request validator left the value it checked on,
// as kin-openapi's openapi3filter does with KeepValidatedValue.
type checkedBody struct {
	io.ReadCloser
	value map[string]any
}

func (b checkedBody) ValidatedValue() any { return b.value }

// The copy of the body the handler reads still offers the value a
// validator in front of the engine checked, and only when it did:
// oapi-codegen's strict servers bind that value, matching member names
// exactly, and without it would decode the bytes again without regard to
// case, handing the method a member the validator never saw.
func TestReadBodyKeepsTheValidatedValue(t *testing.T) {
	const text = `{"item": "lamp", "NOTE": "never checked"}`
	checked := map[string]any{"item": "lamp", "NOTE": "never checked"}
	for name, src := range map[string]io.ReadCloser{
		"validated":     checkedBody{io.NopCloser(strings.NewReader(text)), checked},
		"not validated": io.NopCloser(strings.NewReader(text)),
	} {
		r := httptest.NewRequest(http.MethodPost, "/orders", nil)
		r.Body = src
		if _, p, ok := (&Engine{maxBody: 1 << 10}).readBody(r, &operation{}); !ok {
			t.Fatalf("%s: %v", name, p)
		}
		v, offers := r.Body.(interface{ ValidatedValue() any })
		if offers != (name == "validated") || offers && v.ValidatedValue().(map[string]any)["NOTE"] != "never checked" {
			t.Errorf("%s: the handler's body offers a validated value: %v, want %v, and the value checked", name, offers, name == "validated")
		}
		if got, err := io.ReadAll(r.Body); err != nil || string(got) != text {
			t.Errorf("%s: the handler read %q (%v), want %q", name, got, err, text)
		}
	}
}
