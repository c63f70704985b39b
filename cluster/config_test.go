package cluster

import (
	"errors"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/pki"
)

// TestValidateTransport: exactly one of TLS and Insecure, TLS naming this
// broker, Insecure only on loopback; each refusal names the field.
func TestValidateTransport(t *testing.T) {
	l := testPKI(t, 1, 2)
	b1, err := pki.LoadBroker(l.BrokerDir(1))
	if err != nil {
		t.Fatal(err)
	}
	b2, err := pki.LoadBroker(l.BrokerDir(2))
	if err != nil {
		t.Fatal(err)
	}
	base := func(addr string) Config {
		c := DefaultConfig()
		c.ID, c.Dir, c.Addr, c.Peers = 1, t.TempDir(), addr, []Peer{{1, addr}}
		return c
	}
	for _, tc := range []struct {
		name  string
		tweak func(*Config)
		want  string // "" when valid
	}{
		{"TLS", func(c *Config) { c.TLS = b1 }, ""},
		{"neither", func(c *Config) {}, "TLS is nil: give the broker's certificates, or set Insecure"},
		{"both", func(c *Config) { c.TLS, c.Insecure = b1, true }, "TLS and Insecure both set"},
		{"another broker's certificates", func(c *Config) { c.TLS = b2 }, "names broker 2, not broker 1 (ID)"},
		{"Insecure on loopback", func(c *Config) { c.Insecure = true }, ""},
		{"Insecure on localhost", func(c *Config) { *c = base("localhost:7000"); c.Insecure = true }, ""},
		{"Insecure on a network address", func(c *Config) { *c = base("10.0.0.1:7000"); c.Insecure = true },
			`Insecure with Addr "10.0.0.1:7000": plaintext raft only on loopback addresses`},
		{"Insecure with a remote peer", func(c *Config) {
			c.Insecure, c.Peers = true, append(c.Peers, Peer{2, "192.168.1.2:7000"})
		}, `Insecure with Peers[1].Addr "192.168.1.2:7000": plaintext raft only on loopback`},
	} {
		c := base("127.0.0.1:7000")
		tc.tweak(&c)
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (!errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want ErrConfig saying %q", tc.name, err, tc.want)
		}
	}
}
