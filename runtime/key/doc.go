// Package key reads and validates idempotency keys.
//
// A key comes from a header, a query parameter or a member of the request
// body, as the operation's policy says. Whatever its source, a key is 1 to
// keyMaxLength characters of visible ASCII (0x21 to 0x7E); anything else is
// an error wrapping [ErrInvalid], which the engine answers with a 400
// invalid-idempotency-key problem whose detail is the error's message.
//
// In a header, a value that starts with '"' is an RFC 8941 structured-field
// string: Idempotency-Key: abc and Idempotency-Key: "abc" name the same key.
// Inside the quotes \" and \\ are the only escapes, and nothing may follow the
// closing quote. A header sent twice is invalid, as is a query parameter or
// form field given twice.
//
// Messages never repeat the key: it is client input and may carry control
// characters. They name the position and byte value instead.
package key
