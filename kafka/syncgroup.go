package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// syncGroup answers SyncGroup with the member's assignment: the leader's
// sync carries every member's and completes the rebalance; the others wait
// for it.
func (c *conn) syncGroup(ctx context.Context, req *kmsg.SyncGroupRequest) kmsg.Response {
	if e := c.coordinates("SyncGroup", req.Group, AccessWrite); e != nil {
		resp := kmsg.NewPtrSyncGroupResponse()
		resp.ErrorCode = e.Code
		return resp
	}
	select {
	case resp := <-c.s.coord.sync(req):
		return resp
	case <-ctx.Done():
		resp := kmsg.NewPtrSyncGroupResponse()
		resp.ErrorCode = codeOf(ctx.Err()).Code
		return resp
	}
}
