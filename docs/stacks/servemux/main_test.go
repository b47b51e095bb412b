package main

import (
	"testing"

	"github.com/idemgen/idemgen/docs/stacks/stacktest"
)

// TestRetryIsReplayed: the page's two curl commands, in process. The same
// order sent twice under one key is placed once, and the second answer is
// the first, marked replayed.
func TestRetryIsReplayed(t *testing.T) {
	store := stacktest.OpenStore(t, schema)
	handler, err := newHandler(store)
	if err != nil {
		t.Fatal(err)
	}
	stacktest.RetryIsReplayed(t, handler, store)
}
