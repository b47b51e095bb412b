package cli

import (
	"fmt"
	"io"
	"mime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemstore"
)

// shownKey is the key as the operator asked to see it, made safe for a
// terminal (a label read off a stored HMAC is as the row holds it).
func shownKey(e idemadmin.Entry, showKeys bool) string {
	return shown(rawKey(e, showKeys))
}

// labelUnknown stands for the label of a key stored in clear when the
// label secret was not given; no label looks like it.
const labelUnknown = "(unknown)"

// rawKey is the key as the operator asked to see it.
func rawKey(e idemadmin.Entry, showKeys bool) string {
	switch {
	case showKeys:
		return e.Key
	case e.Label == "":
		return labelUnknown
	}
	return e.Label
}

func printList(w io.Writer, es []idemadmin.Entry, showKeys bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	col := "LABEL"
	if showKeys {
		col = "KEY"
	}
	fmt.Fprintf(tw, "%s\tTENANT\tOPERATION\tSTATE\tAGE\tEXPIRES IN\tSTATUS\tVERSION\n", col)
	for _, e := range es {
		status := "-"
		if e.Status != 0 {
			status = fmt.Sprint(e.Status)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(rawKey(e, showKeys)), cell(e.Tenant), cell(e.Operation),
			stateWords(e), age(e.ReadAt.Sub(e.CreatedAt)), age(e.ExpiresAt.Sub(e.ReadAt)), status, e.Version)
	}
	_ = tw.Flush()
	if len(es) == 0 {
		fmt.Fprintln(w, "(no keys)")
	}
	if !showKeys && slices.ContainsFunc(es, func(e idemadmin.Entry) bool { return e.Label == "" }) {
		fmt.Fprintln(w, "(labels "+labelUnknown+": give the service's label secret with $"+envLabelSecret+" or --label-secret-file to match them with its logs)")
	}
}

// stateWords is the state with what an operator needs to know about it.
func stateWords(e idemadmin.Entry) string {
	s := shown(string(e.State))
	switch {
	case e.Expired():
		s += " (expired)"
	case e.State == idemstore.StateInFlight && !e.LeaseRunning():
		s += " (lease ran out)"
	}
	return s
}

func printEntry(w io.Writer, e idemadmin.Entry, showKeys bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("label", shown(rawKey(e, false)))
	if showKeys {
		row("key", shown(e.Key))
	}
	row("tenant", shown(e.Tenant))
	row("scope", scopeWords(e.Scope))
	row("operation", shown(e.Operation))
	row("state", stateWords(e))
	row("version", e.Version)
	row("resolvable", fmt.Sprint(e.Resolvable()))
	row("created", stamp(e.CreatedAt, e.ReadAt))
	row("expires", stamp(e.ExpiresAt, e.ReadAt))
	if !e.LeaseUntil.IsZero() {
		row("lease until", stamp(e.LeaseUntil, e.ReadAt))
	}
	if !e.CompletedAt.IsZero() {
		row("completed", stamp(e.CompletedAt, e.ReadAt))
	}
	row("fingerprint", fmt.Sprintf("%x", e.Fingerprint))
	if e.Status != 0 {
		row("status", fmt.Sprint(e.Status))
	}
	names := make([]string, 0, len(e.Header))
	for name := range e.Header {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		for _, v := range e.Header[name] {
			row("header", shown(name)+": "+shown(v))
		}
	}
	_ = tw.Flush()
	switch text, isText := bodyText(e); {
	case e.BodyOmitted:
		fmt.Fprintln(w, "body: (larger than the snapshot limit; not kept, replays answer 409)")
	case e.State != idemstore.StateCompleted:
	case e.Sealed:
		fmt.Fprintf(w, "body: sealed, %d bytes (give the service's seal keys with --seal-key to read it)\n", len(e.Body))
	case isText:
		fmt.Fprintf(w, "body (%d bytes):\n%s\n", len(e.Body), text)
	default:
		fmt.Fprintf(w, "body: %d bytes, not text (--json gives it in base64)\n", len(e.Body))
	}
}

func scopeWords(scope string) string {
	if scope == "" {
		return `"" (tenant-wide)`
	}
	return shown(scope)
}

// stamp is t in UTC and relative to now (the store's clock).
func stamp(t, now time.Time) string {
	d := t.Sub(now)
	rel := age(-d) + " ago"
	if d > 0 {
		rel = "in " + age(d)
	}
	return t.UTC().Format(time.RFC3339Nano) + " (" + rel + ")"
}

// bodyText returns the stored body as text when it is text: valid UTF-8
// under a text-like (or absent) Content-Type, with no control character
// but tabs and line ends and no bidi control (unsafeRune). A carriage
// return only ends a line: alone it would hide what comes before it.
func bodyText(e idemadmin.Entry) (string, bool) {
	if ct := e.Header.Get("Content-Type"); ct != "" {
		mt, _, _ := mime.ParseMediaType(ct)
		if !strings.HasPrefix(mt, "text/") && !strings.HasSuffix(mt, "json") && !strings.HasSuffix(mt, "xml") &&
			mt != "application/x-www-form-urlencoded" {
			return "", false
		}
	}
	if !utf8.Valid(e.Body) {
		return "", false
	}
	body := string(e.Body)
	for i, r := range body {
		switch {
		case r == '\n', r == '\t':
		case r == '\r' && strings.HasPrefix(body[i+1:], "\n"):
		case unsafeRune(r):
			return "", false
		}
	}
	return string(e.Body), true
}

