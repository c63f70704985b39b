package kafka

import (
	"strings"

	"github.com/malachi-log/malachi/pki"
)

// Access is what a peer may do over Kafka, a set of bits.
type Access uint8

// The access bits. Read covers Metadata, Fetch, ListOffsets,
// OffsetForLeaderEpoch, DescribeCluster, DescribeConfigs and seeing
// groups (FindCoordinator, OffsetFetch, DescribeGroups, ListGroups);
// Write covers Produce, InitProducerID, creating (and asking to delete)
// topics and taking part in groups (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup, OffsetCommit, DeleteGroups). ApiVersions needs nothing.
const (
	AccessRead Access = 1 << iota
	AccessWrite
)

// Has says whether a holds every bit of want.
func (a Access) Has(want Access) bool { return a&want == want }

func (a Access) String() string {
	var s []string
	if a.Has(AccessRead) {
		s = append(s, "read")
	}
	if a.Has(AccessWrite) {
		s = append(s, "write")
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "+")
}

// RoleAccess is what a certificate role may do: an operator and a client
// read and write, a viewer reads, a broker (a cluster member, not a
// client) and any other role nothing.
func RoleAccess(r pki.Role) Access {
	switch r {
	case pki.RoleOperator, pki.RoleClient:
		return AccessRead | AccessWrite
	case pki.RoleViewer:
		return AccessRead
	}
	return 0
}

// peer is the other end of a connection, authenticated.
type peer struct {
	name   string // the identity, or the address when insecure
	addr   string
	access Access
}
