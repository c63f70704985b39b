package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// deleteGroups answers DeleteGroups: a group without members loses its
// committed offsets and what this broker held of it; one with members is
// NON_EMPTY_GROUP, one unknown GROUP_ID_NOT_FOUND. Deleting needs write
// access.
func (c *conn) deleteGroups(ctx context.Context, req *kmsg.DeleteGroupsRequest) kmsg.Response {
	resp := kmsg.NewPtrDeleteGroupsResponse()
	for _, id := range req.Groups {
		g := kmsg.NewDeleteGroupsResponseGroup()
		g.Group = id
		g.ErrorCode = code(c.deleteGroup(ctx, id))
		resp.Groups = append(resp.Groups, g)
	}
	return resp
}

func (c *conn) deleteGroup(ctx context.Context, id string) *kerr.Error {
	if e := c.coordinates("DeleteGroups", id, AccessWrite); e != nil {
		return e
	}
	v := c.s.coord.describe(id)
	if len(v.members) > 0 {
		return kerr.NonEmptyGroup
	}
	if !v.known {
		offsets, err := c.s.groups.FetchOffsets(ctx, id)
		if err != nil {
			return storeCode(err)
		}
		if len(offsets) == 0 {
			return kerr.GroupIDNotFound
		}
	}
	if err := c.s.groups.DeleteOffsets(ctx, id); err != nil {
		c.log.Warn().Str("group", id).Err(err).Msg("kafka: DeleteGroups: deleting the committed offsets failed")
		return storeCode(err)
	}
	c.s.coord.forget(id)
	return nil
}
