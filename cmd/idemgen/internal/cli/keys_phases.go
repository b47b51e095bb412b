package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemstore"
)

// phasesUnlisted is what show prints for the phases of a key it cannot
// list them for (keyPhases).
const phasesUnlisted = "phases cannot be listed for a key written under a secret other than the effect secret (the last --secret-file)"

// keyPhases lists the recovery points the request of e recorded
// (idem.Phase), or none when the store keeps no phases; k is the client's
// key when the operator gave it, else "". The engine records phases under
// the request's key and fingerprint as its effect secret
// (idem.Config.EffectSecret, which the operator gives as the last
// --secret-file) stores them (docs/semantics.md §8.1), which are the
// row's own unless the row was written under another secret (a newer one,
// after a rotation). The fingerprint under the effect secret cannot be had
// from the row's, so the phases of such a row cannot be listed: keyPhases
// then returns a note saying so rather than an empty list an operator
// would read as "no call made".
func (s *session) keyPhases(ctx context.Context, e idemadmin.Entry, k string) ([]idemstore.PhaseRecord, string, error) {
	if s.phases == nil {
		return nil, "", nil
	}
	ps, err := s.phases.ListPhases(ctx, idemstore.PhaseIdentity(e.Identity, e.Operation, e.Fingerprint))
	if err != nil {
		return nil, "", failure{fmt.Sprintf("list the key's phases: %v", err)}
	}
	if len(ps) > 0 || !s.newerSecret(e, k) {
		return ps, "", nil
	}
	if k == "" {
		// With the client's key, show can tell whether the row was
		// written under the effect secret, whose phases it lists.
		return nil, phasesUnlisted + "; pass --key to tell whether this one was", nil
	}
	return nil, phasesUnlisted, nil
}

// newerSecret reports whether e's row may have been written under a store
// secret other than the effect secret, the last the operator gave: with
// k, whether its stored key is not k's under it; without, whether there
// is more than one secret and the key is stored as an HMAC.
func (s *session) newerSecret(e idemadmin.Entry, k string) bool {
	if len(s.secrets) < 2 || !idemstore.IsStoredHMAC(e.Key) {
		return false
	}
	return k == "" || e.Key != idemstore.StoredKey(s.secrets[len(s.secrets)-1], k)
}

// printPhases prints recorded phases as a table.
func printPhases(w io.Writer, ps []idemstore.PhaseRecord) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PHASE\tBYTES\tRECORDED\tEXPIRES")
	for _, p := range ps {
		recorded := "-"
		if !p.RecordedAt.IsZero() {
			recorded = p.RecordedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", cell(p.Name), p.Bytes, recorded, p.ExpiresAt.UTC().Format(time.RFC3339))
	}
	_ = tw.Flush()
}

// jsonPhase is a recorded phase as --json prints it.
type jsonPhase struct {
	Name       string     `json:"name"`
	Bytes      int        `json:"bytes"`
	RecordedAt *time.Time `json:"recorded_at,omitempty"`
	ExpiresAt  time.Time  `json:"expires_at"`
}

func jsonPhases(ps []idemstore.PhaseRecord) []jsonPhase {
	out := make([]jsonPhase, 0, len(ps))
	for _, p := range ps {
		j := jsonPhase{Name: p.Name, Bytes: p.Bytes, ExpiresAt: p.ExpiresAt.UTC()}
		if !p.RecordedAt.IsZero() {
			at := p.RecordedAt.UTC()
			j.RecordedAt = &at
		}
		out = append(out, j)
	}
	return out
}
