package idem

import "context"

// NotExecuted tells the engine that the request did not start executing
// its operation: the handler refused it before doing anything (a body or
// parameter it could not decode or validate), so its answer must not be
// the key's answer for the whole TTL. The handler then answers a 4xx as
// usual; the engine sends that answer, stores nothing and releases the
// key, so the client's corrected retry with the same key runs. A
// transactional handler's writes are rolled back with the claim.
//
// The mark counts only with a 4xx answer: a success or a server error is
// stored, or not, by its status as always. And it is refused, the answer
// stored as any 4xx, when the handler of a transactional operation was
// seen writing around its transaction: writes made outside it may have
// happened, and releasing the key would let a retry repeat them.
//
// A 4xx of the business (a payment declined, an account closed) is an
// answer of the operation and must stay stored: call NotExecuted only
// where nothing ran. It reports whether the engine heard it; false means
// no policy was applied to the request.
func NotExecuted(ctx context.Context) bool {
	a := appliedFrom(ctx)
	if a == nil {
		return false
	}
	a.notExecuted.Store(true)
	return true
}
