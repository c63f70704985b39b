package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/malachi-log/malachi/internal/loopdisk"
	"github.com/malachi-log/malachi/internal/rpc"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/store"
)

// clusterConfig is what the demo's cluster is made of.
type clusterConfig struct {
	Bin     string // the malachid binary
	Root    string // every broker's directory lives under it
	Brokers int
	RF      int
	Tick    time.Duration
	Grace   time.Duration
	// RaftTimeout is the consensus engine's heartbeat and election
	// timeout; the leader lease is half of it.
	RaftTimeout time.Duration
	// SettleBatch is heal.settle_batch; 0 leaves the plugin's default.
	SettleBatch int
	// ScrubEvery and ScrubRate are heal.scrub_interval (0: off) and
	// heal.scrub_bytes_per_second.
	ScrubEvery time.Duration
	ScrubRate  int64
	// BackfillRate is heal.backfill_bytes_per_second (0: no cap).
	BackfillRate int64
	// Keep leaves the processes running when the CLI exits.
	Keep bool
	// Insecure runs the brokers with insecure = true: plaintext on
	// loopback, no certificates. Otherwise newCluster makes a CA, a
	// certificate per broker and the operator and viewer clients under
	// Root/certs, and the demo calls the brokers as "operator".
	Insecure bool
	// LoopBroker, when set, is the broker whose <data_dir>/copies is a
	// loop-mounted ext4 of LoopBytes bytes (see cluster.loop), mounted by
	// Start before that broker starts and unmounted by Stop. Where the
	// mount cannot be made, Start says why in cluster.loopSkip and the
	// broker runs on the plain directory.
	LoopBroker meta.BrokerID
	LoopBytes  int64
}

// broker is one malachid process of the demo's cluster.
type broker struct {
	ID                     meta.BrokerID
	Dir                    string // data_dir
	Admin, Raft, RPC, Data string // host:port
	ConfigPath, LogPath    string
	client                 *adminClient // its admin API
	plugin                 *adminClient // its plugin's rpc_listen (/metrics)

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process exited
	exitErr error
	killed  bool // by the demo, on purpose
}

// cluster runs the brokers as real processes on loopback.
type cluster struct {
	cfg clusterConfig
	// certs is the layout of the cluster's certificates (Root/certs);
	// zero with cfg.Insecure. They live outside every data_dir, so a
	// broker whose data directory is swapped keeps its identity.
	certs pki.Local
	// rpc is the demo's one client of every broker, as "operator".
	rpc     *rpc.Client
	brokers []*broker

	// loop is the loop-mounted copies disk of loopBroker, nil when none is
	// mounted; loopSkip says why a requested one could not be made.
	// INVARIANT: a non-nil loop is closed (unmounted, detached) by Stop.
	//
	// What is mounted is the broker's <data_dir>/copies only, like Kafka's
	// log.dirs kept apart from its metadata: the raft log, the Pebble
	// confirmation DB and the scrubber's state stay on the demo's directory.
	// Pebble treats a failed write as fatal by design (store's ConfirmMinFree
	// guard keeps it from writing on a nearly full disk), so a full or
	// read-only disk under it would be a broker crash, not the copy-disk fault
	// the diskfull and readonly stages are about. mkfs leaves a lost+found
	// directory in the mount; it stays (e2fsck -y would make it again anyway):
	// store.Open registers regular files named <segment-id>.seg only and skips
	// everything else, so lost+found and the stage's filler file are never
	// taken for copies.
	loop       *loopdisk.Disk
	loopBroker *broker
	loopSkip   string
	// loopCloseErr is what closing the loop disk in Stop returned.
	loopCloseErr error
}

// copyPath is where broker b keeps its copy of segment id (STORE_API.md):
// <data_dir>/copies/<shard>/<id>.seg (store format 2).
func (b *broker) copyPath(id meta.SegmentID) string {
	return store.CopyPath(b.Dir, id)
}

// copyFile is one copy file found under a copies directory.
type copyFile struct {
	id   meta.SegmentID
	path string
	ent  os.DirEntry
}

