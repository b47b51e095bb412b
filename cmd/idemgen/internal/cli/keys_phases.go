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

// keyPhases lists the recovery points the request of e recorded
// (idem.Phase), or none when the store keeps no phases. They are found
// under the row's own key and fingerprint, which are the ones they were
// recorded under unless the row was written under a newer secret than
// the service's oldest (during a rotation).
func (s *session) keyPhases(ctx context.Context, e idemadmin.Entry) ([]idemstore.PhaseRecord, error) {
	if s.phases == nil {
		return nil, nil
	}
	ps, err := s.phases.ListPhases(ctx, idemstore.PhaseIdentity(e.Identity, e.Operation, e.Fingerprint))
	if err != nil {
		return nil, failure{fmt.Sprintf("list the key's phases: %v", err)}
	}
	return ps, nil
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
