package idem

// AlwaysReplayed lists the response headers stored and replayed for every
// operation, on top of a policy's ReplayHeaders: the ones docs/semantics.md §3.5
// names, and those that describe the stored body (a gzip body replayed
// without its Content-Encoding would be garbage to the client).
func AlwaysReplayed() []string {
	return []string{
		"Content-Type", "Content-Language", "Content-Location", "Location",
		"Content-Encoding", "Content-Disposition", "Content-Digest", "Repr-Digest", "Digest",
	}
}
