package pgstore

// SettleStatements are the statements settle sends through pgx on the
// session of a handler whose transaction failed its end's check, by name,
// with the types of their parameters.
var SettleStatements = map[string]struct {
	SQL    string
	Params []string
}{
	"session reset":     {settleSessionSQL, nil},
	"key failed closed": {failClosedTxSQL, []string{"text", "text", "text", "text", "text", "bytea", "int8"}},
}
