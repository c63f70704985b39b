package kafka

import "github.com/twmb/franz-go/pkg/kmsg"

// heartbeat answers Heartbeat: the member's session starts anew;
// REBALANCE_IN_PROGRESS asks it to rejoin.
func (c *conn) heartbeat(req *kmsg.HeartbeatRequest) kmsg.Response {
	resp := kmsg.NewPtrHeartbeatResponse()
	e := c.coordinates("Heartbeat", req.Group, AccessWrite)
	if e == nil {
		e = c.s.coord.heartbeat(req.Group, req.MemberID, req.Generation)
	}
	resp.ErrorCode = code(e)
	return resp
}