// jsonEntry is an entry as --json prints it.
type jsonEntry struct {
	Label       string              `json:"label"`
	Key         string              `json:"key,omitempty"`
	Tenant      string              `json:"tenant"`
	Scope       string              `json:"scope"`
	Operation   string              `json:"operation"`
	State       string              `json:"state"`
	Version     string              `json:"version"`
	Expired     bool                `json:"expired"`
	Resolvable  bool                `json:"resolvable"`
	CreatedAt   time.Time           `json:"created_at"`
	ExpiresAt   time.Time           `json:"expires_at"`
	LeaseUntil  *time.Time          `json:"lease_until,omitempty"`
	CompletedAt *time.Time          `json:"completed_at,omitempty"`
	Fingerprint string              `json:"fingerprint"`
	Status      int                 `json:"status,omitempty"`
	BodyBytes   int                 `json:"body_bytes"`
	BodyOmitted bool                `json:"body_omitted,omitempty"`
	Sealed      bool                `json:"sealed,omitempty"`
	Headers     map[string][]string `json:"headers,omitempty"`
	// Body is the body as text; BodyBase64 when it is not text.
	Body       *string `json:"body,omitempty"`
	BodyBase64 []byte  `json:"body_base64,omitempty"`
}

func jsonEntries(es []idemadmin.Entry, showKeys, whole bool) []jsonEntry {
	out := make([]jsonEntry, 0, len(es))
	for _, e := range es {
		j := jsonEntry{
			Label: e.Label, Tenant: e.Tenant, Scope: e.Scope, Operation: e.Operation, State: string(e.State),
			Version: e.Version, Expired: e.Expired(), Resolvable: e.Resolvable(),
			CreatedAt: e.CreatedAt.UTC(), ExpiresAt: e.ExpiresAt.UTC(), Fingerprint: fmt.Sprintf("%x", e.Fingerprint),
			Status: e.Status, BodyBytes: e.BodyBytes, BodyOmitted: e.BodyOmitted, Sealed: e.Sealed,
		}
		if showKeys {
			j.Key = e.Key
		}
		if !e.LeaseUntil.IsZero() {
			t := e.LeaseUntil.UTC()
			j.LeaseUntil = &t
		}
		if !e.CompletedAt.IsZero() {
			t := e.CompletedAt.UTC()
			j.CompletedAt = &t
		}
		if whole {
			j.Headers = e.Header
			if e.Body != nil {
				if text, ok := bodyText(e); ok {
					j.Body = &text
				} else {
					j.BodyBase64 = e.Body
				}
			}
		}
		out = append(out, j)
	}
	return out
}

type jsonStatsOut struct {
	Counts []struct {
		Operation string `json:"operation"`
		State     string `json:"state"`
		Keys      int64  `json:"keys"`
	} `json:"counts"`
	OldestInFlight *jsonEntry `json:"oldest_in_flight,omitempty"`
	Expired        int64      `json:"expired_awaiting_sweep"`
	ReadAt         time.Time  `json:"read_at"`
	// Effects is the outbox's backlog; absent where there is no outbox.
	Effects *jsonBacklog `json:"effects,omitempty"`
}

// jsonBacklog is the outbox's backlog as stats --json prints it.
type jsonBacklog struct {
	Pending              int64   `json:"pending"`
	Dead                 int64   `json:"dead"`
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
}

func jsonStats(st idemadmin.Stats, showKeys bool) jsonStatsOut {
	out := jsonStatsOut{Expired: st.Expired, ReadAt: st.ReadAt.UTC()}
	out.Counts = make([]struct {
		Operation string `json:"operation"`
		State     string `json:"state"`
		Keys      int64  `json:"keys"`
	}, len(st.Counts))
	for i, c := range st.Counts {
		out.Counts[i].Operation, out.Counts[i].State, out.Counts[i].Keys = c.Operation, string(c.State), c.Keys
	}
	if st.OldestInFlight != nil {
		out.OldestInFlight = &jsonEntries([]idemadmin.Entry{*st.OldestInFlight}, showKeys, false)[0]
	}
	return out
}

func printStats(w io.Writer, st idemadmin.Stats, showKeys bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATION\tSTATE\tKEYS")
	for _, c := range st.Counts {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", cell(c.Operation), cell(string(c.State)), c.Keys)
	}
	_ = tw.Flush()
	if o := st.OldestInFlight; o != nil {
		fmt.Fprintf(w, "oldest in flight: %s (%s, tenant %s), claimed %s\n", shownKey(*o, showKeys), shown(o.Operation), shown(o.Tenant), stamp(o.CreatedAt, o.ReadAt))
	} else {
		fmt.Fprintln(w, "oldest in flight: none")
	}
	fmt.Fprintf(w, "expired, awaiting the sweeper: %d\n", st.Expired)
}
