package key

// In says where a request carries its idempotency key, as the
// x-idempotency key field names the place ("header:Idempotency-Key").
// The engine, the client and the generator all read this one type.
type In string

// The places a key can be carried.
const (
	InHeader In = "header"
	InBody   In = "body"
	InQuery  In = "query"
)
