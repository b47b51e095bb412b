package load

import (
	"slices"
	"strings"
)

// checkResponses warns about streamed responses, which a replay cannot
// reproduce as they were sent.
func (c *opCheck) checkResponses() {
	if c.kinOp == nil || c.kinOp.Responses == nil {
		return
	}
	var streams []string
	for _, rr := range c.kinOp.Responses.Map() {
		if rr == nil || rr.Value == nil {
			continue
		}
		for mt := range mediaTypes(rr.Value.Content) {
			if isStreaming(mt) && !slices.Contains(streams, mt) {
				streams = append(streams, mt)
			}
		}
	}
	if len(streams) == 0 {
		return
	}
	slices.Sort(streams)
	c.r.warnf(c.op.Pos, "", "responses of type %s are streamed: the response is captured whole before it is stored, a replay sends it in one piece, and one larger than maxSnapshotBytes (%d bytes) cannot be replayed",
		strings.Join(streams, ", "), c.op.Policy.MaxSnapshotBytes)
}