// listCopies lists the copy files under the copies directory dir: one
// shard directory after another (store format 2). A missing shard lists
// nothing.
func listCopies(dir string) []copyFile {
	var out []copyFile
	for i := range store.Shards {
		sd := filepath.Join(dir, store.ShardName(i))
		ents, err := os.ReadDir(sd)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if id, ok := strings.CutSuffix(e.Name(), ".seg"); ok && e.Type().IsRegular() {
				out = append(out, copyFile{id: meta.SegmentID(id), path: filepath.Join(sd, e.Name()), ent: e})
			}
		}
	}
	return out
}

// alive reports whether the process is running.
func (b *broker) alive() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done == nil {
		return false
	}
	select {
	case <-b.done:
		return false
	default:
		return true
	}
}

// freeLoopbackPorts returns n distinct free TCP addresses on 127.0.0.1. The
// listeners are held until all are chosen so no two are the same; another
// process could still take one before the broker binds it.
func freeLoopbackPorts(n int) ([]string, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	addrs := make([]string, 0, n)
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("choosing a free loopback port: %w", err)
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

func newCluster(cfg clusterConfig) (*cluster, error) {
	addrs, err := freeLoopbackPorts(4 * cfg.Brokers)
	if err != nil {
		return nil, err
	}
	c := &cluster{cfg: cfg}
	if err := c.makeCerts(); err != nil {
		return nil, err
	}
	for i := 0; i < cfg.Brokers; i++ {
		dir := filepath.Join(cfg.Root, fmt.Sprintf("b%d", i+1))
		b := &broker{
			ID:         meta.BrokerID(i + 1),
			Dir:        filepath.Join(dir, "data"),
			Admin:      addrs[4*i],
			Raft:       addrs[4*i+1],
			RPC:        addrs[4*i+2],
			Data:       addrs[4*i+3],
			ConfigPath: filepath.Join(dir, "malachid.toml"),
			LogPath:    filepath.Join(dir, "malachid.log"),
		}
		b.client = newAdminClient(b.Admin, c.rpc, cfg.Insecure)
		b.plugin = newAdminClient(b.RPC, c.rpc, cfg.Insecure)
		c.brokers = append(c.brokers, b)
	}
	return c, nil
}

// makeCerts writes the cluster's certificates under Root/certs (valid
// for 127.0.0.1 and localhost) and makes the demo's client with the
// operator's; with cfg.Insecure, a plaintext client and no files.
func (c *cluster) makeCerts() error {
	const timeout = 30 * time.Second
	if c.cfg.Insecure {
		c.rpc = rpc.NewClient(nil, adminCodes, timeout)
		return nil
	}
	ids := make([]meta.BrokerID, c.cfg.Brokers)
	for i := range ids {
		ids[i] = meta.BrokerID(i + 1)
	}
	l, err := pki.CreateLocal(filepath.Join(c.cfg.Root, "certs"), ids, []string{"127.0.0.1", "localhost"})
	if err != nil {
		return fmt.Errorf("the cluster's certificates: %w", err)
	}
	certs, err := pki.LoadClient(l.ClientDir(), string(pki.RoleOperator))
	if err != nil {
		return fmt.Errorf("the demo's operator certificate: %w", err)
	}
	c.certs, c.rpc = l, rpc.NewClient(certs, adminCodes, timeout)
	return nil
}

// cliFlags are the flags that let `malachi status` and the other
// commands talk to this cluster as the operator.
func (c *cluster) cliFlags() []string {
	if c.cfg.Insecure {
		return []string{"--insecure"}
	}
	return []string{"--certs-dir", c.certs.ClientDir(), "--user", string(pki.RoleOperator)}
}

// configText is broker b's TOML file (MALACHID_API.md).
func (c *cluster) configText(b *broker) string {
	var peers []string
	for _, p := range c.brokers {
		peers = append(peers, fmt.Sprintf("%q", fmt.Sprintf("%d=%s", p.ID, p.Raft)))
	}
	var s strings.Builder
	fmt.Fprintf(&s, "# written by malachi demo\n")
	fmt.Fprintf(&s, "id = %d\n", b.ID)
	fmt.Fprintf(&s, "data_dir = %q\n", b.Dir)
	fmt.Fprintf(&s, "admin_listen = %q\n", b.Admin)
	fmt.Fprintf(&s, "raft_listen = %q\n", b.Raft)
	fmt.Fprintf(&s, "peers = [%s]\n", strings.Join(peers, ", "))
	fmt.Fprintf(&s, "replication_factor = %d\n", c.cfg.RF)
	fmt.Fprintf(&s, "fault_injection = true\n")
	if c.cfg.Insecure {
		fmt.Fprintf(&s, "insecure = true\n")
	} else {
		fmt.Fprintf(&s, "certs_dir = %q\n", c.certs.BrokerDir(b.ID))
	}
	fmt.Fprintf(&s, "\n[raft]\n")
	fmt.Fprintf(&s, "heartbeat_timeout = %q\n", c.cfg.RaftTimeout.String())
	fmt.Fprintf(&s, "election_timeout = %q\n", c.cfg.RaftTimeout.String())
	fmt.Fprintf(&s, "leader_lease_timeout = %q\n", (c.cfg.RaftTimeout / 2).String())
	fmt.Fprintf(&s, "commit_timeout = %q\n", "5ms")
	fmt.Fprintf(&s, "\n[heal]\n")
	fmt.Fprintf(&s, "enabled = true\n")
	fmt.Fprintf(&s, "rpc_listen = %q\n", b.RPC)
	fmt.Fprintf(&s, "data_listen = %q\n", b.Data)
	fmt.Fprintf(&s, "tick = %q\n", c.cfg.Tick.String())
	fmt.Fprintf(&s, "grace = %q\n", c.cfg.Grace.String())
	if c.cfg.SettleBatch > 0 {
		fmt.Fprintf(&s, "settle_batch = %d\n", c.cfg.SettleBatch)
	}
	fmt.Fprintf(&s, "scrub_interval = %q\n", c.cfg.ScrubEvery.String())
	if c.cfg.ScrubRate > 0 {
		fmt.Fprintf(&s, "scrub_bytes_per_second = %d\n", c.cfg.ScrubRate)
	}
	if c.cfg.BackfillRate > 0 {
		fmt.Fprintf(&s, "backfill_bytes_per_second = %d\n", c.cfg.BackfillRate)
	}
	return s.String()
}

// Start writes every config, mounts the loop disk when asked for
// (LoopBroker) and starts every broker.
func (c *cluster) Start() error {
	for _, b := range c.brokers {
		if err := os.MkdirAll(b.Dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(b.ConfigPath, []byte(c.configText(b)), 0o600); err != nil {
			return err
		}
	}
	if b := c.broker(c.cfg.LoopBroker); b != nil && c.loop == nil {
		if err := c.mountCopiesDisk(b, c.cfg.LoopBytes); err != nil {
			c.loopSkip = err.Error()
		}
	}
	for _, b := range c.brokers {
		if err := c.startBroker(b); err != nil {
			return err
		}
	}
	return nil
}

// startBroker starts (or restarts) b's process, its output appended to its log.
func (c *cluster) startBroker(b *broker) error {
	logf, err := os.OpenFile(b.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.cfg.Bin, "--config", b.ConfigPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr(c.cfg.Keep)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting broker %d (%s --config %s): %w", b.ID, c.cfg.Bin, b.ConfigPath, err)
	}
	done := make(chan struct{})
	b.mu.Lock()
	b.cmd, b.done, b.exitErr, b.killed = cmd, done, nil, false
	b.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logf.Close()
		b.mu.Lock()
		b.exitErr = err
		b.mu.Unlock()
		close(done)
	}()
	return nil
}

// stopOnPurpose marks b's coming exit as intended (Kill, Terminate: not
// an unexpected exit) and returns its process and the channel closed when
// it exited; it fails when b was never started.
func (b *broker) stopOnPurpose() (*exec.Cmd, <-chan struct{}, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.killed = true
	if b.cmd == nil || b.done == nil {
		return nil, nil, fmt.Errorf("broker %d was never started", b.ID)
	}
	return b.cmd, b.done, nil
}

// Kill sends SIGKILL to b and waits for it to exit: the demo's broker crash.
func (c *cluster) Kill(b *broker) error {
	cmd, done, err := b.stopOnPurpose()
	if err != nil {
		return err
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill -9 broker %d (pid %d): %w", b.ID, cmd.Process.Pid, err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("broker %d (pid %d) did not exit 10s after SIGKILL", b.ID, cmd.Process.Pid)
	}
}

// copiesImage is where broker b's loop disk image lives: beside its
// data_dir, never inside the mount.
func (b *broker) copiesImage() string {
	return filepath.Join(filepath.Dir(b.Dir), "copies.img")
}

// mountCopiesDisk mounts a loop ext4 of size bytes at b's <data_dir>/copies,
// which must be empty or absent; b must not be running.
func (c *cluster) mountCopiesDisk(b *broker, size int64) error {
	if b.alive() {
		return fmt.Errorf("broker %d runs: its copies disk is mounted before it starts", b.ID)
	}
	dir := filepath.Join(b.Dir, "copies")
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return fmt.Errorf("broker %d: %s is not empty (%s): nothing is mounted over copies", b.ID, dir, ents[0].Name())
	}
	l, err := loopdisk.Create(b.copiesImage(), dir, size)
	if err != nil {
		return fmt.Errorf("broker %d's copies disk: %w", b.ID, err)
	}
	c.loop, c.loopBroker = l, b
	return nil
}

