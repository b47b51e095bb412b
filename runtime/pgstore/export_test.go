package pgstore

import "time"

// GuardQuiet reports whether s's guard has nothing queued or being sent.
func GuardQuiet(s *Store) bool { return s.guard.quiet() }

// SetGuardIdleClose sets how long s's guard connection stays open while
// idle.
func SetGuardIdleClose(s *Store, d time.Duration) {
	s.guard.mu.Lock()
	defer s.guard.mu.Unlock()
	s.guard.idleClose = d
}
