package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/testbed/raftwire"
)

// Helpers of the security tests: raw connections to a broker's ports,
// its raft position as raft itself reports it, its copy files and its log.

// loopbackSources returns n local addresses 127.0.0.base, base+1, ... to
// dial from, so that a broker's per-address refusal log tells callers
// apart. It fails the test where they cannot be bound.
func (c *cluster) loopbackSources(base, n int) []net.Addr {
	c.t.Helper()
	out := make([]net.Addr, n)
	for i := range out {
		a := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(base+i))}
		l, err := net.ListenTCP("tcp", a)
		if err != nil {
			c.t.Fatalf("cannot bind %s to dial from (the tests need 127.0.0.0/8 on loopback): %v", a.IP, err)
		}
		l.Close()
		out[i] = a
	}
	return out
}

// poke connects to addr from local (nil: any), writes payload, closes its
// sending side and returns what the server wrote until it closed the
// connection. It fails the test when no TCP connection can be made (an
// attack that never reached the port proves nothing) and when the server
// neither closes nor ends within 10 s.
func (c *cluster) poke(local net.Addr, addr string, payload []byte) []byte {
	c.t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: local}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		c.t.Fatalf("poke %s: could not even connect: %v", addr, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = conn.Write(payload) // the server may close before reading it all
	_ = conn.(*net.TCPConn).CloseWrite()
	reply, err := io.ReadAll(conn)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.t.Fatalf("poke %s: the server neither answered nor closed within 10s", addr)
	}
	return reply
}

// send is raftwire's Send that fails the test when the port could not be
// reached or nothing happened within the timeout.
func (c *cluster) send(d raftwire.Dialer, addr string, typ uint8, req any, tail []byte, resp any) bool {
	c.t.Helper()
	ok, err := d.Send(addr, typ, req, tail, resp)
	if err != nil {
		c.t.Fatalf("raft rpc %d to %s: %v", typ, addr, err)
	}
	return ok
}

// pairTLS is a raft caller's TLS config presenting the pair crt and key
// of certs directory dir.
func (c *cluster) pairTLS(dir, crt, key string) *tls.Config {
	c.t.Helper()
	cfg, err := raftwire.ClientConfig(filepath.Join(dir, crt), filepath.Join(dir, key))
	if err != nil {
		c.t.Fatal(err)
	}
	return cfg
}

// brokerTLS presents broker id's own certificate.
func (c *cluster) brokerTLS(id int) *tls.Config {
	return c.pairTLS(c.certs.BrokerDir(meta.BrokerID(id)), pki.BrokerCert, pki.BrokerKey)
}

// raftPosition asks broker id's raft, with a harmless AppendEntries (term
// 1) sent by another member with its own certificate, for its current
// term and last log index. Raft answers it (or the test fails): it is also
// the control that shows raftwire speaks raft to a real broker.
func (c *cluster) raftPosition(id int) (term, last uint64) {
	c.t.Helper()
	from := c.anyAlive(id)
	var resp raft.AppendEntriesResponse
	if !c.send(raftwire.Dialer{TLS: c.brokerTLS(from)}, c.b(id).raft, raftwire.AppendEntries,
		raftwire.StaleAppend(meta.BrokerID(from), c.b(from).raft), nil, &resp) {
		c.t.Fatalf("broker %d's raft did not answer a stale AppendEntries from member %d", id, from)
	}
	return resp.Term, resp.LastLog
}

// raftConfiguration is the cluster's raft configuration: every broker a
// voter at its raft address.
func (c *cluster) raftConfiguration() raft.Configuration {
	var cfg raft.Configuration
	for _, b := range c.brokers {
		cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(meta.BrokerID(b.id).String()), Address: raft.ServerAddress(b.raft)})
	}
	return cfg
}

// copyHashes returns the SHA-256 of every file under every broker's
// copies/ directory, by broker and path.
func (c *cluster) copyHashes() map[string]string {
	c.t.Helper()
	out := map[string]string{}
	for _, b := range c.brokers {
		root := b.CopiesDir()
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			rel, _ := filepath.Rel(root, path)
			out[fmt.Sprintf("broker %d: %s", b.id, rel)] = hex.EncodeToString(sum[:])
			return nil
		})
		if err != nil {
			c.t.Fatalf("broker %d: hash its copies: %v", b.id, err)
		}
	}
	return out
}

// logSize is the length of broker id's log now: logLines from it reads
// only what comes after.
func (c *cluster) logSize(id int) int64 {
	fi, err := os.Stat(c.b(id).logPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logLines returns the lines of broker id's log after byte from that
// contain every one of subs.
func (c *cluster) logLines(id int, from int64, subs ...string) []string {
	c.t.Helper()
	f, err := os.Open(c.b(id).logPath)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		c.t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
next:
	for sc.Scan() {
		for _, s := range subs {
			if !strings.Contains(sc.Text(), s) {
				continue next
			}
		}
		out = append(out, sc.Text())
	}
	return out
}

// metricSum sums every sample of metric name (any labels) on broker id's
// plugin /metrics; 0 when it has none.
func (c *cluster) metricSum(id int, name string) float64 {
	c.t.Helper()
	body, err := c.rpc.GetRaw(context.Background(), c.b(id).rpc, "/metrics")
	if err != nil {
		c.t.Fatalf("broker %d /metrics: %v", id, err)
	}
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		var f float64
		fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &f)
		sum += f
	}
	return sum
}

// malachi runs the CLI with args and returns its output; it fails the test
// on a non-zero exit.
func (c *cluster) malachi(args ...string) string {
	c.t.Helper()
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("malachi %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// operatorFlags are the CLI flags that call the cluster as its operator.
func (c *cluster) operatorFlags() []string {
	return []string{"--certs-dir", c.certs.ClientDir(), "--user", string(pki.RoleOperator)}
}

// row returns the line of `malachi status`'s broker table for broker id.
func row(out string, id string) string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == id {
			return l
		}
	}
	return ""
}