// moveCopiesToDisk puts broker b's copies on a new loop ext4 of size
// bytes while b runs: the disk is mounted aside, every copy file is copied
// onto it (synced), and the mount is moved over <data_dir>/copies (mount
// --move). A sealed copy holds no descriptor (store), so the broker's next
// request on it opens the file on the new disk; the old files stay under
// the mount point, hidden. b must be idle (the cluster healthy: no
// transfer writing a copy). The copies' file identities change, so their
// confirmations no longer apply: heal confirms them again. Stopping b
// instead would outlast the grace delay and have its replicas replaced.
// On an error nothing stays mounted.
func (c *cluster) moveCopiesToDisk(b *broker, size int64) (files int, bytes int64, err error) {
	dir := filepath.Join(b.Dir, "copies")
	aside := filepath.Join(filepath.Dir(b.Dir), "copies.mnt")
	l, err := loopdisk.Create(b.copiesImage(), aside, size)
	if err != nil {
		return 0, 0, fmt.Errorf("broker %d's copies disk: %w", b.ID, err)
	}
	// Every shard directory, each synced, then the copies in them.
	for i := 0; i < store.Shards && err == nil; i++ {
		sd := filepath.Join(aside, store.ShardName(i))
		if err = os.Mkdir(sd, 0o755); err == nil {
			err = syncDir(sd)
		}
	}
	for _, cf := range listCopies(dir) {
		if err != nil {
			break
		}
		var n int64
		n, err = copyFileSynced(cf.path, filepath.Join(aside, store.ShardName(store.Shard(cf.id)), cf.ent.Name()))
		files++
		bytes += n
	}
	if err == nil {
		err = syncDir(aside)
	}
	if err == nil {
		if err = l.MoveTo(dir); err == nil {
			os.Remove(aside)
			c.loop, c.loopBroker = l, b
			return files, bytes, nil
		}
	}
	l.Close()
	return 0, 0, fmt.Errorf("moving broker %d's copies onto its loop disk: %w", b.ID, err)
}

