package cli

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/pgoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/sqliteoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// stagingOutbox is an outbox a handler stages in.
type stagingOutbox interface {
	idemoutbox.Store
	Stage(ctx context.Context, name string, payload []byte) error
}

// outboxOf migrates and returns the outbox of st's database.
func outboxOf(t *testing.T, st keysStore) stagingOutbox {
	ctx := context.Background()
	switch st.name {
	case "sqlite":
		s := st.store.(*sqlitestore.Store)
		if err := sqliteoutbox.Migrate(ctx, s.DB()); err != nil {
			t.Fatal(err)
		}
		return sqliteoutbox.New(s, idemoutbox.Options{})
	case "postgres":
		pool, err := pgxpool.New(ctx, st.url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		if err := pgoutbox.Migrate(ctx, pool); err != nil {
			t.Fatal(err)
		}
		return pgoutbox.New(pool, idemoutbox.Options{})
	}
	return nil
}

// An operator finds a key's effects with show and effects, sees the dead
// one, and re-drives it; the runner then delivers it.
func TestKeysEffects(t *testing.T) {
	t.Setenv(envLabelSecret, testSecret)
	eachKeysStore(t, func(t *testing.T, st keysStore) {
		if strings.HasPrefix(st.name, "redis") {
			if code, _, errOut := st.keys(t, "", "effects", "--state", "dead"); code != 1 || !strings.Contains(errOut, "no outbox") {
				t.Fatalf("effects on Redis: exit %d, stderr %s; want a failure saying it has no outbox", code, errOut)
			}
			return
		}
		ctx := context.Background()
		ob := outboxOf(t, st)
		e, err := idem.New(idem.Config{
			Store: st.store,
			Policies: []idem.Policy{idemtest.Policy("createTransfer", "/transfers", func(p *idem.Policy) {
				p.Transactional, p.OnLeaseExpiry = true, idemstore.Takeover
			})},
			Tenant:         func(*http.Request) (string, bool) { return "acme", true },
			KeyLabelSecret: []byte(testSecret),
		})
		if err != nil {
			t.Fatal(err)
		}
		h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			err := errors.Join(ob.Stage(r.Context(), "receipt", []byte(`{"to":"ann@example.com"}`)),
				ob.Stage(r.Context(), "webhook", []byte{0xff, 0x00}))
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
		}))
		r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(`{}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", "order-7")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusCreated {
			t.Fatalf("request: %d %s", rec.Code, rec.Body)
		}
		// The receipt is delivered; the webhook's receiver refuses it
		// until it is dead.
		runner, err := idemoutbox.NewRunner(idemoutbox.Config{Store: ob, MaxAttempts: 1, Poll: 10 * time.Millisecond,
			Deliver: func(_ context.Context, m idemoutbox.Message) error {
				if m.Name == "webhook" {
					return errors.New("502 from the merchant")
				}
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		drain(t, runner, ob)
		label := idemstore.KeyLabel([]byte(testSecret), "order-7")

		code, out, errOut := st.keys(t, "", "show", "--label", label)
		if code != 0 || !strings.Contains(out, "effects:") || !strings.Contains(out, "receipt") || !strings.Contains(out, "delivered") ||
			!strings.Contains(out, "dead") || !strings.Contains(out, "502 from the merchant") {
			t.Fatalf("show: exit %d, stdout %s, stderr %s; want both effects", code, out, errOut)
		}
		code, out, _ = st.keys(t, "", "show", "--label", label, "--json")
		var shownKey jsonShown
		if code != 0 || json.Unmarshal([]byte(out), &shownKey) != nil || len(shownKey.Effects) != 2 ||
			shownKey.Label != label || shownKey.Effects[0].Label != label || len(shownKey.Effects[0].EffectKey) != idem.EffectKeyLength ||
			shownKey.Effects[0].Payload == nil || shownKey.Effects[1].PayloadBase64 == nil {
			t.Fatalf("show --json: exit %d, %s", code, out)
		}

		code, out, _ = st.keys(t, "", "stats", "--json")
		var stats jsonStatsOut
		if code != 0 || json.Unmarshal([]byte(out), &stats) != nil || stats.Effects == nil || stats.Effects.Dead != 1 || stats.Effects.Pending != 0 {
			t.Fatalf("stats --json: exit %d, %s; want the one dead effect", code, out)
		}
		if code, out, _ := st.keys(t, "", "stats"); code != 0 || !strings.Contains(out, "effects: 0 pending") || !strings.Contains(out, "1 dead") {
			t.Fatalf("stats: exit %d, %s", code, out)
		}
		code, out, _ = st.keys(t, "", "effects", "--state", "dead", "--json")
		var dead []jsonEffect
		if code != 0 || json.Unmarshal([]byte(out), &dead) != nil || len(dead) != 1 || dead[0].Name != "webhook" || dead[0].Attempts != 1 {
			t.Fatalf("effects --state dead: exit %d, %s", code, out)
		}
		id := strconv.FormatInt(dead[0].ID, 10)
		if code, _, errOut := st.keys(t, "", "redrive", "--effect", strconv.FormatInt(shownKey.Effects[0].ID, 10), "--yes"); code != 1 || !strings.Contains(errOut, "not dead") {
			t.Fatalf("redrive of a delivered effect: exit %d, stderr %s", code, errOut)
		}
		if code, _, errOut := st.keys(t, "n\n", "redrive", "--effect", id); code != 1 || !strings.Contains(errOut, "Proceed?") {
			t.Fatalf("redrive declined: exit %d, stderr %s", code, errOut)
		}
		if code, out, errOut := st.keys(t, "y\n", "redrive", "--effect", id); code != 0 || !strings.Contains(out, "re-drove effect "+id) {
			t.Fatalf("redrive: exit %d, stdout %s, stderr %s", code, out, errOut)
		}
		ms, err := ob.List(ctx, idemoutbox.Query{States: []idemoutbox.State{idemoutbox.StatePending}})
		if err != nil || len(ms) != 1 || ms[0].Name != "webhook" || ms[0].Attempts != 0 {
			t.Fatalf("after redrive pending = %+v, %v", ms, err)
		}
		if code, out, _ := st.keys(t, "", "effects", "--tenant", "acme", "--state", "dead"); code != 0 || !strings.Contains(out, "no effects") {
			t.Fatalf("effects --state dead after redrive: exit %d, %s", code, out)
		}
	})
}

// drain runs r until ob has no pending effect.
func drain(t *testing.T, r *idemoutbox.Runner, ob idemoutbox.Store) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		_ = r.Run(ctx)
		close(done)
	}()
	defer func() {
		cancel()
		<-done
	}()
	for range 3000 {
		ms, err := ob.List(context.Background(), idemoutbox.Query{States: []idemoutbox.State{idemoutbox.StatePending}})
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			return
		}
		<-time.After(10 * time.Millisecond)
	}
	t.Fatal("the runner left effects pending")
}
