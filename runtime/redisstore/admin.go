package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/internal/headerwire"
)

// The operator's side (idemadmin.Store). A record's name is a hash of its
// identity, so listing walks the prefix with SCAN on every primary and
// reads each record with readScript: an operator's command costs a round
// trip per record under the prefix, which is what SCAN costs anyway. Times
// are read from Redis's clock (or the test clock), as leases and expiry
// are; a change is one script, fenced as the SQL stores fence theirs.

var _ idemadmin.Store = (*Store)(nil)

// readFields are the record's fields an entry shows, in readScript's
// order after the clock and the body's length.
var readFields = []string{"st", "op", "fp", "tok", "lu", "ex", "tn", "sp", "ky", "ca", "ct", "sc", "om"}

// readScript reads one record: the clock, the body's length and
// readFields, then the headers and the body when ARGV[2] is "1". Absent
// fields are false, which reaches Go as nil: a Lua nil would cut the reply
// short.
//
//	KEYS[1] the record
//	ARGV    now-or-"", whole ("1" or "")
var readScript = redis.NewScript(preamble + `
local out = {int(now), redis.call('HSTRLEN', KEYS[1], 'bd')}
local f = redis.call('HMGET', KEYS[1], 'st', 'op', 'fp', 'tok', 'lu', 'ex', 'tn', 'sp', 'ky', 'ca', 'ct', 'sc', 'om')
for i = 1, 13 do out[i + 2] = f[i] or false end
if ARGV[2] == '1' then
  local c = redis.call('HMGET', KEYS[1], 'hd', 'bd')
  out[16], out[17] = c[1] or false, c[2] or false
end
return out
`)

// settleScript is the fence of an operator's change, the same as the SQL
// stores': the record the operator was shown (same state, same lease
// token), still live, and not a claim whose lease still runs. It answers 1
// when it changed the record and 0 otherwise.
//
// Completing keeps the lease token, so that a late completion from the
// abandoned request finds the record no longer in flight and is fenced.
// Forgetting leaves the tombstone a release leaves: every claim takes it
// for absent, except a late copy of the abandoned claim itself.
//
//	KEYS[1] the record
//	ARGV    now-or-"", state, token, complete ("1" or ""), status,
//	        headers, body
var settleScript = redis.NewScript(preamble + `
local key = KEYS[1]
local r = redis.call('HMGET', key, 'st', 'tok', 'lu', 'ex')
if not r[1] or r[1] ~= ARGV[2] or (r[2] or '') ~= ARGV[3] then return 0 end
if tonumber(r[4]) <= now then return 0 end
if r[1] == 'in_flight' and tonumber(r[3]) > now then return 0 end
redis.call('HDEL', key, 'tko', 'cn')
if ARGV[4] == '1' then
  redis.call('HSET', key, 'st', 'completed', 'lu', '0', 'ct', int(now),
    'sc', ARGV[5], 'hd', ARGV[6], 'bd', ARGV[7], 'om', '0')
else
  redis.call('HDEL', key, 'sc', 'hd', 'bd', 'om', 'ct')
  redis.call('HSET', key, 'st', 'released', 'lu', '0')
end
return 1
`)

// Scan implements idemadmin.Store. Records are read in full before fn
// sees the first one, since SCAN returns them in no order.
func (s *Store) Scan(ctx context.Context, q idemadmin.Query, fn func(idemadmin.Entry) bool) error {
	all, err := s.entries(ctx)
	if err != nil {
		return fmt.Errorf("redisstore: scan keys: %w", err)
	}
	out := slices.DeleteFunc(all, func(e idemadmin.Entry) bool { return !selects(q, e) })
	slices.SortFunc(out, func(a, b idemadmin.Entry) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.Tenant, b.Tenant),
			cmp.Compare(a.Scope, b.Scope), cmp.Compare(a.Key, b.Key))
	})
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	for _, e := range out {
		if !fn(e) {
			return nil
		}
	}
	return nil
}

// selects reports whether q selects e, as the SQL stores' WHERE clauses do.
func selects(q idemadmin.Query, e idemadmin.Entry) bool {
	switch {
	case len(q.States) > 0 && !slices.Contains(q.States, e.State),
		q.Tenant != "" && e.Tenant != q.Tenant,
		q.Operation != "" && e.Operation != q.Operation,
		q.OlderThan > 0 && e.CreatedAt.After(e.ReadAt.Add(-q.OlderThan)),
		q.ExpiringWithin > 0 && e.ExpiresAt.After(e.ReadAt.Add(q.ExpiringWithin)),
		!q.IncludeExpired && e.Expired():
		return false
	}
	return true
}

// entries returns every record under the prefix, on every master, except
// released tombstones, which stand for no key. A cluster's masters are
// listed by onMasters' rule: a listing that a failover or a reshard left
// incomplete is made again where the records are, or fails; it is never
// returned short.
func (s *Store) entries(ctx context.Context) ([]idemadmin.Entry, error) {
	match := globEscape(s.prefix) + "{*}"
	list := func(ctx context.Context, node *redis.Client) ([]idemadmin.Entry, error) {
		var out []idemadmin.Entry
		iter := node.Scan(ctx, 0, match, 1000).Iterator()
		for iter.Next(ctx) {
			e, found, err := s.read(ctx, node, iter.Val(), false)
			if err != nil {
				return nil, err
			}
			if found {
				out = append(out, e)
			}
		}
		return out, iter.Err()
	}
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		return onMasters(ctx, c, list)
	case *redis.Client:
		return list(ctx, c)
	}
	return nil, fmt.Errorf("cannot list the records of a %T", s.client)
}

