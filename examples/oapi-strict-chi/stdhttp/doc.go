// Package stdhttp is the example's spec through oapi-codegen's std-http
// output: the strict server on net/http's ServeMux. Its test mounts it
// through Engine.ServeMux, as the chi service mounts through
// idemchi.Router. main.go's go:generate directives write it.
package stdhttp