func copyFileSynced(from, to string) (int64, error) {
	src, err := os.Open(from)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(dst, src)
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("copying %s to %s: %w", from, to, err)
	}
	return n, nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// Terminate stops b as an operator would, SIGTERM and SIGKILL after 10 s,
// and waits for it to exit. Like Kill, it is on purpose: not an
// unexpected exit.
func (c *cluster) Terminate(b *broker) error {
	cmd, done, err := b.stopOnPurpose()
	if err != nil {
		return err
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot act on SIGTERM
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("SIGTERM to broker %d (pid %d): %w", b.ID, cmd.Process.Pid, err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-done:
		return fmt.Errorf("broker %d (pid %d) ignored SIGTERM for 10s and was killed", b.ID, cmd.Process.Pid)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("broker %d (pid %d) did not exit 10s after SIGKILL", b.ID, cmd.Process.Pid)
	}
}

// Stop ends every broker still running: SIGTERM, then SIGKILL after a
// grace; then it unmounts and detaches the loop disk, if any.
func (c *cluster) Stop() {
	defer c.closeLoop()
	var wg sync.WaitGroup
	for _, b := range c.brokers {
		b.mu.Lock()
		cmd, done := b.cmd, b.done
		b.mu.Unlock()
		if cmd == nil || done == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-done:
				return
			default:
			}
			_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot act on SIGTERM
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(3 * time.Second):
				_ = cmd.Process.Signal(syscall.SIGKILL)
				<-done
			}
		}()
	}
	wg.Wait()
}

