package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
)

func newKeysEffects(kf *keysFlags, stdout io.Writer) *cobra.Command {
	var (
		w      which
		states []string
		limit  int
	)
	cmd := &cobra.Command{
		Use:   "effects",
		Short: "List the effects staged in the outbox: one key's, or all of some states",
		Long: `effects lists the effects requests staged in the transactional outbox
(runtime/idemoutbox), oldest first: those of one key (named as show names
it), or every effect of the states given, such as the dead ones, whose
every delivery attempt failed. redrive makes a dead one pending again.`,
		Example: `  idemgen keys effects --state dead
  idemgen keys effects --label hmac:3f9a0c2b7d41e8a65b10 --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var q idemoutbox.Query
			for _, s := range states {
				st, err := parseEffectState(s)
				if err != nil {
					return usageError{err}
				}
				q.States = append(q.States, st)
			}
			if limit < 0 {
				return usageError{fmt.Errorf("--limit %d is negative; 0 lists all effects", limit)}
			}
			q.Limit = limit
			oneKey := w.label != "" || w.key != ""
			if oneKey {
				if err := w.check(cmd); err != nil {
					return err
				}
			} else if err := notEmpty(cmd, "tenant"); err != nil {
				return err
			}
			return kf.run(cmd, func(ctx context.Context, s *session) error {
				if oneKey {
					e, err := w.find(ctx, s)
					if err != nil {
						return err
					}
					q.Tenant, q.Scope, q.Key = e.Tenant, e.Scope, e.Key
				} else {
					q.Tenant = w.tenant
				}
				ms, err := s.effects(ctx, q)
				if err != nil {
					return err
				}
				if kf.json {
					return writeJSON(stdout, s.jsonEffects(ms, kf.showKeys))
				}
				s.printEffects(stdout, ms, kf.showKeys)
				return nil
			})
		},
	}
	w.register(cmd)
	f := cmd.Flags()
	f.StringSliceVar(&states, "state", nil, "only effects in these `states`: pending, delivered, dead")
	f.IntVar(&limit, "limit", 100, "list at most `n` effects (0: all)")
	return cmd
}

func newKeysRedrive(kf *keysFlags, stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	var (
		id  int64
		yes bool
	)
	cmd := &cobra.Command{
		Use:   "redrive",
		Short: "Make a dead effect pending again, with its attempts counted from zero",
		Long: `redrive makes a dead effect of the outbox (every delivery attempt failed)
pending again: the service's runners deliver it anew, with its attempts
counted from zero and the same effect key. Fix what refused it first.
redrive asks for confirmation unless --yes is given.`,
		Example: `  idemgen keys redrive --effect 42`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if id <= 0 {
				return usageError{errors.New("--effect is required: the id that idemgen keys effects printed")}
			}
			return kf.run(cmd, func(ctx context.Context, s *session) error {
				ms, err := s.effects(ctx, idemoutbox.Query{ID: id})
				switch {
				case err != nil:
					return err
				case len(ms) == 0:
					return failure{fmt.Sprintf("no effect %d", id)}
				case ms[0].State != idemoutbox.StateDead:
					return failure{fmt.Sprintf("effect %d is %s, not dead", id, ms[0].State)}
				}
				m := ms[0]
				if !yes && !confirm(stdin, stderr, fmt.Sprintf("Effect %d (%s of key %s, tenant %s, %d attempts, last error %s): deliver it again. Proceed? [y/N] ",
					id, shown(m.Name), s.effectKeyLabel(m, kf.showKeys), shown(m.Tenant), m.Attempts, shown(m.LastError))) {
					return failure{"not re-driven"}
				}
				if err := s.outbox.Redrive(ctx, id); err != nil {
					return failure{err.Error()}
				}
				fmt.Fprintf(stdout, "re-drove effect %d: pending\n", id)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.Int64Var(&id, "effect", 0, "the effect's `id`, as effects prints it")
	f.BoolVar(&yes, "yes", false, "do not ask for confirmation")
	return cmd
}

func parseEffectState(s string) (idemoutbox.State, error) {
	switch st := idemoutbox.State(s); st {
	case idemoutbox.StatePending, idemoutbox.StateDelivered, idemoutbox.StateDead:
		return st, nil
	}
	return "", fmt.Errorf("unknown effect state %q: use pending, delivered or dead", s)
}

// effects lists the outbox's effects q selects.
func (s *session) effects(ctx context.Context, q idemoutbox.Query) ([]idemoutbox.Message, error) {
	if s.outbox == nil {
		return nil, failure{"the Redis store has no outbox: effects are staged on PostgreSQL and SQLite"}
	}
	ms, err := s.outbox.List(ctx, q)
	if err != nil {
		return nil, failure{err.Error()}
	}
	return ms, nil
}

// keyEffects are the effects of e's key, for show: none when the store
// has no outbox, or its database no outbox table.
func (s *session) keyEffects(ctx context.Context, e idemadmin.Entry) ([]idemoutbox.Message, error) {
	if s.outbox == nil {
		return nil, nil
	}
	ms, err := s.outbox.List(ctx, idemoutbox.Query{Tenant: e.Tenant, Scope: e.Scope, Key: e.Key})
	if errors.Is(err, idemoutbox.ErrNoOutbox) {
		return nil, nil
	}
	if err != nil {
		return nil, failure{err.Error()}
	}
	return ms, nil
}

// keyLabel is the label of the key of m's request, as the Admin labels
// entries, and false when it cannot be known: a key stored in clear, with
// no label secret given.
func (s *session) keyLabel(m idemoutbox.Message) (string, bool) {
	if len(s.labelSecret) == 0 && !idemstore.IsStoredHMAC(m.Key) {
		return "", false
	}
	return idemstore.StoredKeyLabel(s.labelSecret, m.Key), true
}

// backlog is the outbox's backlog, nil when the store has no outbox or
// its database no outbox table.
func (s *session) backlog(ctx context.Context) (*idemoutbox.Backlog, error) {
	if s.outbox == nil {
		return nil, nil
	}
	b, err := s.outbox.Backlog(ctx)
	switch {
	case errors.Is(err, idemoutbox.ErrNoOutbox):
		return nil, nil
	case err != nil:
		return nil, failure{err.Error()}
	}
	return &b, nil
}

// effectKeyLabel names the key of m's request as list and show name keys.
func (s *session) effectKeyLabel(m idemoutbox.Message, showKeys bool) string {
	if showKeys {
		return shown(m.Key)
	}
	if l, ok := s.keyLabel(m); ok {
		return shown(l)
	}
	return "(no label: give the label secret)"
}

// printEffects prints ms as a table.
func (s *session) printEffects(w io.Writer, ms []idemoutbox.Message, showKeys bool) {
	if len(ms) == 0 {
		fmt.Fprintln(w, "no effects")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATE\tATTEMPTS\tSTAGED\tDELIVERED/NEXT\tKEY\tLAST ERROR")
	for _, m := range ms {
		when := m.NextAttemptAt
		if m.State == idemoutbox.StateDelivered {
			when = m.DeliveredAt
		}
		next := cell(when.UTC().Format(time.RFC3339))
		if m.State == idemoutbox.StateDead {
			next = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", m.ID, cell(m.Name), m.State, m.Attempts,
			m.CreatedAt.UTC().Format(time.RFC3339), next, cell(s.effectKeyLabel(m, showKeys)), shown(m.LastError))
	}
	_ = tw.Flush()
}

// jsonShown is a key as show --json prints it: the entry, its effects
// and its recorded phases.
type jsonShown struct {
	jsonEntry
	Effects []jsonEffect `json:"effects,omitempty"`
	Phases  []jsonPhase  `json:"phases,omitempty"`
	// PhasesNote says why phases could not be listed (keyPhases).
	PhasesNote string `json:"phases_note,omitempty"`
}

// jsonEffect is an effect as --json prints it.
type jsonEffect struct {
	ID            int64      `json:"id"`
	Label         string     `json:"key_label,omitempty"`
	Key           string     `json:"key,omitempty"`
	Tenant        string     `json:"tenant"`
	Scope         string     `json:"scope"`
	Name          string     `json:"name"`
	EffectKey     string     `json:"effect_key"`
	State         string     `json:"state"`
	Attempts      int        `json:"attempts"`
	CreatedAt     time.Time  `json:"created_at"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	LeasedUntil   *time.Time `json:"leased_until,omitempty"`
	DeliveredAt   *time.Time `json:"delivered_at,omitempty"`
	LastError     string     `json:"last_error,omitempty"`
	// Payload is the payload as text; PayloadBase64 when it is not text.
	Payload       *string `json:"payload,omitempty"`
	PayloadBase64 []byte  `json:"payload_base64,omitempty"`
}

func (s *session) jsonEffects(ms []idemoutbox.Message, showKeys bool) []jsonEffect {
	out := make([]jsonEffect, 0, len(ms))
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		u := t.UTC()
		return &u
	}
	for _, m := range ms {
		j := jsonEffect{
			ID: m.ID, Tenant: m.Tenant, Scope: m.Scope, Name: m.Name, EffectKey: m.EffectKey,
			State: string(m.State), Attempts: m.Attempts, CreatedAt: m.CreatedAt.UTC(),
			LeasedUntil: at(m.LeasedUntil), DeliveredAt: at(m.DeliveredAt), LastError: m.LastError,
		}
		if m.State == idemoutbox.StatePending {
			j.NextAttemptAt = at(m.NextAttemptAt)
		}
		if showKeys {
			j.Key = m.Key
		}
		j.Label, _ = s.keyLabel(m)
		if text := string(m.Payload); utf8.ValidString(text) && printable(strings.NewReplacer("\n", "", "\t", "").Replace(text)) {
			j.Payload = &text
		} else {
			j.PayloadBase64 = m.Payload
		}
		out = append(out, j)
	}
	return out
}
