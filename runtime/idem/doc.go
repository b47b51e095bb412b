// Package idem makes retried requests safe: it enforces the x-idempotency
// policies that idemgen generates, in front of an API's handlers.
//
// # A request's life
//
// An Engine is built once (New) from the generated policies. The files
// below are named in the order one request first reaches them, its
// branches followed as they stand in the code (a test walks the calls and
// holds this list to it):
//
//   - mount.go: Engine.Middleware takes the request, or Engine.Handler,
//     mounted on one route; route.go finds its operation by method and
//     path template. A path routers could read two ways is refused before
//     any policy applies.
//   - problem.go, observe.go, label.go: every refusal and failure is a
//     Problem whose name, status and wording come from runtime/problem's
//     table; every request ends as an Event for the Observer, which names
//     its key only by a label.
//   - serve.go: serve admits the request and follows admission's verdict.
//   - admit.go, body.go, newclaim.go, effect.go: admission reads the
//     tenant, the key, the body (whole, within MaxRequestBytes, as the
//     media type the operation declares) and the fingerprint, and builds
//     the claim. Under Config.Secrets its key and fingerprint are HMACs,
//     and while secrets rotate it carries the claims the same request
//     would have made under each older one; effect.go names the request
//     for its effect keys. Nothing so far touched the store. The verdict
//     is admitted, keyless, refused, or gone: the client hung up while its
//     body was read.
//   - gone.go: a client that hung up before its claim is answered 503,
//     and nothing is claimed for it.
//   - await.go: serveKeyed claims the key; a request that met its key in
//     flight may wait for the answer (Config.DuplicateWait, at most
//     Config.DuplicateWaiters of them for one key) and claim again.
//   - claim.go, rotation.go, storecall.go: the claim asks the store for
//     the key (the words claim, hold, release, abandon and settle are
//     defined in docs/semantics.md §9), committed on its own or inside the
//     handler's transaction. While secrets rotate it claims the key under
//     each older secret too, so that a row written under one answers the
//     request (rotation.go). Every store call has its context and its time
//     taken, and a store that fails is answered 503 (storecall.go).
//   - answer.go, retryafter.go: a lost claim is answered from the row it
//     met: the stored response replayed, a key reused refused, 409 while
//     the key is in flight, with a Retry-After that follows the
//     handler's time.
//   - run.go, applied.go, capture.go, hold.go: a won claim is a hold. The
//     handler runs under it, its context marked with the policy applied
//     (applied.go), its response captured whole.
//   - end.go, lazytx.go: the handler's outcome ends the hold. A storable
//     response is snapshotted (and sealed) and completes it before a byte
//     reaches the client; an answer not stored (a passing condition, or a
//     4xx the handler marked with NotExecuted) releases it; a panic or no
//     answer abandons it. lazytx.go holds the transaction of a handler
//     seen writing around it, begun only if the handler asks.
//   - keyless.go: a request without a key is refused when its policy
//     requires one; otherwise its handler runs unprotected, or, on a
//     transactional operation, through run.go under a transaction and no
//     claim.
//
// # Roles
//
// A Store keeps one row per (tenant, scope, key) and never waits on
// another claim: it claims, completes, releases and abandons, each fenced
// by the claim's lease token. A Transactor is a Store that can hold the
// claim inside a database transaction which it hands to the handler, so
// that the handler's writes and the key's completion commit together. The
// engine decides; stores only record, and runtime/storetest holds them all
// to the same contract. Both interfaces, the rows they record and the
// at-rest protection of those rows live in runtime/idemstore, which stores
// and runtime/idemadmin import without the engine, under those names only
// (idemstore.Store, idemstore.Takeover).
//
// # Beside the request path
//
// Before any request: config.go builds the Engine (New) from the policies
// of policy.go and the effects they declare (declared.go); secret.go
// checks Config.Secrets and chooses the effect secret; tenant.go reads
// the tenant of a single-tenant API; headers.go says which response
// headers are always replayed.
// servemux.go and servemux_refused.go give each route its policy as it is
// registered on a ServeMux (runtime/idemchi does the same for chi), and
// check.go (CheckRoutes) proves a router applies every policy.
//
// From inside a request, a handler takes its transaction (TxFrom, TxFor
// and TxHandler in txctx.go and txhandler.go), says it did not execute
// (notexecuted.go), asks for its identity (identity.go) and its effect
// keys (effect.go), and records phases (phase.go).
//
// Apart from requests, sweep.go deletes expired keys.
package idem