// closeLoop unmounts and detaches the loop disk; its brokers must have
// exited. The error is kept in loopCloseErr.
func (c *cluster) closeLoop() {
	if c.loop == nil {
		return
	}
	c.loopCloseErr = c.loop.Close()
	c.loop, c.loopBroker = nil, nil
}

// unexpectedExit names a broker that exited without the demo killing it.
func (c *cluster) unexpectedExit() error {
	for _, b := range c.brokers {
		b.mu.Lock()
		done, killed, exitErr := b.done, b.killed, b.exitErr
		b.mu.Unlock()
		if done == nil || killed {
			continue
		}
		select {
		case <-done:
			return fmt.Errorf("broker %d (admin %s) exited on its own: %v; last lines of %s:\n%s", b.ID, b.Admin, exitErr, b.LogPath, tailFile(b.LogPath, 8))
		default:
		}
	}
	return nil
}

// WaitReady waits until every broker answers /v1/health and they agree on a
// leader.
func (c *cluster) WaitReady(ctx context.Context, timeout time.Duration) (meta.BrokerID, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var lastErr error
	for {
		if err := c.unexpectedExit(); err != nil {
			return 0, err
		}
		leader, err := c.leader(ctx, true)
		if err == nil {
			return leader, nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return 0, fmt.Errorf("cluster not ready after %v: %w", timeout, lastErr)
			}
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// leader asks every running broker for its view of the leader and returns
// it when they agree. With all, every running broker must answer.
func (c *cluster) leader(ctx context.Context, all bool) (meta.BrokerID, error) {
	var leader meta.BrokerID
	for _, b := range c.brokers {
		if !b.alive() {
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		h, err := b.client.Health(hctx)
		cancel()
		if err != nil {
			if all {
				return 0, err
			}
			continue
		}
		if h.Leader == 0 {
			return 0, fmt.Errorf("broker %d (admin %s) knows no leader yet", b.ID, b.Admin)
		}
		if leader != 0 && h.Leader != leader {
			return 0, fmt.Errorf("brokers disagree on the leader: %d and %d", leader, h.Leader)
		}
		leader = h.Leader
	}
	if leader == 0 {
		return 0, errors.New("no running broker answered /v1/health")
	}
	return leader, nil
}

func (c *cluster) broker(id meta.BrokerID) *broker {
	for _, b := range c.brokers {
		if b.ID == id {
			return b
		}
	}
	return nil
}

// running returns the brokers whose process is up.
func (c *cluster) running() []*broker {
	var out []*broker
	for _, b := range c.brokers {
		if b.alive() {
			out = append(out, b)
		}
	}
	return out
}

// tailFile returns the last n lines of a file, for error messages.
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "  (" + err.Error() + ")"
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	for i := range lines {
		lines[i] = "  " + lines[i]
	}
	return strings.Join(lines, "\n")
}
