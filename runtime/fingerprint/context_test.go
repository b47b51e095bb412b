package fingerprint

import (
	"context"
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
