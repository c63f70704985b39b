package kafka

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/pki"
)

// Config configures a Server. Start from DefaultConfig.
type Config struct {
	// TLS is the listener's server config. The listener requires a client
	// certificate and calls Authorize during the handshake, so a peer the
	// broker refuses fails the handshake. nil means plaintext, which needs
	// Insecure.
	TLS *tls.Config
	// Authorize names the peer of a TLS connection (the broker verifies the
	// chain against the cluster CA: pki.Certs.VerifyPeer). Required with
	// TLS; its Role decides what the peer may do (RoleAccess).
	Authorize func(tls.ConnectionState) (pki.Identity, error)
	// Insecure serves plaintext and grants every peer read and write. The
	// broker restricts it to loopback listeners.
	Insecure bool
	// ClusterID is answered in Metadata.
	ClusterID string
	// AutoCreateTopics creates a topic a Metadata request names (when the
	// client allows it and the peer may write) with NumPartitions
	// partitions.
	AutoCreateTopics bool
	// NumPartitions is the partition count of auto-created topics and of
	// CreateTopics asking for the default (-1).
	NumPartitions int32
	// MaxFrameBytes bounds a request frame; a larger size prefix closes the
	// connection (Kafka's socket.request.max.bytes).
	MaxFrameBytes int32
	// MaxBatchBytes bounds one produced record batch (MESSAGE_TOO_LARGE).
	MaxBatchBytes int32
	// HandshakeTimeout bounds a TLS handshake.
	HandshakeTimeout time.Duration
	// Logger receives connection failures and refusals.
	Logger zerolog.Logger
	// Latency, when set, records the handling time of every Produce and
	// Fetch (the broker hands it to its adaptive backfill rate as the
	// client-facing latency); nil records nothing.
	Latency *Latency
	// Clock is the listener's time: the group coordinator's session and
	// rebalance timeouts and the times Latency records; nil is the system
	// clock (tests inject one they advance).
	Clock Clock
}

// Clock is the group coordinator's time. AfterFunc calls f once, on a
// goroutine of its own, d after now; stop cancels a call not yet made and
// says whether it did.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// systemClock is Clock over package time.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// DefaultConfig is an insecure-off config with Kafka's defaults; set TLS
// and Authorize, or Insecure.
func DefaultConfig() Config {
	return Config{
		ClusterID:        "malachi",
		AutoCreateTopics: true,
		NumPartitions:    3,
		MaxFrameBytes:    100 << 20,
		MaxBatchBytes:    1 << 20,
		HandshakeTimeout: 10 * time.Second,
		Logger:           zerolog.Nop(),
	}
}

// Validate names the first field with a bad value.
func (c Config) Validate() error {
	switch {
	case c.TLS == nil && !c.Insecure:
		return errors.New("kafka: config: TLS is nil and Insecure is false: set one")
	case c.TLS != nil && c.Insecure:
		return errors.New("kafka: config: TLS is set and Insecure is true: choose one")
	case c.TLS != nil && c.Authorize == nil:
		return errors.New("kafka: config: TLS is set but Authorize is nil")
	case c.NumPartitions < 1:
		return fmt.Errorf("kafka: config: NumPartitions %d: want at least 1", c.NumPartitions)
	case c.MaxFrameBytes < 1<<10:
		return fmt.Errorf("kafka: config: MaxFrameBytes %d: want at least 1024", c.MaxFrameBytes)
	case c.MaxBatchBytes < 1 || c.MaxBatchBytes > c.MaxFrameBytes:
		return fmt.Errorf("kafka: config: MaxBatchBytes %d: want 1 to MaxFrameBytes (%d)", c.MaxBatchBytes, c.MaxFrameBytes)
	case c.HandshakeTimeout <= 0:
		return fmt.Errorf("kafka: config: HandshakeTimeout %v: want > 0", c.HandshakeTimeout)
	}
	return nil
}
