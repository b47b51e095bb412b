// Package routers holds the route lookups that Engine.CheckRoutes asks of
// routers idemgen has no adapter for (gorilla/mux, echo, gin), as
// docs/stacks/other-routers.md shows them. The page's code blocks are
// regions of these files; lookup_test.go proves each lookup finds a
// protected route and reports an unprotected one.
package routers
