package idem

import "net/http"

// SingleTenant is Config.Tenant for a service without tenants: every
// request belongs to the tenant name, which must not be empty.
//
//	engine, err := api.NewEngine(idem.Config{Store: store, Tenant: idem.SingleTenant("default")})
//
// Keys are scoped by name as by any tenant (docs/semantics.md §2). A
// service that gains tenants later should either give the tenant its
// existing clients belong to this same name, or make the switch once no
// key stored under the old name is still being retried (its TTL): a retry
// that arrives under another tenant name finds no key and runs again.
func SingleTenant(name string) func(*http.Request) (string, bool) {
	return func(*http.Request) (string, bool) { return name, name != "" }
}
