package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/cluster"
	"github.com/malachi-log/malachi/internal/retry"
	"github.com/malachi-log/malachi/meta"
)

// fakeLeader scripts forwarder's dependencies: leaders[i] and calls[i]
// answer the i-th try (the last one repeats), quorumAt fails the quorum
// check from that check on (0: never), and every wait of the backoff is
// recorded and answered at once.
type fakeLeader struct {
	leaders  []error // nil: broker 3 at 10.0.0.3:7001 leads
	calls    []error
	quorumAt int

	tried, asked, checked int
	paths                 []string
	waits                 []time.Duration
	onWait                func()
}

func pick(errs []error, i int) error {
	if len(errs) == 0 {
		return nil
	}
	return errs[min(i, len(errs)-1)]
}

func (f *fakeLeader) forwarder() forwarder {
	return forwarder{
		leader: func() (meta.BrokerID, string, error) {
			err := pick(f.leaders, f.tried)
			f.tried++
			if err != nil {
				return 0, "", err
			}
			return 3, "10.0.0.3:7001", nil
		},
		call: func(_ context.Context, method, addr, path string, _, resp any) error {
			f.paths = append(f.paths, method+" "+addr+path)
			err := pick(f.calls, f.asked)
			f.asked++
			if err == nil {
				resp.(*applyResponse).Index = 42
			}
			return err
		},
		quorum: func() error {
			f.checked++
			if f.quorumAt > 0 && f.checked >= f.quorumAt {
				return fmt.Errorf("%w: 1 of 3 voters reachable", cluster.ErrNoQuorum)
			}
			return nil
		},
		backoff: retry.Backoff{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond, After: func(d time.Duration) <-chan time.Time {
			f.waits = append(f.waits, d)
			if f.onWait != nil {
				f.onWait()
			}
			ch := make(chan time.Time, 1)
			ch <- time.Time{}
			return ch
		}},
	}
}

func applyReq(resp *applyResponse, here func() (bool, error)) leaderRequest {
	return leaderRequest{what: "apply seal_segment", method: "POST", path: "/v1/internal/apply", resp: resp, here: here}
}

var (
	errRefusedConn   = fmt.Errorf("rpc: POST /v1/internal/apply at 10.0.0.3:7001: dial tcp: %w", syscall.ECONNREFUSED)
	errNoLeaderKnown = fmt.Errorf("%w: no leader known", errNoLeader)
)

func TestForwardServedHereAsksNoLeader(t *testing.T) {
	var fl fakeLeader
	f := fl.forwarder()
	herr := errors.New("local refusal")
	err := f.do(context.Background(), applyReq(&applyResponse{}, func() (bool, error) { return true, herr }))
	if err != herr || fl.tried+fl.asked+len(fl.waits) != 0 {
		t.Fatalf("err %v, leader asked %d, called %d, waits %v; want the local error as it is and nothing else", err, fl.tried, fl.asked, fl.waits)
	}
}

func TestForwardRetriesAcrossAnElection(t *testing.T) {
	fl := fakeLeader{
		leaders: []error{errNoLeaderKnown, nil},
		calls:   []error{errRefusedConn, fmt.Errorf("%w: broker 3", cluster.ErrNotLeader), fmt.Errorf("%w: term ended", cluster.ErrLeadershipLost), nil},
	}
	f := fl.forwarder()
	var resp applyResponse
	if err := f.do(context.Background(), applyReq(&resp, nil)); err != nil {
		t.Fatal(err)
	}
	if resp.Index != 42 {
		t.Fatalf("answer %+v, want the leader's index 42", resp)
	}
	if want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond}; !slices.Equal(fl.waits, want) {
		t.Fatalf("waits %v, want %v", fl.waits, want)
	}
	if fl.paths[0] != "POST 10.0.0.3:7001/v1/internal/apply" {
		t.Fatalf("asked %v, want the leader's internal route", fl.paths)
	}
}

func TestForwardStopsWhenThisBrokerLeads(t *testing.T) {
	fl := fakeLeader{leaders: []error{errNoLeaderKnown}}
	f := fl.forwarder()
	tries := 0
	err := f.do(context.Background(), applyReq(&applyResponse{}, func() (bool, error) {
		tries++
		return tries == 3, nil
	}))
	if err != nil || tries != 3 || fl.asked != 0 || len(fl.waits) != 2 {
		t.Fatalf("err %v, tries here %d, leader called %d, waits %v; want served here on the third try", err, tries, fl.asked, fl.waits)
	}
}

func TestForwardErrorsNameTheLeaderAndWhy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fl    fakeLeader
		ctx   bool // cancel the context at the first wait
		is    error
		want  []string
		waits int
	}{
		{
			name: "the leader refuses: at once",
			fl:   fakeLeader{calls: []error{fmt.Errorf("%w: replica 9 is not registered", errBadRequest)}},
			is:   errBadRequest,
			want: []string{"apply seal_segment: leader 3 at 10.0.0.3:7001: malachid: bad request: replica 9 is not registered"},
		},
		{
			name:  "the quorum is lost",
			fl:    fakeLeader{calls: []error{errRefusedConn}, quorumAt: 3},
			is:    cluster.ErrNoQuorum,
			want:  []string{"apply seal_segment: cluster: no quorum: 1 of 3 voters reachable", "last: leader 3 at 10.0.0.3:7001: rpc: ", "connection refused"},
			waits: 2,
		},
		{
			name:  "the context ends",
			fl:    fakeLeader{leaders: []error{errNoLeaderKnown}},
			ctx:   true,
			is:    context.Canceled,
			want:  []string{"apply seal_segment: context canceled (last: malachid: no leader reachable: no leader known)"},
			waits: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.ctx {
				tc.fl.onWait = cancel
			}
			f := tc.fl.forwarder()
			err := f.do(ctx, applyReq(&applyResponse{}, nil))
			if !errors.Is(err, tc.is) {
				t.Fatalf("err %v, want it to wrap %v", err, tc.is)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err %q does not say %q", err, w)
				}
			}
			if len(tc.fl.waits) != tc.waits {
				t.Errorf("waits %v, want %d", tc.fl.waits, tc.waits)
			}
		})
	}
}
