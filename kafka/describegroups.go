package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// describeGroups answers DescribeGroups: each group's state, protocol and
// members with their metadata and assignment. A group this broker holds
// nothing of is "Dead" with no error, as Kafka answers; one with committed
// offsets only is "Empty".
func (c *conn) describeGroups(ctx context.Context, req *kmsg.DescribeGroupsRequest) kmsg.Response {
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
		g.State = v.state.String()
		if !v.known {
			offsets, err := c.s.groups.FetchOffsets(ctx, id)
			if err != nil {
				g.ErrorCode = storeCode(err).Code
			} else if len(offsets) == 0 {
				g.State = "Dead"
			}
		}
		g.ProtocolType, g.Protocol, g.Members = v.protocolType, v.protocol, v.members
		resp.Groups = append(resp.Groups, g)
	}
	return resp
}
