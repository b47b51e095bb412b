// Package describe turns policy values into the short phrases that
// generated comments and the generated API documentation share, so that
// both always say the same thing.
package describe

import (
	"fmt"
	"time"

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/runtime/key"
)

// Words spells d for people, in the largest unit that states it
// exactly: "7 days", "24 hours", "90 seconds", "1 minute".
func Words(d time.Duration) string {
	day := 24 * time.Hour
	units := []struct {
		d          time.Duration
		one, other string
	}{
		{day, "day", "days"},
		{time.Hour, "hour", "hours"},
		{time.Minute, "minute", "minutes"},
		{time.Second, "second", "seconds"},
	}
	for _, u := range units {
		// A single day reads as 24 hours, the way people say it.
		if d <= 0 || d%u.d != 0 || (u.d == day && d == day) {
			continue
		}
		n := int64(d / u.d)
		if n == 1 {
			return "1 " + u.one
		}
		return fmt.Sprintf("%d %s", n, u.other)
	}
	return d.String()
}

// Size spells n bytes in the largest binary unit that states it exactly:
// 1 MiB, 64 KiB, 1000 bytes.
func Size(n int64) string {
	units := []struct {
		shift uint
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}}
	for _, u := range units {
		if n > 0 && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
	}
	if n == 1 {
		return "1 byte"
	}
	return fmt.Sprintf("%d bytes", n)
}

// KeySource says where a policy's key is carried: "the Idempotency-Key
// header".
func KeySource(p model.Policy) string {
	switch p.KeyIn {
	case key.InBody:
		return "the body field " + p.KeyName
	case key.InQuery:
		return "the " + p.KeyName + " query parameter"
	default:
		return "the " + p.KeyName + " header"
	}
}

// Scope says across which operations a key is unique.
func Scope(p model.Policy) string {
	if p.Scope == model.ScopeTenant {
		return "unique per tenant across operations"
	}
	return "unique per tenant and operation"
}

// Summary is a one-phrase account of a policy: its key, scope and TTL.
func Summary(p model.Policy) string {
	need := "an optional"
	if p.Required {
		need = "a required"
	}
	return fmt.Sprintf("%s key in %s, %s, remembered for %s", need, KeySource(p), Scope(p), Words(p.TTL))
}
