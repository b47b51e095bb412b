package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/problem"
)

func newKeysList(kf *keysFlags, stdout io.Writer) *cobra.Command {
	var (
		q      idemadmin.Query
		states []string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List stored keys, oldest first",
		Example: `  idemgen keys list --state indeterminate
  idemgen keys list --operation createTransfer --older-than 1h --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkList(cmd, q); err != nil {
				return err
			}
			for _, s := range states {
				st, err := parseState(s)
				if err != nil {
					return usageError{err}
				}
				q.States = append(q.States, st)
			}
			var err error
			if q.Operation, err = kf.storedName(q.Operation); err != nil {
				return err
			}
			return kf.run(cmd, func(ctx context.Context, s *session) error {
				// Without the secret the rows are still listed: only the
				// labels of keys stored in clear are unknown.
				if err := s.needSecret(q.Label != ""); err != nil {
					return err
				}
				es, err := s.admin.List(ctx, q)
				if err != nil {
					return failure{err.Error()}
				}
				if kf.json {
					return writeJSON(stdout, jsonEntries(es, kf.showKeys, false))
				}
				printList(stdout, es, kf.showKeys)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&states, "state", nil, "only keys in these `states`: "+stateList(", "))
	f.StringVar(&q.Tenant, "tenant", "", "only keys of this `tenant`")
	f.StringVar(&q.Operation, "operation", "", "only keys of this operation `ID`")
	f.StringVar(&q.Label, "label", "", "only the key with this `label` (from the service's logs)")
	f.DurationVar(&q.OlderThan, "older-than", 0, "only keys claimed at least this `long` ago")
	f.DurationVar(&q.ExpiringWithin, "expiring-within", 0, "only keys that expire within this `time`")
	f.BoolVar(&q.IncludeExpired, "include-expired", false, "also list expired keys the sweeper has not deleted yet")
	f.IntVar(&q.Limit, "limit", 100, "list at most `n` keys (0: all)")
	return cmd
}

// checkList refuses filters that would select more than the operator
// wrote: an empty value selects everything, as does a negative bound.
func checkList(cmd *cobra.Command, q idemadmin.Query) error {
	if err := notEmpty(cmd, "tenant", "operation", "label"); err != nil {
		return err
	}
	switch {
	case q.Limit < 0:
		return usageError{fmt.Errorf("--limit %d is negative; 0 lists all keys", q.Limit)}
	case q.OlderThan < 0:
		return usageError{fmt.Errorf("--older-than %s is negative", q.OlderThan)}
	case q.ExpiringWithin < 0:
		return usageError{fmt.Errorf("--expiring-within %s is negative", q.ExpiringWithin)}
	}
	return nil
}

// notEmpty refuses the named flags given with an empty value (a script's
// unset variable): left out, they select everything.
func notEmpty(cmd *cobra.Command, names ...string) error {
	for _, name := range names {
		if f := cmd.Flags().Lookup(name); f != nil && f.Changed && f.Value.String() == "" {
			return usageError{fmt.Errorf("--%s is empty; leave it out to mean any", name)}
		}
	}
	return nil
}

// needSecret refuses to work with labels that cannot match the service's.
func (s *session) needSecret(labels bool) error {
	if labels && !s.hasSecret {
		return failure{"key labels need the service's label secret: set $" + envLabelSecret + " or --label-secret-file, or use --show-keys"}
	}
	return nil
}

func parseState(s string) (idemstore.State, error) {
	if st := idemstore.State(strings.ReplaceAll(s, "-", "_")); slices.Contains(idemstore.States(), st) {
		return st, nil
	}
	return "", fmt.Errorf("unknown state %q: use one of %s", s, stateList(", "))
}

// stateList joins the states a key can be in with sep.
func stateList(sep string) string {
	var names []string
	for _, st := range idemstore.States() {
		names = append(names, string(st))
	}
	return strings.Join(names, sep)
}

// which names one key: by label, or by tenant, scope and key.
type which struct {
	label, tenant, operation, scope, key string
}

func (w *which) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&w.label, "label", "", "the key's `label`, as the service logs it")
	f.StringVar(&w.tenant, "tenant", "", "the key's `tenant`")
	f.StringVar(&w.operation, "operation", "", "narrows --label to one operation `ID`")
	f.StringVar(&w.scope, "scope", "", "the key's `scope`: its operation ID, or empty for a tenant-scoped key (with --key)")
	f.StringVar(&w.key, "key", "", "the `key` itself (with --tenant and --scope)")
}

// check refuses a key named both ways, or half, or with a flag the way it
// is named would ignore; it runs before the store is opened.
func (w *which) check(cmd *cobra.Command) error {
	changed := cmd.Flags().Changed
	switch {
	case w.label != "" && w.key == "":
		if changed("scope") {
			return usageError{errors.New("--scope goes with --key; narrow --label with --tenant or --operation")}
		}
		return notEmpty(cmd, "tenant", "operation")
	case w.label == "" && w.key != "" && w.tenant != "" && changed("scope"):
		if changed("operation") {
			return usageError{errors.New("--operation narrows --label; with --key, --scope names the key")}
		}
		return nil
	}
	return usageError{errors.New("name the key with --label, or with --tenant, --scope and --key")}
}

// find reads the key w names; check has accepted w.
func (w *which) find(ctx context.Context, s *session) (idemadmin.Entry, error) {
	var (
		e   idemadmin.Entry
		err error
	)
	if w.label != "" {
		if err := s.needSecret(true); err != nil {
			return e, err
		}
		op, nerr := s.storedName(w.operation)
		if nerr != nil {
			return e, nerr
		}
		e, err = s.admin.Find(ctx, w.label, idemadmin.Query{Tenant: w.tenant, Operation: op})
	} else {
		e, err = s.admin.Show(ctx, idemstore.Identity{Tenant: w.tenant, Scope: w.scope, Key: w.key})
	}
	if err != nil {
		return e, failure{err.Error()}
	}
	return e, nil
}

func newKeysShow(kf *keysFlags, stdout io.Writer) *cobra.Command {
	var (
		w  which
		ef effectFlags
	)
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Show one key: state, times, lease, stored response, version, phases, effects",
		Long: `show prints one key whole, with the recovery points its request recorded
(idem.Phase) and the effects it staged in the outbox (see effects). Its version fingerprints the key's state and
lease token: resolve --expect takes it, so that a resolution changes only
the row that was shown.

Phases are recorded under the key and fingerprint as the service's effect
secret stores them. Give it with --effect-secret-file, or
--unkeyed-effect-keys for a service that sets idem.Config.UnkeyedEffectKeys.
When show finds no phase and cannot tell that it looked where the request
recorded them (the effect secret not stated, a row written under another
secret, or one written under a secret without --key to tell which), it
prints a note that phases cannot be listed, never an empty list: the
request may have made any of its calls.`,
		Example: `  idemgen keys show --label hmac:3f9a0c2b7d41e8a65b10`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := w.check(cmd); err != nil {
				return err
			}
			if err := ef.check(); err != nil {
				return err
			}
			effect, err := ef.effect()
			if err != nil {
				return err
			}
			return kf.run(cmd, func(ctx context.Context, s *session) error {
				e, err := w.find(ctx, s)
				if err != nil {
					return err
				}
				ms, err := s.keyEffects(ctx, e)
				if err != nil {
					return err
				}
				ps, note, err := s.keyPhases(ctx, e, w.key, effect)
				if err != nil {
					return err
				}
				if kf.json {
					return writeJSON(stdout, jsonShown{jsonEntries([]idemadmin.Entry{e}, kf.showKeys, true)[0], s.jsonEffects(ms, kf.showKeys), jsonPhases(ps), note})
				}
				printEntry(stdout, e, kf.showKeys)
				if note != "" {
					fmt.Fprintln(stdout, "phases: "+note)
				}
				if len(ps) > 0 {
					fmt.Fprintln(stdout, "phases:")
					printPhases(stdout, ps)
				}
				if len(ms) > 0 {
					fmt.Fprintln(stdout, "effects:")
					s.printEffects(stdout, ms, kf.showKeys)
				}
				return nil
			})
		},
	}
	w.register(cmd)
	ef.register(cmd)
	return cmd
}

func newKeysResolve(kf *keysFlags, stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	var (
		w                  which
		expect             string
		status             int
		headers            []string
		body, bodyFile     string
		forget, yes, given bool
	)
	cmd := &cobra.Command{
		Use:   "resolve",
		Short: "Resolve a key whose outcome is unknown: complete it with a response, or forget it",
		Long: "resolve settles a key that answers " + problem.OutcomeUnknown + `: an indeterminate key,
or an in-flight key whose lease ran out. Find out what its request did, then
either

  complete it (--status, --header, --body or --body-file) with the response
  the request should have had: every retry replays it; or
  forget it (--forget): the key is deleted and the next retry runs the
  operation. Only when the operation had no effect.

--expect is the version that show printed: the key is changed only if its
state and lease token are still those shown. resolve asks for confirmation
unless --yes is given.`,
		Example: `  idemgen keys resolve --label hmac:3f9a0c2b7d41e8a65b10 --expect 9c1e04d2a7f3 \
      --status 201 --header 'Content-Type: application/json' --body-file transfer.json
  idemgen keys resolve --label hmac:3f9a0c2b7d41e8a65b10 --expect 9c1e04d2a7f3 --forget`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			given = cmd.Flags().Changed("status")
			if err := w.check(cmd); err != nil {
				return err
			}
			if expect == "" {
				return usageError{errors.New("--expect is required: the version that idemgen keys show printed")}
			}
			if forget == given {
				return usageError{errors.New("give either --status (with --header, --body or --body-file) or --forget")}
			}
			if forget && (len(headers) > 0 || body != "" || bodyFile != "") {
				return usageError{errors.New("--forget takes no response")}
			}
			if bodyFile == "-" && !yes {
				// Standard input carries the body, so it cannot carry the
				// answer to the confirmation too.
				return usageError{errors.New("--body-file - needs --yes: standard input holds the body, not a confirmation")}
			}
			var resp idemstore.Response
			if given {
				var err error
				if resp, err = response(stdin, status, headers, body, bodyFile); err != nil {
					return err
				}
			}
			return kf.run(cmd, func(ctx context.Context, s *session) error {
				e, err := w.find(ctx, s)
				if err != nil {
					return err
				}
				// A key that changed, or cannot be resolved, is refused
				// before the operator is asked to confirm anything.
				if err := e.Settleable(expect); err != nil {
					return failure{err.Error()}
				}
				what := fmt.Sprintf("complete it with status %d and a %d-byte body; retries will replay that", resp.Status, len(resp.Body))
				if forget {
					what = "forget it; the next retry runs the operation again"
				}
				if !yes && !confirm(stdin, stderr, fmt.Sprintf("Key %s (%s, tenant %s, %s): %s. Proceed? [y/N] ",
					shownKey(e, kf.showKeys), shown(e.Operation), shown(e.Tenant), shown(string(e.State)), what)) {
					return failure{"not resolved"}
				}
				if forget {
					err = s.admin.Forget(ctx, e.Identity, expect)
				} else {
					err = s.admin.Resolve(ctx, e.Identity, expect, resp)
				}
				if err != nil {
					return failure{err.Error()}
				}
				if forget {
					fmt.Fprintf(stdout, "forgot %s\n", shownKey(e, kf.showKeys))
				} else {
					fmt.Fprintf(stdout, "resolved %s: completed with status %d\n", shownKey(e, kf.showKeys), resp.Status)
				}
				return nil
			})
		},
	}
	w.register(cmd)
	f := cmd.Flags()
	f.StringVar(&expect, "expect", "", "the `version` show printed; the key must not have changed since")
	f.IntVar(&status, "status", 0, "complete the key with this HTTP `status`")
	f.StringArrayVar(&headers, "header", nil, "a response `header` 'Name: value' to replay (repeatable)")
	f.StringVar(&body, "body", "", "the response `body` to replay")
	f.StringVar(&bodyFile, "body-file", "", "read the response body from `file` (- for stdin, with --yes)")
	f.BoolVar(&forget, "forget", false, "delete the key instead: the next retry runs the operation")
	f.BoolVar(&yes, "yes", false, "do not ask for confirmation")
	return cmd
}

// response builds the operator's resolution from the flags.
func response(stdin io.Reader, status int, headers []string, body, bodyFile string) (idemstore.Response, error) {
	resp := idemstore.Response{Status: status, Header: make(http.Header), Body: []byte(body)}
	for _, h := range headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return resp, usageError{fmt.Errorf("--header %q is not 'Name: value'", h)}
		}
		resp.Header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	if bodyFile != "" {
		if body != "" {
			return resp, usageError{errors.New("give --body or --body-file, not both")}
		}
		var err error
		if bodyFile == "-" {
			resp.Body, err = io.ReadAll(stdin)
		} else {
			resp.Body, err = os.ReadFile(bodyFile)
		}
		if err != nil {
			return resp, failure{fmt.Sprintf("--body-file: %v", err)}
		}
	}
	if err := idemadmin.CheckResponse(resp); err != nil {
		return resp, usageError{err}
	}
	return resp, nil
}

// confirm asks question on w and reads a yes from r.
func confirm(r io.Reader, w io.Writer, question string) bool {
	fmt.Fprint(w, question)
	line, _ := bufio.NewReader(r).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

func newKeysStats(kf *keysFlags, stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "stats",
		Short: "Count keys by state and operation; the oldest in flight; expired rows awaiting the sweeper; the outbox's backlog",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return kf.run(cmd, func(ctx context.Context, s *session) error {
				st, err := s.admin.Stats(ctx)
				if err != nil {
					return failure{err.Error()}
				}
				b, err := s.backlog(ctx)
				if err != nil {
					return err
				}
				if kf.json {
					out := jsonStats(st, kf.showKeys)
					if b != nil {
						out.Effects = &jsonBacklog{Pending: b.Pending, Dead: b.Dead, OldestPendingSeconds: b.OldestPending.Seconds()}
					}
					return writeJSON(stdout, out)
				}
				printStats(stdout, st, kf.showKeys)
				if b != nil {
					oldest := ""
					if b.Pending > 0 {
						oldest = fmt.Sprintf(" (the oldest staged %s ago)", age(b.OldestPending))
					}
					fmt.Fprintf(stdout, "effects: %d pending%s, %d dead\n", b.Pending, oldest, b.Dead)
				}
				return nil
			})
		},
	}
}

// age is d rounded for a person to read.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + age(-d)
	case d < time.Minute:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Minute).String()
	}
}
