package kafka

import (
	"net"

	"github.com/twmb/franz-go/pkg/kerr"
)

// coordinates says whether this broker coordinates group for a peer
// holding want: GROUP_AUTHORIZATION_FAILED when the peer's role lacks it,
// INVALID_GROUP_ID for an empty or overlong id, COORDINATOR_NOT_AVAILABLE
// without Groups or a live coordinator, NOT_COORDINATOR when another
// broker coordinates it (this broker then forgets what it held of the
// group: a group that comes back starts anew from its committed offsets).
func (c *conn) coordinates(request, group string, want Access) *kerr.Error {
	if !c.peer.access.Has(want) {
		c.log.Warn().Str("request", request).Str("group", group).Stringer("missing", want).
			Stringer("has", c.peer.access).Msg("kafka: request refused: the peer's role lacks access")
		return kerr.GroupAuthorizationFailed
	}
	if group == "" || len(group) > MaxGroupLen {
		return kerr.InvalidGroupID
	}
	gs := c.s.groups
	if gs == nil {
		return kerr.CoordinatorNotAvailable
	}
	id, err := gs.Coordinator(group)
	if err != nil {
		c.log.Debug().Str("group", group).Err(err).Msg("kafka: no coordinator")
		return kerr.CoordinatorNotAvailable
	}
	if id != c.s.cluster.Self() {
		c.s.coord.forget(group)
		return kerr.NotCoordinator
	}
	return nil
}

// host is the peer's host, as DescribeGroups shows a member.
func (c *conn) host() string {
	h, _, err := net.SplitHostPort(c.peer.addr)
	if err != nil {
		return c.peer.addr
	}
	return h
}
