package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// coordinatorGroup is FindCoordinator's key type of a group (1 is a
// transactional id, not served).
const coordinatorGroup = 0

// findCoordinator answers FindCoordinator for groups: the broker that
// Groups.Coordinator names, with its listener. A transactional id's
// coordinator is refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as
// InitProducerID refuses one).
func (c *conn) findCoordinator(req *kmsg.FindCoordinatorRequest) kmsg.Response {
	resp := kmsg.NewPtrFindCoordinatorResponse()
	if req.Version < 4 {
		r := c.coordinatorOf(req.CoordinatorKey, req.CoordinatorType)
		resp.ErrorCode, resp.ErrorMessage, resp.NodeID, resp.Host, resp.Port = r.ErrorCode, r.ErrorMessage, r.NodeID, r.Host, r.Port
		return resp
	}
	for _, key := range req.CoordinatorKeys {
		resp.Coordinators = append(resp.Coordinators, c.coordinatorOf(key, req.CoordinatorType))
	}
	return resp
}

func (c *conn) coordinatorOf(key string, typ int8) kmsg.FindCoordinatorResponseCoordinator {
	out := kmsg.NewFindCoordinatorResponseCoordinator()
	out.Key, out.NodeID = key, -1
	fail := func(e *kerr.Error) kmsg.FindCoordinatorResponseCoordinator {
		out.ErrorCode, out.ErrorMessage = e.Code, kmsg.StringPtr(e.Message)
		return out
	}
	switch {
	case typ != coordinatorGroup:
		return fail(kerr.TransactionalIDAuthorizationFailed)
	case !c.peer.access.Has(AccessRead):
		c.refused("FindCoordinator", "", AccessRead)
		return fail(kerr.GroupAuthorizationFailed)
	case key == "" || len(key) > MaxGroupLen:
		return fail(kerr.InvalidGroupID)
	case c.s.groups == nil:
		return fail(kerr.CoordinatorNotAvailable)
	}
	id, err := c.s.groups.Coordinator(key)
	if err != nil {
		return fail(kerr.CoordinatorNotAvailable)
	}
	for _, b := range c.s.cluster.Brokers() {
		if b.NodeID == id {
			out.NodeID, out.Host, out.Port = b.NodeID, b.Host, b.Port
			return out
		}
	}
	return fail(kerr.CoordinatorNotAvailable)
}
