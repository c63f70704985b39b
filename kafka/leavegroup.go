package kafka

import "github.com/twmb/franz-go/pkg/kmsg"

// leaveGroup answers LeaveGroup: the members leave and the group
// rebalances. Up to v2 one member, its error top-level; from v3 a list,
// each with its own.
func (c *conn) leaveGroup(req *kmsg.LeaveGroupRequest) kmsg.Response {
	resp := kmsg.NewPtrLeaveGroupResponse()
	if e := c.coordinates("LeaveGroup", req.Group, AccessWrite); e != nil {
		resp.ErrorCode = e.Code
		return resp
	}
	if req.Version < 3 {
		resp.ErrorCode = code(c.s.coord.leave(req.Group, []string{req.MemberID})[0])
		return resp
	}
	ids := make([]string, len(req.Members))
	for i, m := range req.Members {
		ids[i] = m.MemberID
	}
	for i, e := range c.s.coord.leave(req.Group, ids) {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID, rm.InstanceID, rm.ErrorCode = ids[i], req.Members[i].InstanceID, code(e)
		resp.Members = append(resp.Members, rm)
	}
	return resp
}
