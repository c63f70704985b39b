package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// initProducerID answers InitProducerID for idempotent producers: a new
// cluster-unique producer id at epoch 0, whatever id and epoch the request
// carries (as Kafka does without a transactional id). Transactions are not
// served: a transactional id is refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
// no peer may use one).
func (c *conn) initProducerID(ctx context.Context, req *kmsg.InitProducerIDRequest) kmsg.Response {
	resp := kmsg.NewPtrInitProducerIDResponse()
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	switch {
	case !c.peer.access.Has(AccessWrite):
		c.refused("InitProducerID", "", AccessWrite)
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
	case req.TransactionalID != nil && *req.TransactionalID != "":
		c.log.Warn().Str("transactional_id", *req.TransactionalID).Msg("kafka: InitProducerID refused: transactions are not served")
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
	default:
		id, err := c.s.cluster.NewProducerID(ctx)
		if err != nil {
			c.log.Warn().Err(err).Msg("kafka: InitProducerID: no producer id")
			resp.ErrorCode = code(codeOf(err))
			return resp
		}
		resp.ProducerID, resp.ProducerEpoch = id, 0
	}
	return resp
}
