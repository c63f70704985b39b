package plugin

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/internal/pebblelog"
	"github.com/malachi-log/malachi/meta"
)

// PassRecord is one heal pass as the pass history keeps it: what the
// coordinator found and did, when, and at which metadata index.
type PassRecord struct {
	// Seq numbers this broker's passes 1, 2, 3, ... across its leadership
	// terms and restarts (a new data directory starts again at 1, with a
	// new PassHistory.Began).
	Seq    uint64        `json:"seq"`
	Broker meta.BrokerID `json:"broker"`
	// Started is when the pass began (before it read the metadata and
	// probed), Ended when its report was published.
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
	// ViewIndex is the metadata index the pass read; AppliedIndex the
	// index of the last command it applied (0: it applied none).
	ViewIndex    uint64      `json:"view_index"`
	AppliedIndex uint64      `json:"applied_index,omitempty"`
	Report       heal.Report `json:"report"`
}

// PassHistory is the answer of GET /passes (malachid: GET /v1/passes): the
// passes this broker's coordinator ran after Since, oldest first.
type PassHistory struct {
	Broker meta.BrokerID `json:"broker"`
	// Leader says this broker runs the coordinator now.
	Leader bool `json:"leader"`
	// Began is when this history began: the first start of the plugin on
	// this data directory. A reader that sees it change lost the history
	// it read before (the data directory was replaced).
	Began time.Time `json:"began"`
	// First and Last are the oldest and newest passes kept (0: none yet).
	// Passes after a reader's since and before First were dropped from the
	// bound (Dropped counts them); the reader did not see them.
	First   uint64 `json:"first"`
	Last    uint64 `json:"last"`
	Dropped uint64 `json:"dropped,omitempty"`
	// More says the limit left passes out: ask again with since = the
	// last one returned.
	More   bool         `json:"more,omitempty"`
	Passes []PassRecord `json:"passes"`
}

// The history's bounds: at most this many passes and this many encoded
// bytes are kept (the oldest go first); a request returns at most
// passPageMax of them.
const (
	passHistoryMax      = 4096
	passHistoryMaxBytes = 32 << 20
	passPageDefault     = 512
	passPageMax         = passHistoryMax
)

// passLog is the bounded pass history: in memory, and in Pebble under
// <data_dir>/passes so that it outlives a restart (written without
// fsync: a killed process keeps it, a crashed machine may lose the
// last passes).
type passLog struct {
	db *pebble.DB

	mu    sync.Mutex
	began time.Time
	recs  []storedPass // oldest first, contiguous seqs
	bytes int
	next  uint64 // the next pass's seq
}

// storedPass is a kept pass and its encoded size (what the byte bound
// counts).
type storedPass struct {
	rec  PassRecord
	size int
}

var passBeganKey = []byte("began")

func passKey(seq uint64) []byte {
	k := make([]byte, 9)
	k[0] = 'p'
	binary.BigEndian.PutUint64(k[1:], seq)
	return k
}

// openPassLog opens (or creates) the history in dir and loads what the
// bounds keep of it.
func openPassLog(dir string, now time.Time, log zerolog.Logger) (*passLog, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebblelog.New(log, "passes"), MemTableSize: 1 << 20})
	if err != nil {
		return nil, fmt.Errorf("plugin: pass history %s: %w", dir, err)
	}
	l := &passLog{db: db, next: 1}
	if err := l.load(now); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("plugin: pass history %s: %w", dir, err)
	}
	return l, nil
}

func (l *passLog) load(now time.Time) error {
	v, closer, err := l.db.Get(passBeganKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		l.began = now.UTC()
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(l.began.UnixNano()))
		if err := l.db.Set(passBeganKey, b[:], pebble.Sync); err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		if len(v) != 8 {
			_ = closer.Close()
			return fmt.Errorf("key %q holds %d bytes, want 8", passBeganKey, len(v))
		}
		l.began = time.Unix(0, int64(binary.BigEndian.Uint64(v))).UTC()
		_ = closer.Close()
	}
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: passKey(0), UpperBound: []byte{'q'}})
	if err != nil {
		return err
	}
	var rev []storedPass
	for ok := it.Last(); ok && len(rev) < passHistoryMax && l.bytes < passHistoryMaxBytes; ok = it.Prev() {
		k := it.Key()
		if len(k) != 9 {
			continue
		}
		var rec PassRecord
		if err := json.Unmarshal(it.Value(), &rec); err != nil {
			_ = it.Close()
			return fmt.Errorf("pass %d: %w", binary.BigEndian.Uint64(k[1:]), err)
		}
		rev = append(rev, storedPass{rec: rec, size: len(it.Value())})
		l.bytes += len(it.Value())
	}
	if err := it.Close(); err != nil {
		return err
	}
	for i := len(rev) - 1; i >= 0; i-- {
		l.recs = append(l.recs, rev[i])
	}
	if n := len(l.recs); n > 0 {
		l.next = l.recs[n-1].rec.Seq + 1
		// What the bounds dropped goes from disk too.
		return l.db.DeleteRange(passKey(0), passKey(l.recs[0].rec.Seq), pebble.NoSync)
	}
	return nil
}

