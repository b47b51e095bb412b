package memstore

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

var (
	_ idemstore.PhaseStore  = (*Store)(nil)
	_ idemstore.PhaseLister = (*Store)(nil)
)

// phaseID names one phase of one request.
type phaseID struct {
	idemstore.Identity
	name string
}

// phaseRow is a recorded phase.
type phaseRow struct {
	result                []byte
	recordedAt, expiresAt time.Time
}

// LoadPhase implements idemstore.PhaseStore.
func (s *Store) LoadPhase(ctx context.Context, id idemstore.Identity, name string) ([]byte, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.phases[phaseID{id, name}]
	if !ok || !p.expiresAt.After(s.now()) {
		return nil, false, nil
	}
	return clone(p.result), true, nil
}

// RecordPhase implements idemstore.PhaseStore: under the store's mutex,
// the first record of a phase stands.
func (s *Store) RecordPhase(ctx context.Context, id idemstore.Identity, name string, result []byte, ttl time.Duration) ([]byte, error) {
	if err := idemstore.CheckPhase(name, result, ttl); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now, k := s.now(), phaseID{id, name}
	if p, ok := s.phases[k]; ok && p.expiresAt.After(now) {
		return clone(p.result), nil
	}
	if s.phases == nil {
		s.phases = make(map[phaseID]phaseRow)
	}
	s.phases[k] = phaseRow{result: clone(result), recordedAt: now, expiresAt: now.Add(ttl)}
	return clone(result), nil
}

// PhasesBesideTx implements idemstore.PhaseStore; the store has no
// transactions.
func (s *Store) PhasesBesideTx() bool { return true }

// sweepPhases deletes at most limit expired phases; s.mu is held.
func (s *Store) sweepPhases(now time.Time, limit int) int {
	n := 0
	for k, p := range s.phases {
		if n == limit {
			break
		}
		if !p.expiresAt.After(now) {
			delete(s.phases, k)
			n++
		}
	}
	return n
}

func clone(b []byte) []byte { return append([]byte{}, b...) }

// ListPhases implements idemstore.PhaseLister, by name.
func (s *Store) ListPhases(ctx context.Context, id idemstore.Identity) ([]idemstore.PhaseRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var out []idemstore.PhaseRecord
	for k, p := range s.phases {
		if k.Identity == id && p.expiresAt.After(now) {
			out = append(out, idemstore.PhaseRecord{Name: k.name, Bytes: len(p.result), RecordedAt: p.recordedAt, ExpiresAt: p.expiresAt})
		}
	}
	slices.SortFunc(out, func(a, b idemstore.PhaseRecord) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
