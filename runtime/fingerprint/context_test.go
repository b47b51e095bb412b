package fingerprint

import (
	"context"
	"errors"
	"testing"
)

// endsAfter is a context that is done from its (looks+1)th look on: a
// client that hangs up after the fingerprint has begun, at a point the
// test fixes by counting looks rather than by timing.
type endsAfter struct {
	context.Context
	looks, seen int
}

func (c *endsAfter) Err() error {
	c.seen++
	if c.seen > c.looks {
		return context.Canceled
	}
	return nil
}

// stoppedWork fingerprints body under c with a context that ends after
// its first look, and returns the error and the work done: the bytes read
// and every counted step.
func stoppedWork(c *Compiled, mediaType string, body []byte) (int, error) {
	st := c.get(&endsAfter{Context: context.Background(), looks: 1})
	defer c.put(st)
	st.work, st.sc.work, st.sc.fold.work, st.fold.work, st.sc.pos = 0, 0, 0, 0, 0
	_, err := c.appendCanonical(st, nil, Input{MediaType: mediaType, Body: body})
	return st.sc.pos + st.work + st.sc.work + st.sc.fold.work + st.fold.work, err
}

// A 1 MiB hostile body whose client hangs up once the first KiB has been
// read costs no more than a few KiB of work: the fingerprint looks at the
// context at the start and every checkEvery bytes, and stops at the first
// look that finds it done.
func TestFingerprintStopsWhenTheContextEnds(t *testing.T) {
	const bound = 4 * checkEvery
	whole, fields := mustCompile(t, Spec{}), mustCompile(t, Spec{Body: pointerFields()})
	for _, tc := range []struct {
		kind   string
		c      *Compiled
		media  string
		shapes []hostileBody
	}{
		{"JSON, whole", whole, jsonType, hostileJSON},
		{"JSON, fields", fields, jsonType, hostilePointerBodies},
		{"form", whole, formType, hostileForms},
	} {
		for _, shape := range tc.shapes {
			body := shape.build(1 << 20)
			work, err := stoppedWork(tc.c, tc.media, body)
			t.Logf("%s, %s: %d steps", tc.kind, shape.name, work)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s, %s: %v, want the context's end", tc.kind, shape.name, err)
			}
			if work > bound {
				t.Errorf("%s, %s: %d steps after the client left, want at most %d", tc.kind, shape.name, work, bound)
			}
		}
	}
}

// Without a context that ends, the same bodies are read to the end: the
// bound above is the context's doing.
func TestFingerprintReadsOnWhileTheContextLasts(t *testing.T) {
	c := mustCompile(t, Spec{})
	body := hostileJSON[1].build(1 << 20)
	if _, err := c.SumContext(context.Background(), Input{MediaType: jsonType, Body: body}); err != nil {
		t.Fatal(err)
	}
	st := c.get(&endsAfter{Context: context.Background(), looks: 1 << 30})
	defer c.put(st)
	if _, err := c.appendCanonical(st, nil, Input{MediaType: jsonType, Body: body}); err != nil {
		t.Fatal(err)
	}
	if st.sc.pos != len(body) {
		t.Errorf("read %d of %d bytes", st.sc.pos, len(body))
	}
}
