// Package idem makes retried requests safe: it enforces the x-idempotency
// policies that idemgen generates, in front of an API's handlers.
//
// # A request's life
//
// An Engine is built once (New, config.go) from the generated policies
// (policy.go). Every keyed request then passes these stages, each in its
// own file, read in this order:
//
//   - mount.go, route.go: Engine.Middleware finds the request's operation
//     by method and path template, or Engine.Handler is mounted on one
//     route; a path routers could read two ways is refused. servemux.go:
//     Engine.Route and Engine.ServeMux give each route its policy as it is
//     registered (runtime/idemchi does the same for chi).
//   - serve.go: serve runs the stages below in order and reports the
//     outcome to the Observer when the request ends.
//   - admit.go: admission reads the tenant, the key, the body (read whole,
//     within MaxRequestBytes) and the fingerprint. A request without a key
//     runs unprotected or is refused; nothing so far touched the store.
//   - claim.go, hold.go: the claim asks the store for the key (the words
//     claim, hold, release, abandon and settle are defined in
//     docs/semantics.md §9). A lost
//     claim is answered from the row it met; a won claim is a hold, which
//     the handler's outcome ends by completing, releasing or abandoning it.
//     lazytx.go holds the transaction of a handler seen writing around it.
//   - run.go, capture.go: the handler runs under the hold, its response
//     captured whole; a storable response is snapshotted (and sealed) and
//     completes the hold before a byte reaches the client. A 4xx the
//     handler marked as not executed (notexecuted.go) releases it instead.
//   - answer.go, problem.go: the replay of a stored response, and every
//     problem the engine answers with, defined in one table.
//
// # Roles
//
// A Store keeps one row per (tenant, scope, key) and never waits on
// another claim: it claims, completes, releases and abandons, each fenced
// by the claim's lease token. A Transactor is a Store that can hold the
// claim inside a database transaction which it hands to the handler
// (TxFrom, TxFor, TxHandler in txctx.go and txhandler.go), so that the
// handler's writes and the key's completion commit together. The engine
// decides; stores only record, and runtime/storetest holds them all to the
// same contract. Both interfaces, the rows they record and the at-rest
// protection of those rows live in runtime/idemstore, which stores and
// runtime/idemadmin import without the engine, under those names only
// (idemstore.Store, idemstore.Takeover).
//
// # Beside the request path
//
// secret.go checks Config.Secrets, under which keys and fingerprints are
// kept out of the store as HMACs (idemstore.Secret), and rotation.go finds
// rows written under an older secret while secrets rotate; responses are
// sealed by an idemstore.Sealer; label.go names keys in logs; headers.go
// says which response headers are replayed; observe.go defines the events
// an Observer sees; check.go (CheckRoutes) proves a router applies every
// policy; sweep.go deletes expired keys.
package idem
