package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The endpoint types of DescribeCluster v1+.
const (
	endpointBrokers     = 1
	endpointControllers = 2
)

// describeCluster answers DescribeCluster as Metadata names the cluster:
// its id, this broker as the controller, and the live brokers
// (Cluster.Brokers). Controllers are not served as an endpoint type
// (UNSUPPORTED_ENDPOINT_TYPE); a peer without read access is refused
// (CLUSTER_AUTHORIZATION_FAILED).
func (c *conn) describeCluster(req *kmsg.DescribeClusterRequest) kmsg.Response {
	resp := kmsg.NewPtrDescribeClusterResponse()
	resp.EndpointType = req.EndpointType
	if req.Version < 1 {
		resp.EndpointType = endpointBrokers
	}
	switch {
	case !c.peer.access.Has(AccessRead):
		c.refused("DescribeCluster", "", AccessRead)
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp
	case resp.EndpointType != endpointBrokers:
		resp.ErrorCode = kerr.UnsupportedEndpointType.Code
		return resp
	}
	resp.ClusterID, resp.ControllerID = c.s.cfg.ClusterID, c.s.cluster.Self()
	for _, b := range c.s.cluster.Brokers() {
		rb := kmsg.NewDescribeClusterResponseBroker()
		rb.NodeID, rb.Host, rb.Port, rb.Rack = b.NodeID, b.Host, b.Port, b.rack()
		resp.Brokers = append(resp.Brokers, rb)
	}
	return resp
}
