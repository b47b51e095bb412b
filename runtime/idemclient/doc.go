// Package idemclient is the client's half of idemgen: an http.RoundTripper
// that calls an API's idempotent operations safely, retrying what can be
// retried and nothing else.
//
// For a request to an operation of the generated table (the generated
// package's ClientOperations), the Transport
//
//   - attaches an idempotency key: the one the request already carries, or
//     one the caller put in the context with WithKey, or a fresh
//     crypto-random one; the key and the body stay the same on every retry,
//     so the server can tell a retry from a new request;
//   - retries connection errors, attempt timeouts, 408, 429, 500, 502,
//     503, 504 and 409 request-in-progress, with exponential backoff and
//     full jitter, waiting at least what Retry-After asks; the server
//     stores none of those answers, so the key is free for the retry;
//   - never retries 422 idempotency-key-reused, 409 outcome-unknown or
//     response-not-replayable, nor any other answer, nor an answer marked
//     Idempotent-Replayed whatever its status (the server's record of the
//     call): those are final, and a retry would meet them again or change
//     nothing;
//   - stops within a retry budget that New checks is shorter than the
//     operation's TTL, because a retry that arrives after the server forgot
//     the key would run the operation a second time.
//
// A redirect that keeps the method (307, 308) continues the call: every
// hop carries the first hop's key, to any origin, so that a retry of the
// whole call, which meets the first hop's stored redirect, is a retry at
// the target too. A redirect to GET (303) is another request, sent without
// the key.
//
// A request body is kept in memory for the retries up to
// Config.MaxBodyBytes; a larger one is sent once, as it streams.
//
// A request to no operation of the table is retried only when its method
// is idempotent by HTTP (GET, HEAD, OPTIONS, TRACE, PUT, DELETE; RFC 9110
// §9.2.2); a POST or PATCH the table does not know is sent once.
//
// Each logical call can report its attempts, its key and whether the answer
// was a replay (WithReport). Transport works under a plain http.Client
// (Client returns one) and as the HTTPRequestDoer of an oapi-codegen client.
//
// The package uses the standard library and idemgen's small key and path
// template packages only; it does not import the server engine.
package idemclient
