package pgconnect

// PinSearchPathSQL, run first in a migration's transaction, narrows the
// search_path until the transaction ends to the schema the migration
// creates its objects in, the first schema of the pool's search_path
// (current_schema()), and pg_temp last. pg_catalog, not named, is then
// searched first, so the migration's unqualified type and function names
// (text, bytea, now()) are the built-in ones whatever a search_path that
// names pg_catalog late would find first, and CREATE OR REPLACE replaces
// the store's functions instead of adding an overload over a domain of
// the same name. When no schema of the search_path exists, the path is
// empty and the migration fails as it did before.
const PinSearchPathSQL = `SELECT pg_catalog.set_config('search_path',
  COALESCE(pg_catalog.quote_ident(pg_catalog.current_schema()) OPERATOR(pg_catalog.||) ', pg_temp', ''), true)`
