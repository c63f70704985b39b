package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
)

// lockedBuffer is a bytes.Buffer that the broker's goroutines can share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// repeatedKeys returns the keys that occur more than once in one JSON
// object line (encoding/json would silently keep the last).
func repeatedKeys(line string) ([]string, error) {
	dec := json.NewDecoder(strings.NewReader(line))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	seen, rep := map[string]bool{}, []string(nil)
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, err
		}
		if key := k.(string); seen[key] {
			rep = append(rep, key)
		} else {
			seen[key] = true
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// TestLogLinesNameEachKeyOnce runs a one-broker cluster with heal enabled
// through the real root logger (which names the broker) at debug level:
// no line of the store, cluster, raft, Pebble, plugin, probe, fsync or
// scrub carries a key twice (the broker id was once added by the root as a
// number and by cluster as a string; component by the plugin and again by
// its parts and by Pebble's adapter).
func TestLogLinesNameEachKeyOnce(t *testing.T) {
	root := t.TempDir()
	l, err := pki.CreateLocal(filepath.Join(root, "certs"), []meta.BrokerID{1}, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.DataDir, cfg.AdminListen, cfg.RaftListen = filepath.Join(root, "data"), "127.0.0.1:0", freeAddr(t)
	cfg.CertsDir, cfg.ReplicationFactor, cfg.LogLevel = l.BrokerDir(1), 1, "debug"
	cfg.Heal.Enabled, cfg.Heal.RPCListen, cfg.Heal.DataListen, cfg.Heal.DataDir = true, freeAddr(t), freeAddr(t), cfg.DataDir
	cfg.Raft.HeartbeatTimeout, cfg.Raft.ElectionTimeout, cfg.Raft.LeaderLeaseTimeout = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var out lockedBuffer
	b, err := Open(context.Background(), cfg, NewLogger(cfg, &out))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		snap := b.node.Snapshot()
		if br, ok := snap.Broker(1); ok && br.AdminAddr != "" && b.node.IsLeader() {
			break
		}
		if time.Now().After(deadline) {
			b.Close()
			t.Fatal("the broker did not lead and register within 10s")
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	components := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		rep, err := repeatedKeys(line)
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if len(rep) > 0 {
			t.Errorf("keys %q repeat in %s", rep, line)
		}
		var v struct {
			Component string `json:"component"`
		}
		json.Unmarshal([]byte(line), &v)
		components[v.Component] = true
	}
	for _, c := range []string{"cluster", "raft", "pebble", "heal", "probe", "fsync"} {
		if !components[c] {
			t.Errorf("no line of component %q; saw %v", c, components)
		}
	}
}
