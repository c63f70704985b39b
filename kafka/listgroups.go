package kafka

import (
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// listGroups answers ListGroups with the groups this broker coordinates
// and holds (those with members now, or since it last started
// coordinating them), by id, filtered by state (v4+). A peer without read
// access is refused (GROUP_AUTHORIZATION_FAILED).
func (c *conn) listGroups(req *kmsg.ListGroupsRequest) kmsg.Response {
	resp := kmsg.NewPtrListGroupsResponse()
	if !c.peer.access.Has(AccessRead) {
		c.refused("ListGroups", "", AccessRead)
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp
	}
	held := c.s.coord.list()
	ids := make([]string, 0, len(held))
	for id := range held {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		v := held[id]
		if len(req.StatesFilter) > 0 && !slices.Contains(req.StatesFilter, v.state.String()) {
			continue
		}
		if len(req.TypesFilter) > 0 && !slices.Contains(req.TypesFilter, "classic") {
			continue
		}
		if gs := c.s.groups; gs == nil {
			continue
		} else if co, err := gs.Coordinator(id); err != nil || co != c.s.cluster.Self() {
			continue
		}
		g := kmsg.NewListGroupsResponseGroup()
		g.Group, g.ProtocolType, g.GroupState, g.GroupType = id, v.protocolType, v.state.String(), "classic"
		resp.Groups = append(resp.Groups, g)
	}
	return resp
}
