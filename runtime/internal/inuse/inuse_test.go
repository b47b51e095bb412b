package inuse

import "testing"

// A value is held by one request at a time: a second Enter while it is
// held is refused, and once it is let go it can be held again.
func TestSetHoldsAValueOnce(t *testing.T) {
	var s Set[*int]
	a, b := new(int), new(int)
	if !s.Enter(a) || !s.Enter(b) {
		t.Fatal("Enter of values nobody holds was refused")
	}
	if s.Enter(a) {
		t.Fatal("Enter of a held value was allowed")
	}
	s.Leave(a)
	if !s.Enter(a) {
		t.Fatal("Enter of a value let go was refused")
	}
	if s.Enter(b) {
		t.Fatal("Enter of the other held value was allowed")
	}
}