// globEscape makes the prefix match only itself in a SCAN pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// read reads the record named key through c; found is false when there is
// none, or only a released tombstone.
func (s *Store) read(ctx context.Context, c redis.Scripter, key string, whole bool) (e idemadmin.Entry, found bool, err error) {
	flag := ""
	if whole {
		flag = "1"
	}
	v, err := readScript.Run(ctx, c, []string{key}, s.clockArg(), flag).Slice()
	if err != nil {
		return e, false, err
	}
	if len(v) < 2+len(readFields) {
		return e, false, fmt.Errorf("record %s: reply has %d fields", key, len(v))
	}
	f := make([]string, len(v))
	for i, x := range v {
		switch x := x.(type) {
		case string:
			f[i] = x
		case int64:
			f[i] = strconv.FormatInt(x, 10)
		}
	}
	field := func(name string) string { return f[2+slices.Index(readFields, name)] }
	st := field("st")
	if st == "" || st == "released" {
		return e, false, nil
	}
	e = idemadmin.Entry{
		Identity:    idemstore.Identity{Tenant: field("tn"), Scope: field("sp"), Key: field("ky")},
		Operation:   field("op"),
		State:       idemstore.State(st),
		Fingerprint: []byte(field("fp")),
		Token:       field("tok"),
		BodyOmitted: field("om") == "1",
	}
	times := []struct {
		name string
		at   *time.Time
	}{{"", &e.ReadAt}, {"ex", &e.ExpiresAt}, {"ca", &e.CreatedAt}, {"lu", &e.LeaseUntil}, {"ct", &e.CompletedAt}}
	for i, t := range times {
		raw := f[0]
		if i > 0 {
			raw = field(t.name)
		}
		if raw == "" || raw == "0" {
			continue
		}
		us, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return e, false, fmt.Errorf("record %s: %s %q: %w", key, t.name, raw, err)
		}
		*t.at = time.UnixMicro(us).UTC()
	}
	if e.State != idemstore.StateInFlight {
		e.LeaseUntil = time.Time{}
	}
	if e.BodyBytes, err = strconv.Atoi(f[1]); err != nil {
		return e, false, fmt.Errorf("record %s: body length %q: %w", key, f[1], err)
	}
	if sc := field("sc"); sc != "" {
		if e.Status, err = strconv.Atoi(sc); err != nil {
			return e, false, fmt.Errorf("record %s: status %q: %w", key, sc, err)
		}
	}
	if whole && e.State == idemstore.StateCompleted {
		h, err := headerwire.Decode([]byte(f[2+len(readFields)]))
		if err != nil {
			return e, false, fmt.Errorf("record %s: stored headers: %w", key, err)
		}
		e.Header, e.Body = h, []byte(f[3+len(readFields)])
	}
	return e, true, nil
}

// Get implements idemadmin.Store.
func (s *Store) Get(ctx context.Context, id idemstore.Identity) (idemadmin.Entry, error) {
	e, found, err := s.read(ctx, s.client, s.Key(id), true)
	if err != nil {
		return idemadmin.Entry{}, fmt.Errorf("redisstore: get key: %w", err)
	}
	if !found {
		return idemadmin.Entry{}, idemadmin.ErrNotFound
	}
	// The record's name is the identity's hash, so a record read by
	// name is id's even if it predates the identity fields.
	e.Identity = id
	return e, nil
}

// Settle implements idemadmin.Store.
func (s *Store) Settle(ctx context.Context, seen idemadmin.Entry, resp *idemstore.Response) error {
	args := []any{s.clockArg(), string(seen.State), seen.Token, "", "", "", ""}
	if resp != nil {
		args[3], args[4], args[5], args[6] = "1", resp.Status, headerwire.Encode(resp.Header), resp.Body
	}
	n, err := s.run(ctx, settleScript, s.Key(seen.Identity), args...).Int()
	if err != nil {
		return fmt.Errorf("redisstore: settle key: %w", err)
	}
	if n == 0 {
		return idemadmin.ErrChanged
	}
	return nil
}

// Stats implements idemadmin.Store. Redis deletes a record when it
// expires, so Expired counts only records a test clock has outlived, or
// that Redis has not yet removed.
func (s *Store) Stats(ctx context.Context) (idemadmin.Stats, error) {
	var st idemadmin.Stats
	counts := map[idemadmin.Count]int64{}
	all, err := s.entries(ctx)
	if err != nil {
		return idemadmin.Stats{}, fmt.Errorf("redisstore: stats: %w", err)
	}
	for _, e := range all {
		if e.ReadAt.After(st.ReadAt) {
			st.ReadAt = e.ReadAt
		}
		if e.Expired() {
			st.Expired++
			continue
		}
		counts[idemadmin.Count{Operation: e.Operation, State: e.State}]++
	}
	if st.ReadAt.IsZero() {
		if st.ReadAt, err = s.clock(ctx); err != nil {
			return idemadmin.Stats{}, fmt.Errorf("redisstore: stats: %w", err)
		}
	}
	for c, n := range counts {
		c.Keys = n
		st.Counts = append(st.Counts, c)
	}
	slices.SortFunc(st.Counts, func(a, b idemadmin.Count) int {
		return cmp.Or(cmp.Compare(a.Operation, b.Operation), cmp.Compare(a.State, b.State))
	})
	return st, nil
}

// clock is the time leases and expiry are measured by.
func (s *Store) clock(ctx context.Context) (time.Time, error) {
	if s.now != nil {
		return s.now().UTC(), nil
	}
	t, err := s.client.Time(ctx).Result()
	return t.UTC(), err
}
