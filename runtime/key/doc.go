// Package key reads and validates idempotency keys.
//
// A key comes from a header, a query parameter or a member of the request
// body, as the operation's policy says. There are two rules, one parser
// each. A header or query key is 1 to keyMaxLength characters of visible
// ASCII (0x21 to 0x7E): the limit to ASCII belongs to HTTP fields and URLs
// ([Parse], [Check]). A body key, a JSON string or a form field, may be any
// text its schema allows: 1 to keyMaxLength characters (Unicode code
// points, as JSON Schema's maxLength counts them) of valid UTF-8 with no
// control or space character ([CheckBody]). Anything else is an error wrapping
// [ErrInvalid], which the engine answers with a 400 invalid-idempotency-key
// problem whose detail is the error's message.
//
// In a header, a value that starts with '"' is an RFC 8941 structured-field
// string: Idempotency-Key: abc and Idempotency-Key: "abc" name the same key.
// Inside the quotes \" and \\ are the only escapes, and nothing may follow the
// closing quote. A header sent twice is invalid, as is a query parameter or
// form field given twice.
//
// [RefusedHeader] names the headers a key can never be read from: those
// the server takes out of the request, credentials, and per-attempt ids
// (docs/semantics.md §2).
//
// Messages never repeat the key: it is client input and may carry control
// characters. They name the position and byte value instead.
package key
