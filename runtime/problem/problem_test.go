package problem_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/problem"
)

// Every answer has a name, a status, a title and a detail; client docs
// describe each (status, name) a client can act on exactly once, with
// both what it means and what to do.
func TestAnswersAreComplete(t *testing.T) {
	documented := map[string]problem.Answer{}
	for _, a := range problem.Answers() {
		if a.Name() == "" || http.StatusText(a.Status()) == "" || a.Title() == "" || a.Format() == "" {
			t.Errorf("answer %d is incomplete: %q %d %q %q", a, a.Name(), a.Status(), a.Title(), a.Format())
		}
		if (a.Meaning() == "") != (a.Advice() == "") {
			t.Errorf("%s (%d): meaning %q and advice %q must be set together", a.Name(), a.Status(), a.Meaning(), a.Advice())
		}
		if a.Meaning() == "" {
			continue
		}
		k := http.StatusText(a.Status()) + " " + a.Name()
		if b, dup := documented[k]; dup {
			t.Errorf("answers %d and %d both describe %s for client docs", b, a, k)
		}
		documented[k] = a
	}
}

// A title is shared by every answer of one name and status, so that a
// client reading titles never tells apart what the name does not.
func TestOneTitlePerNameAndStatus(t *testing.T) {
	titles := map[string]string{}
	for _, a := range problem.Answers() {
		k := a.Name() + " " + http.StatusText(a.Status())
		if t0, ok := titles[k]; ok && t0 != a.Title() {
			t.Errorf("%s has titles %q and %q", k, t0, a.Title())
		}
		titles[k] = a.Title()
	}
}

// Detail fills a format's verbs and leaves a detail without any as it is.
func TestDetailFillsVerbs(t *testing.T) {
	if got := problem.BodyTooBig.Detail(int64(1 << 20)); got != "The request body is larger than 1048576 bytes." {
		t.Errorf("BodyTooBig.Detail = %q", got)
	}
	for _, a := range problem.Answers() {
		if !strings.Contains(a.Format(), "%") && a.Detail() != a.Format() {
			t.Errorf("%s: Detail() = %q, want the format as it is", a.Name(), a.Detail())
		}
	}
}
