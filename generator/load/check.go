package load

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	yaml "go.yaml.in/yaml/v4"

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/runtime/key"
)

// opCheck resolves and checks the policy of one annotated operation. The
// checks are split by what they look at: parameters (params.go), the
// request body (body.go) and responses (responses.go).
type opCheck struct {
	l        *loader
	r        reporter
	op       *model.Operation
	kinOp    *openapi3.Operation
	opNode   *yaml.Node
	itemNode *yaml.Node
	own, def *layer
	// requiredSet is true when the extension sets required (at the
	// operation or the document level); otherwise the spec's own answer
	// for the key, where it gives one, is the policy's (keyDeclared).
	requiredSet bool
}

// fmtDuration writes a duration the way the extension spells it (7d, 1h30m).
func fmtDuration(d time.Duration) string {
	var b strings.Builder
	for _, u := range []struct {
		d time.Duration
		s string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if n := d / u.d; n > 0 {
			fmt.Fprintf(&b, "%d%s", n, u.s)
			d -= n * u.d
		}
	}
	if b.Len() == 0 {
		return d.String()
	}
	return b.String()
}

// resolve merges the operation's overrides over the document's defaults
// over the built-in defaults, then checks the result against the operation.
func (c *opCheck) resolve() {
	own, def, at := c.own, c.def, c.own.pos
	p := &c.op.Policy

	scope, _ := pick(own.scope, def.scope, defaultScope, at)
	p.Scope = model.Scope(scope)
	key, keyPos := pick(own.key, def.key, keySource{key.InHeader, defaultKeyHeader}, at)
	p.KeyIn, p.KeyName = key.in, key.name
	p.KeyMaxLength, _ = pick(own.keyMaxLength, def.keyMaxLength, defaultKeyMaxLength, at)
	var requiredPos model.Pos
	p.Required, requiredPos = pick(own.required, def.required, false, at)
	c.requiredSet = own.required.ok || def.required.ok
	p.TTL, _ = pick(own.ttl, def.ttl, defaultTTL, at)
	p.Lease, _ = pick(own.lease, def.lease, defaultLease, at)
	p.ClientRetryBudget, _ = pick(own.clientRetryBudget, def.clientRetryBudget, 0, at)
	p.MaxSnapshotBytes, _ = pick(own.maxSnapshotBytes, def.maxSnapshotBytes, defaultMaxSnapshotBytes, at)
	replay, _ := pick(own.replayHeaders, def.replayHeaders, nil, at)
	for _, h := range replay {
		p.ReplayHeaders = append(p.ReplayHeaders, h.v)
	}
	slices.Sort(p.ReplayHeaders)
	p.CacheServerErrors, _ = pick(own.cacheServerErrors, def.cacheServerErrors, false, at)
	p.Transactional, _ = pick(own.transactional, def.transactional, false, at)
	onExpiryDefault := model.FailClosed
	if p.Transactional {
		onExpiryDefault = model.Takeover
	}
	onExpiry, onExpiryPos := pick(own.onLeaseExpiry, def.onLeaseExpiry, string(onExpiryDefault), at)
	p.OnLeaseExpiry = model.LeaseExpiry(onExpiry)

	p.Effects, _ = pick(own.effects, def.effects, nil, at)

	c.l.checkLifetimes(false, scoped{own, c.r}, scoped{def, c.l.report("")})
	c.checkEffects()
	if p.OnLeaseExpiry == model.Takeover && !p.Transactional && (own.onLeaseExpiry.ok || def.onLeaseExpiry.ok) {
		c.r.warnf(onExpiryPos, "onLeaseExpiry", "takeover without transactional: a retry that takes over an abandoned claim runs the handler again, so any effect the first attempt already made happens twice")
	}

	c.recordAlias()

	params := c.parameters()
	c.checkKeyParam(params, key, keyPos, requiredPos)
	c.checkQuery(params, key)
	c.checkBody(key, keyPos, requiredPos)
	c.checkResponses()
	c.validate()
}
