package cli

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemstore"
)

// Notes show prints for the phases of a key it cannot list them for
// (keyPhases), each beginning with phasesCannot.
const (
	phasesCannot     = "phases cannot be listed"
	phasesUnstated   = phasesCannot + ": none are recorded under the key's own secret, and the effect secret is not stated (--effect-secret-file, or --unkeyed-effect-keys)"
	phasesOther      = phasesCannot + " for a key written under a secret other than the effect secret"
	phasesOtherMaybe = phasesOther + "; pass --key to tell whether this one was"
)

// effectFlags are show's flags that state the secret the service derives
// effect keys and names phases under: idem.Config.EffectSecret, or
// idem.Config.UnkeyedEffectKeys for none.
type effectFlags struct {
	secretFile string
	unkeyed    bool
}

func (f *effectFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.secretFile, "effect-secret-file", "", "`file` holding the effect secret (idem.Config.EffectSecret), whether or not it is among the store secrets, so that show lists the phases a request recorded")
	fl.BoolVar(&f.unkeyed, "unkeyed-effect-keys", false, "the service derives effect keys with no secret (idem.Config.UnkeyedEffectKeys), so that show lists the phases a request recorded")
}

// check refuses both flags at once, as idem.New refuses both fields.
func (f *effectFlags) check() error {
	if f.secretFile != "" && f.unkeyed {
		return usageError{errors.New("--effect-secret-file and --unkeyed-effect-keys are both given; a service derives effect keys under one secret or under none")}
	}
	return nil
}

// effectSecret is the secret a service derives effect keys and names
// phases under, as show's flags state it.
type effectSecret struct {
	// stated is set when a flag stated it; show then knows under which
	// key and fingerprint the phases are recorded.
	stated bool
	// secret is empty for a service with UnkeyedEffectKeys.
	secret []byte
}

// effect reads the effect secret the flags state.
func (f *effectFlags) effect() (effectSecret, error) {
	if f.unkeyed {
		return effectSecret{stated: true}, nil
	}
	if f.secretFile == "" {
		return effectSecret{}, nil
	}
	b, err := readSecret(f.secretFile)
	if err != nil {
		return effectSecret{}, failure{fmt.Sprintf("effect secret: %v", err)}
	}
	if len(b) == 0 {
		return effectSecret{}, usageError{errors.New("--effect-secret-file: the file is empty; for a service that derives effect keys with no secret give --unkeyed-effect-keys")}
	}
	return effectSecret{stated: true, secret: b}, nil
}

// keyPhases lists the recovery points the request of e recorded
// (idem.Phase), or none when the store keeps no phases; k is the client's
// key when the operator gave it, else "". The engine records phases under
// the request's key and fingerprint as its effect secret stores them
// (docs/semantics.md §8.1), which are the row's own only when the row was
// written under that secret. When show cannot tell that the phases it
// looked for are the request's and finds none, it returns a note saying
// so rather than an empty list an operator would read as "no call made".
func (s *session) keyPhases(ctx context.Context, e idemadmin.Entry, k string, effect effectSecret) ([]idemstore.PhaseRecord, string, error) {
	if s.phases == nil {
		return nil, "", nil
	}
	id, note := phaseIdentity(e, k, effect)
	ps, err := s.phases.ListPhases(ctx, id)
	if err != nil {
		return nil, "", failure{fmt.Sprintf("list the key's phases: %v", err)}
	}
	if len(ps) > 0 {
		// Phases under an identity are recorded by a request of that
		// key and fingerprint, whichever secret stated them.
		return ps, "", nil
	}
	return nil, note, nil
}

// phaseIdentity is the identity the phases of e's request are looked for
// under, and the note to print if none are: "" when they are recorded
// there if anywhere. A row written with no secret holds the client's key
// and the request's fingerprint as they are, from which those under any
// effect secret follow; a row written under a secret holds them as its
// HMACs, which are those under the effect secret only if the row was
// written under it, as k tells.
func phaseIdentity(e idemadmin.Entry, k string, effect effectSecret) (idemstore.Identity, string) {
	own := idemstore.PhaseIdentity(e.Identity, e.Operation, e.Fingerprint)
	var sum [sha256.Size]byte
	switch {
	case !effect.stated:
		return own, phasesUnstated
	case !idemstore.IsStoredHMAC(e.Key) && len(e.Fingerprint) == len(sum):
		sec := idemstore.NewSecret(effect.secret)
		copy(sum[:], e.Fingerprint)
		fp := sec.Fingerprint(sum)
		id := e.Identity
		id.Key = sec.Key(e.Key)
		return idemstore.PhaseIdentity(id, e.Operation, fp[:]), ""
	case len(effect.secret) > 0 && k != "" && e.Key == idemstore.StoredKey(effect.secret, k):
		return own, ""
	case len(effect.secret) > 0 && k == "":
		return own, phasesOtherMaybe
	}
	return own, phasesOther
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
