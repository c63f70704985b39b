package kafka

import (
	"context"
	"fmt"
	"reflect"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// versionRange is the versions of a request kind the listener handles.
type versionRange struct{ min, max int16 }

// supported lists every request kind answered and the versions whose
// semantics the handlers implement; ApiVersions advertises exactly this.
// Produce starts at 3 and Fetch at 4, the first versions carrying record
// batch v2; Fetch stops at 12 and Produce at 10 (v10 carries the new
// leader of a partition answered NOT_LEADER_OR_FOLLOWER, KIP-951; later
// versions add transaction checks or name topics by id, not served here).
var supported = map[kmsg.Key]versionRange{
	kmsg.ApiVersions:    {0, 3},
	kmsg.Metadata:       {0, 12},
	kmsg.CreateTopics:   {0, 6},
	kmsg.Produce:        {3, 10},
	kmsg.InitProducerID: {0, 4},
	kmsg.Fetch:          {4, 12},
	kmsg.ListOffsets:    {1, 6},

	kmsg.FindCoordinator: {0, 4},
	kmsg.JoinGroup:       {0, 9},
	kmsg.SyncGroup:       {0, 5},
	kmsg.Heartbeat:       {0, 4},
	kmsg.LeaveGroup:      {0, 5},
	kmsg.OffsetCommit:    {0, 8},
	kmsg.OffsetFetch:     {0, 8},
	kmsg.ListGroups:      {0, 5},
	kmsg.DescribeGroups:  {0, 5},
	kmsg.DeleteGroups:    {0, 2},

	kmsg.DescribeCluster:      {0, 2},
	kmsg.DeleteTopics:         {0, 6},
	kmsg.OffsetForLeaderEpoch: {0, 4},
	kmsg.DescribeConfigs:      {0, 4},
}

// header is a parsed request header.
type header struct {
	key         kmsg.Key
	version     int16
	correlation int32
	clientID    string
}

// serve answers one request frame: the encoded response frame, nil when
// the request takes no answer (Produce with acks 0), or an error when the
// connection must close (what cannot be parsed cannot be answered).
func (c *conn) serve(frame []byte) ([]byte, error) {
	r := kbin.Reader{Src: frame}
	h := header{key: kmsg.Key(r.Int16()), version: r.Int16(), correlation: r.Int32()}
	if !r.Ok() {
		return nil, fmt.Errorf("kafka: request header of %d bytes is cut short", len(frame))
	}
	if h.key == kmsg.ApiVersions && h.version > supported[kmsg.ApiVersions].max {
		// Kafka's rule: a too-new ApiVersions is answered at v0 with the
		// versions we support, so the client can retry with one of them.
		return c.encode(h, apiVersionsResponse(0, kerr.UnsupportedVersion.Code)), nil
	}
	req := kmsg.RequestForKey(int16(h.key))
	if req == nil || h.version < 0 || h.version > req.MaxVersion() {
		return nil, fmt.Errorf("kafka: request key %d version %d: unknown to the protocol library, no response can be encoded", h.key, h.version)
	}
	req.SetVersion(h.version)
	if !(h.key == kmsg.ControlledShutdown && h.version == 0) { // the one header without a client id
		if id := r.NullableString(); id != nil {
			h.clientID = *id
		}
	}
	if req.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if !r.Ok() {
		return nil, fmt.Errorf("kafka: %s v%d: request header is cut short", h.key.Name(), h.version)
	}
	if vr, ok := supported[h.key]; !ok || h.version < vr.min || h.version > vr.max {
		c.log.Debug().Str("request", h.key.Name()).Int16("version", h.version).Str("client", h.clientID).Msg("kafka: unsupported request answered with UNSUPPORTED_VERSION")
		return c.encode(h, errorResponse(req, kerr.UnsupportedVersion.Code)), nil
	}
	if err := req.ReadFrom(r.Src); err != nil {
		return nil, fmt.Errorf("kafka: %s v%d from client %q: malformed body: %w", h.key.Name(), h.version, h.clientID, err)
	}
	c.clientID = h.clientID
	resp := c.dispatch(req)
	if resp == nil {
		return nil, nil
	}
	resp.SetVersion(h.version)
	return c.encode(h, resp), nil
}

// dispatch hands req to its kind's handler. A nil answer means none is
// sent.
func (c *conn) dispatch(req kmsg.Request) kmsg.Response {
	ctx := c.s.ctx
	switch r := req.(type) {
	case *kmsg.ApiVersionsRequest:
		return apiVersionsResponse(r.Version, 0)
	case *kmsg.MetadataRequest:
		return c.metadata(ctx, r)
	case *kmsg.CreateTopicsRequest:
		return c.createTopics(ctx, r)
	case *kmsg.ProduceRequest:
		c.records = produceRecords(r)
		return c.produce(ctx, r)
	case *kmsg.InitProducerIDRequest:
		return c.initProducerID(ctx, r)
	case *kmsg.FetchRequest:
		return c.fetch(ctx, r)
	case *kmsg.ListOffsetsRequest:
		return c.listOffsets(r)
	}
	return c.dispatchMore(ctx, req)
}

// dispatchMore hands the group and cluster kinds to their handlers.
func (c *conn) dispatchMore(ctx context.Context, req kmsg.Request) kmsg.Response {
	switch r := req.(type) {
	case *kmsg.FindCoordinatorRequest:
		return c.findCoordinator(r)
	case *kmsg.JoinGroupRequest:
		return c.joinGroup(ctx, r)
	case *kmsg.SyncGroupRequest:
		return c.syncGroup(ctx, r)
	case *kmsg.HeartbeatRequest:
		return c.heartbeat(r)
	case *kmsg.LeaveGroupRequest:
		return c.leaveGroup(r)
	case *kmsg.OffsetCommitRequest:
		return c.offsetCommit(ctx, r)
	case *kmsg.OffsetFetchRequest:
		return c.offsetFetch(ctx, r)
	case *kmsg.ListGroupsRequest:
		return c.listGroups(r)
	case *kmsg.DescribeGroupsRequest:
		return c.describeGroups(ctx, r)
	case *kmsg.DeleteGroupsRequest:
		return c.deleteGroups(ctx, r)
	case *kmsg.DescribeClusterRequest:
		return c.describeCluster(r)
	case *kmsg.DeleteTopicsRequest:
		return c.deleteTopics(r)
	case *kmsg.OffsetForLeaderEpochRequest:
		return c.offsetForLeaderEpoch(r)
	case *kmsg.DescribeConfigsRequest:
		return c.describeConfigs(r)
	}
	// supported and this switch disagree: a bug, answered as unsupported.
	c.log.Error().Str("request", kmsg.NameForKey(req.Key())).Msg("kafka: supported request kind without a handler")
	return errorResponse(req, kerr.UnsupportedVersion.Code)
}

// encode is encode into the connection's reused output buffer.
func (c *conn) encode(h header, resp kmsg.Response) []byte {
	c.out = encode(c.out, h, resp)
	return c.out
}

// encode frames resp as the answer to h into dst's memory (a new buffer
// when its capacity is short of sizeHint): size, correlation id, the
// response header's tags when flexible (never for ApiVersions, whose
// response header is always v0), the body.
func encode(dst []byte, h header, resp kmsg.Response) []byte {
	if n := sizeHint(resp); cap(dst) < n {
		dst = make([]byte, 0, n)
	}
	b := append(dst[:0], 0, 0, 0, 0)
	b = kbin.AppendInt32(b, h.correlation)
	if resp.IsFlexible() && h.key != kmsg.ApiVersions {
		b = append(b, 0)
	}
	b = resp.AppendTo(b)
	kbin.AppendInt32(b[:0], int32(len(b)-4))
	return b
}

// errorResponse is req's response kind at req's version with its
// top-level ErrorCode set to code, when the kind has one; otherwise the
// empty response, which names no topic, partition or group.
func errorResponse(req kmsg.Request, code int16) kmsg.Response {
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if f := reflect.ValueOf(resp).Elem().FieldByName("ErrorCode"); f.IsValid() && f.Kind() == reflect.Int16 {
		f.SetInt(int64(code))
	}
	return resp
}

// apiVersionsResponse lists supported at version with errorCode.
func apiVersionsResponse(version int16, errorCode int16) *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(version)
	resp.ErrorCode = errorCode
	for key := kmsg.Key(0); key < 100; key++ {
		vr, ok := supported[key]
		if !ok {
			continue
		}
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = int16(key), vr.min, vr.max
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
	return resp
}

// sizeHint is the capacity to encode resp into: a Fetch response's record
// batches and room for its other fields, so that appending them does not
// grow (and copy) the buffer a megabyte at a time; 64 for the others.
func sizeHint(resp kmsg.Response) int {
	f, ok := resp.(*kmsg.FetchResponse)
	if !ok {
		return 64
	}
	n := 256
	for _, t := range f.Topics {
		n += 64 + len(t.Topic)
		for _, p := range t.Partitions {
			n += 128 + len(p.RecordBatches) + 16*len(p.AbortedTransactions)
		}
	}
	return n
}
