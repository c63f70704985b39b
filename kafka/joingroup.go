package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// joinGroup answers JoinGroup once the group's rebalance completes (or at
// once with a refusal, or with MEMBER_ID_REQUIRED and the member's id at
// v4+): the generation, the protocol, the leader, and to the leader every
// member's metadata.
func (c *conn) joinGroup(ctx context.Context, req *kmsg.JoinGroupRequest) kmsg.Response {
	if e := c.coordinates("JoinGroup", req.Group, AccessWrite); e != nil {
		return joinRefusal(req.MemberID, e)
	}
	select {
	case resp := <-c.s.coord.join(req, c.clientID, c.host()):
		return resp
	case <-ctx.Done():
		return joinRefusal(req.MemberID, codeOf(ctx.Err()))
	}
}
