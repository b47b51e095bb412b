package fingerprint

// IsJSON reports whether the fingerprint reads a body of media type mt as
// JSON: application/json or any type with a +json suffix, in any case,
// parameters ignored. The generator asks it, so that it accepts exactly
// the bodies the runtime reads as JSON.
func IsJSON(mt string) bool { return isJSON(mt) }
