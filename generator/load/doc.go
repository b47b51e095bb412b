// Package load reads an OpenAPI 3.0 or 3.1 document (YAML or JSON), checks
// every x-idempotency policy in it, and returns the policy model the
// emitters work from. kin-openapi types stop here.
//
// # One parse
//
// The file is parsed once into a YAML node tree (JSON is YAML, so JSON
// specs get lines and columns too). kin-openapi decodes its document from
// that tree, and the loader reads the tree for the position of every policy
// field and list item, which kin does not record. Asking kin to record
// positions itself (IncludeOrigin) roughly doubles its load time and still
// gives only the extension's own key, so it is left off.
//
// # Cost
//
// A spec is untrusted input, often a partner's or a vendor's, so one built
// to stall the loader must not. What the checks work out about a
// request-body schema (its type, its length limit, a broken $ref in its
// composition, the lookup of a pointer) is worked out once per load,
// however many operations, fields and paths reach the schema, and each
// distinct $ref is followed once; the loader's own work grows with the
// spec's references. kin-openapi's resolution of references does not: it
// walks a schema's members again for every $ref that names the schema, so
// schemas that each name many others cost it their references times their
// members. No option of kin-openapi avoids that walk.
//
// kin-openapi also decodes every YAML alias as a copy of what it names, so
// aliases that name anchors holding aliases would make a spec of a few
// hundred bytes gigabytes to decode. Before kin-openapi runs, the loader
// counts what the aliases expand the document to, each node once, and
// refuses a document they expand past ten times its own nodes plus
// 100,000 (checkAliases).
//
// # What is an error and what is a warning
//
// Everything about the extension is decoded strictly: unknown fields (with
// a "did you mean"), wrong types, bad values and conflicts are errors that
// name the file, line, column, operation and field. What the generator
// relies on is judged strictly too: a fingerprint pointer or body key the
// request-body schema does not have, or a $ref the check has to follow and
// cannot. Faults the generated code does not depend on are warnings: a
// $ref elsewhere that does not resolve or points at another file (only
// local references are read; such a ref is set aside so the rest loads),
// and kin-openapi's complaints about the annotated operations' parameters
// and request bodies, validated with examples, defaults, patterns and
// formats left unchecked. The rest of the document is not validated: what
// touches no annotated operation never changes the output (an OpenAPI
// linter is the place for it), and on a spec the size of Stripe's
// whole-document validation takes several times as long as loading.
//
// # Choices the extension leaves open
//
//   - Durations are whole numbers of d, h, m and s, largest unit first,
//     optionally combined (90s, 15m, 24h, 7d, 1h30m); they must be
//     positive. Fractions and sub-second units are refused.
//   - Sizes are a plain byte count or a whole number of KiB, MiB or GiB
//     (powers of 1024), at most 1GiB (PostgreSQL's limit for one value).
//     KB, MB and GB are refused as ambiguous, with the KiB spelling offered.
//   - A header key's name and replayHeaders are canonicalized
//     (idempotency-key → Idempotency-Key). replayHeaders refuses headers
//     that must never be stored: Set-Cookie, rate-limit state, trace and
//     request ids, Date, framing and hop-by-hop headers, credentials; the
//     headers that are always replayed (idem.AlwaysReplayed) draw a
//     warning.
//   - Fingerprint pointers (RFC 6901, ~0 and ~1 escapes) follow $ref and
//     nested properties. allOf members add to a schema's properties. Under
//     oneOf/anyOf a pointer is accepted when at least one branch has it (a
//     body of another branch lacks the field, and a missing field is part
//     of the fingerprint); branches that disagree on its type make it
//     "any". An undeclared property is accepted only where
//     additionalProperties allows it. An array is one value: a pointer into
//     its items is refused with a hint to point at the array.
//   - The body media type is application/json (or any +json type), else
//     application/x-www-form-urlencoded. A body declared with media types
//     of two kinds (JSON and multipart, JSON and form) is an error unless
//     the policy's mediaType names the one to fingerprint: the runtime
//     reads one kind per operation and refuses keyed requests of another
//     with 415, which must not happen by accident. An operation whose body has only
//     other media types is an error when the policy names body fields or a
//     body key; with a whole-body fingerprint it is a warning, since real
//     specs annotate such operations (Stripe's file upload) and a request
//     without a body still works, while one with a body fails
//     fingerprinting at run time. A request-body content key without a "/"
//     is not a media type: an error at the key (most often a media type's
//     field, such as examples, indented one level too far out), and not a
//     second kind of body.
//   - A path item that is a $ref is followed to the path item that holds
//     its operations, through a chain of $refs (valid in OpenAPI 3.1;
//     kin-openapi follows one, so the path's $ref is made to name the
//     chain's end). What cannot be read is an error at its $ref, since the
//     operations there, and their x-idempotency, would be lost: a chain
//     that comes back to itself, a $ref into another file (bundle the
//     spec first), one that leads nowhere or to no object, and a $ref with
//     an operation, parameters or any field but summary, description and
//     extensions beside it, which OpenAPI leaves undefined and kin-openapi
//     (so oapi-codegen) reads while other tools read the $ref's target.
//   - A path key with a query string (/responses?beta=true) is matched by
//     no router: its operation is left out with a warning at the "?" that
//     names the two ways to protect it, and the rest is generated. Other
//     templates the runtime cannot parse are errors.
//   - A header or query key the spec also declares as a parameter must be a
//     string; a mismatch between the policy's required and the parameter's
//     is a warning. A body key must be a string property and is never a
//     fingerprint pointer. Query names in the fingerprint must be declared
//     query parameters.
//   - x-idempotency on GET, HEAD, OPTIONS, TRACE, PUT or DELETE is an
//     error, unless it is false. On a path item it is an error (it would be
//     silently ignored), and so is one anywhere else under a path item: in
//     a request body, among responses, in a parameter or a schema (not in
//     data, examples and defaults, nor as a property's name, nor in
//     callbacks, whose requests the API sends). In OpenAPI
//     3.2's additionalOperations, which kin-openapi serves like the method
//     fields, it is an error: POST and PATCH belong in their own fields,
//     and other methods may not have a policy. The document-level object must be an object; a
//     warning says when no operation opts in to it, and when it sets
//     fingerprint or query, which are per-operation by nature.
//   - onLeaseExpiry: takeover without transactional draws a warning (the
//     handler may run twice).
//   - An operation without operationId gets one from method and path
//     (POST /v1/customers/{customer}/sources → post_v1_customers_customer_sources);
//     Go names split IDs at characters that are neither letters nor digits
//     (of any script, after NFC composition) and capitalize each part; a
//     name without a capital first letter gets an "Op" prefix. Names that
//     clash are judged by the Go emitter (gocode.CheckNames), which
//     validate runs too.
//   - A key set twice in one object is a warning (the later value is used,
//     as JSON parsers do), and an error inside x-idempotency. An extension
//     one or two letters from x-idempotency, or in another case, is a
//     warning: it would be ignored. One that is x-idempotency spelt with
//     look-alike characters (Cyrillic or Greek letters, fullwidth forms,
//     other dashes, invisible format characters; extkeys.go holds the
//     table) is an error wherever it stands: it reads as the extension in
//     review and is another key.
//   - A JSON document is read by a JSON decoder that builds the node tree
//     the YAML parser would, lines and columns included, in about the
//     time the YAML parser takes over the same spec in YAML; a surrogate
//     pair escape, which YAML refuses, is its character.
//   - One cause, one message: a $ref nothing needs that does not resolve
//     is one warning per name, at its first use, with the lines of the
//     rest; kin-openapi's complaints are traced down to the schema that
//     fails by itself and reported at its JSON Pointer and line; and a
//     diagnostic that several operations share (a shared schema or request
//     body) is one line that names them.
//   - Lifetime conflicts (lease not shorter than ttl, ttl shorter than
//     clientRetryBudget) are checked by one function for the document and
//     each operation, and reported at the most specific field taking part.
package load