// add numbers r, keeps it, and drops the oldest passes past the bounds.
func (l *passLog) add(r PassRecord) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.Seq = l.next
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	l.next++
	l.recs = append(l.recs, storedPass{rec: r, size: len(raw)})
	l.bytes += len(raw)
	drop := 0
	for len(l.recs)-drop > 1 && (len(l.recs)-drop > passHistoryMax || l.bytes > passHistoryMaxBytes) {
		l.bytes -= l.recs[drop].size
		drop++
	}
	b := l.db.NewBatch()
	defer b.Close()
	if err := b.Set(passKey(r.Seq), raw, nil); err != nil {
		return err
	}
	if drop > 0 {
		if err := b.DeleteRange(passKey(l.recs[0].rec.Seq), passKey(l.recs[drop].rec.Seq), nil); err != nil {
			return err
		}
		l.recs = append(l.recs[:0:0], l.recs[drop:]...)
	}
	return b.Commit(pebble.NoSync)
}

// since returns the kept passes after seq since, at most limit of them
// (0: passPageDefault).
func (l *passLog) since(since uint64, limit int) PassHistory {
	if limit <= 0 {
		limit = passPageDefault
	}
	limit = min(limit, passPageMax)
	l.mu.Lock()
	defer l.mu.Unlock()
	h := PassHistory{Began: l.began, Passes: []PassRecord{}}
	if len(l.recs) == 0 {
		return h
	}
	h.First, h.Last = l.recs[0].rec.Seq, l.recs[len(l.recs)-1].rec.Seq
	if since+1 < h.First {
		h.Dropped = h.First - since - 1
	}
	i := 0
	if since >= h.First {
		i = int(since - h.First + 1)
	}
	for ; i < len(l.recs) && len(h.Passes) < limit; i++ {
		h.Passes = append(h.Passes, l.recs[i].rec)
	}
	h.More = i < len(l.recs)
	return h
}

func (l *passLog) close() error { return l.db.Close() }

// ParsePassQuery reads a pass-history request's since and limit (both
// optional, decimal). Its errors wrap meta.ErrInvalid and name the
// parameter.
func ParsePassQuery(q url.Values) (since uint64, limit int, err error) {
	if s := q.Get("since"); s != "" {
		if since, err = strconv.ParseUint(s, 10, 64); err != nil {
			return 0, 0, fmt.Errorf("%w: since=%q: want a pass number (0 or more)", meta.ErrInvalid, s)
		}
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > passPageMax {
			return 0, 0, fmt.Errorf("%w: limit=%q: want 1 to %d passes", meta.ErrInvalid, s, passPageMax)
		}
		limit = n
	}
	return since, limit, nil
}

// Passes returns this broker's pass history after pass since: at most
// limit passes (0: 512), oldest first. On a disabled or unstarted plugin
// it is empty.
func (p *Plugin) Passes(since uint64, limit int) PassHistory {
	p.mu.Lock()
	l, leader := p.passes, p.status.Leader
	p.mu.Unlock()
	if l == nil {
		return PassHistory{Broker: p.deps.Self, Passes: []PassRecord{}}
	}
	h := l.since(since, limit)
	h.Broker, h.Leader = p.deps.Self, leader
	return h
}

// ReadPassHistory reads the pass history a stopped broker left in its
// data directory (dataDir/passes): for a post-mortem of a broker that
// cannot be started, or whose directory is about to be replaced. It
// fails when the directory holds none, or a running broker holds it.
func ReadPassHistory(dataDir string, self meta.BrokerID) (PassHistory, error) {
	dir := filepath.Join(dataDir, "passes")
	if _, err := os.Stat(dir); err != nil {
		return PassHistory{}, fmt.Errorf("plugin: pass history: %w", err)
	}
	l, err := openPassLog(dir, time.Now(), zerolog.Nop())
	if err != nil {
		return PassHistory{}, err
	}
	defer l.close()
	h := l.since(0, passPageMax)
	h.Broker = self
	return h, nil
}
