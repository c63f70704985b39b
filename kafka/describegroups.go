package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// describeGroups answers DescribeGroups: each group's state, protocol and
// members with their metadata and assignment. A group this broker holds
// nothing of is "Dead" with no error, as Kafka answers; one with committed
// offsets only is "Empty".
func (c *conn) describeGroups(req *kmsg.DescribeGroupsRequest) kmsg.Response {
	resp := kmsg.NewPtrDescribeGroupsResponse()
	for _, id := range req.Groups {
		g := kmsg.NewDescribeGroupsResponseGroup()
		g.Group = id
		if e := c.coordinates("DescribeGroups", id, AccessRead); e != nil {
			g.ErrorCode = e.Code
			resp.Groups = append(resp.Groups, g)
			continue
		}
		v := c.s.coord.describe(id)
		switch {
		case v.known:
			g.State = v.state.String()
		case len(c.s.groups.FetchOffsets(id)) > 0:
			g.State = groupEmpty.String()
		default:
			g.State = "Dead"
		}
		g.ProtocolType, g.Protocol, g.Members = v.protocolType, v.protocol, v.members
		resp.Groups = append(resp.Groups, g)
	}
	return resp
}
