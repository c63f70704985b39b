package kafkaload

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

// rec is producer p's record seq stored in topic t partition part at off.
func rec(part int32, off int64, p, seq int) Record {
	k := Key(p, seq)
	return NewRecord("t", part, off, k, Value(k, 64))
}

// TestCheck runs the checker over constructed histories, one per
// violation kind and the clean ones beside them.
func TestCheck(t *testing.T) {
	clean := []Record{rec(0, 0, 0, 0), rec(0, 1, 1, 0), rec(0, 2, 0, 1), rec(1, 0, 1, 1), rec(1, 1, 0, 2)}
	other := rec(0, 1, 1, 7) // another record at partition 0 offset 1
	short := clean[1]
	short.Size--
	flipped := clean[1]
	flipped.Sum[3] ^= 1
	for _, tc := range []struct {
		name         string
		acked, read  []Record
		want         Result // Violations and More not compared
		wantMentions string
	}{
		{name: "clean", acked: clean, read: clean, want: Result{Acknowledged: 5, ReadBack: 5, Read: 5}},
		{name: "unacknowledged records read are fine", acked: clean[:2], read: clean,
			want: Result{Acknowledged: 2, ReadBack: 2, Read: 5}},
		{name: "nothing acknowledged, nothing read", want: Result{}},
		{name: "lost: missing at its offset", acked: clean, read: []Record{clean[0], clean[2], clean[3], clean[4]},
			want: Result{Acknowledged: 5, ReadBack: 4, Read: 4, Lost: 1}, wantMentions: "lost: t/0@1"},
		{name: "lost: past the high watermark", acked: clean, read: clean[:4],
			want: Result{Acknowledged: 5, ReadBack: 4, Read: 4, Lost: 1}, wantMentions: "nothing read at its offset"},
		{name: "lost: another key at its offset", acked: clean, read: []Record{clean[0], other, clean[2], clean[3], clean[4]},
			want: Result{Acknowledged: 5, ReadBack: 4, Read: 5, Lost: 1}, wantMentions: "kl-p001-000000007"},
		{name: "lost: value cut short", acked: clean, read: []Record{clean[0], short, clean[2], clean[3], clean[4]},
			want: Result{Acknowledged: 5, ReadBack: 4, Read: 5, Lost: 1}, wantMentions: "63 value bytes"},
		{name: "lost: value bytes differ", acked: clean, read: []Record{clean[0], flipped, clean[2], clean[3], clean[4]},
			want: Result{Acknowledged: 5, ReadBack: 4, Read: 5, Lost: 1}},
		{name: "lost: two acknowledgements of one offset", acked: append([]Record{other}, clean...), read: clean,
			want: Result{Acknowledged: 6, ReadBack: 5, Read: 5, Lost: 1}},
		{name: "duplicated: a key read twice", acked: clean,
			read: append(append([]Record(nil), clean[:3]...), rec(0, 3, 0, 1), clean[3], clean[4]),
			want: Result{Acknowledged: 5, ReadBack: 5, Read: 6, Duplicated: 1}, wantMentions: "duplicated: t/0@3"},
		{name: "duplicated: across partitions", acked: clean, read: append(append([]Record(nil), clean...), rec(0, 3, 0, 2)),
			want: Result{Acknowledged: 5, ReadBack: 5, Read: 6, Duplicated: 1}},
		{name: "out of order: offsets not increasing", acked: clean,
			read: []Record{clean[0], clean[2], clean[1], clean[3], clean[4]},
			want: Result{Acknowledged: 5, ReadBack: 5, Read: 5, OutOfOrder: 1}, wantMentions: "read after offset 2"},
		{name: "out of order: an offset read twice", acked: clean[:1], read: []Record{clean[0], NewRecord("t", 0, 0, nil, []byte("x"))},
			want: Result{Acknowledged: 1, ReadBack: 1, Read: 2, OutOfOrder: 1}},
		{name: "out of order: a producer's sequence", acked: []Record{rec(0, 0, 0, 1), rec(0, 1, 0, 0)},
			read: []Record{rec(0, 0, 0, 1), rec(0, 1, 0, 0)},
			want: Result{Acknowledged: 2, ReadBack: 2, Read: 2, OutOfOrder: 1}, wantMentions: "producer 0's t/0@1"},
		{name: "a producer's sequence per partition", acked: []Record{rec(0, 0, 0, 5), rec(1, 0, 0, 1)},
			read: []Record{rec(0, 0, 0, 5), rec(1, 0, 0, 1)},
			want: Result{Acknowledged: 2, ReadBack: 2, Read: 2}},
		{name: "other keys: no producer order, empty keys no duplicates", acked: nil,
			read: []Record{NewRecord("t", 0, 0, []byte("key-2"), nil), NewRecord("t", 0, 1, []byte("key-1"), nil),
				NewRecord("t", 0, 2, nil, []byte("a")), NewRecord("t", 0, 3, nil, []byte("a"))},
			want: Result{Read: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ackedBefore := append([]Record(nil), tc.acked...)
			got := Check(tc.acked, tc.read)
			viol := got.Violations
			got.Violations, got.More = nil, 0
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Check = %+v, want %+v (violations %q)", got, tc.want, viol)
			}
			if n := got.Lost + got.Duplicated + got.OutOfOrder; len(viol) != n || got.OK() != (n == 0) {
				t.Fatalf("%d violations described for %d counted, OK %v: %q", len(viol), n, got.OK(), viol)
			}
			if got.ReadBack+got.Lost != got.Acknowledged {
				t.Fatalf("read back %d + lost %d != acknowledged %d", got.ReadBack, got.Lost, got.Acknowledged)
			}
			if tc.wantMentions != "" && !strings.Contains(strings.Join(viol, "\n"), tc.wantMentions) {
				t.Fatalf("violations %q do not mention %q", viol, tc.wantMentions)
			}
			for i := range ackedBefore {
				if tc.acked[i] != ackedBefore[i] {
					t.Fatal("Check changed its input")
				}
			}
		})
	}
}

// TestCheckBounded: past maxViolations, violations are counted, not
// described.
func TestCheckBounded(t *testing.T) {
	var acked []Record
	for i := range 50 {
		acked = append(acked, rec(0, int64(i), 0, i))
	}
	got := Check(acked, nil)
	if got.Lost != 50 || len(got.Violations) != maxViolations || got.More != 50-maxViolations {
		t.Fatalf("lost %d, %d described, %d more", got.Lost, len(got.Violations), got.More)
	}
}

func TestKeyRoundTrip(t *testing.T) {
	for _, c := range [][2]int{{0, 0}, {3, 42}, {999, 123456789}, {1000, 1 << 40}} {
		p, s, ok := ParseKey(string(Key(c[0], c[1])))
		if !ok || p != c[0] || s != c[1] {
			t.Errorf("ParseKey(Key(%d, %d)) = %d, %d, %v", c[0], c[1], p, s, ok)
		}
	}
	for _, k := range []string{"", "key-000001", "kl-p", "kl-p1", "kl-px-1", "kl-p1-y", "kl-p-1-2"} {
		if _, _, ok := ParseKey(k); ok {
			t.Errorf("ParseKey(%q) ok", k)
		}
	}
	v := Value(Key(1, 2), 100)
	if len(v) != 100 || !bytes.HasPrefix(v, []byte("kl-p001-000000002|")) || bytes.Equal(v, Value(Key(1, 3), 100)) {
		t.Fatalf("Value = %q", v)
	}
	if got := Value(Key(1, 2), 0); string(got) != "kl-p001-000000002|" {
		t.Fatalf("Value of size 0 = %q, want the key and its bar", got)
	}
}

func TestManualKcat(t *testing.T) {
	m := Manual{Seeds: []string{"127.0.0.1:1", "127.0.0.1:2"}, CA: "/tmp/d/certs/client/ca.crt", Cert: "/tmp/my dir/client.crt", Key: "/k'ey", Topic: "hello"}
	want := `kcat -b 127.0.0.1:1,127.0.0.1:2 -X security.protocol=ssl -X ssl.ca.location=/tmp/d/certs/client/ca.crt -X ssl.certificate.location='/tmp/my dir/client.crt' -X ssl.key.location='/k'\''ey' -t hello -P`
	if got := m.Kcat(); got != want {
		t.Fatalf("Kcat() =\n%s\nwant\n%s", got, want)
	}
	if got := (Manual{Seeds: []string{"h:1"}, Topic: "t"}).Kcat(); got != "kcat -b h:1 -t t -P" {
		t.Fatalf("plaintext Kcat() = %s", got)
	}
}

// TestQuantileMs: nearest-rank quantiles of acknowledgement latencies, in
// milliseconds, whatever the order they came in; none is 0.
func TestQuantileMs(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		q    float64
		want float64
	}{{0.5, 50}, {0.99, 99}, {1, 100}, {0, 1}} {
		if got := QuantileMs(ds, tc.q); got != tc.want {
			t.Errorf("quantile %v of 1..100 ms = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := QuantileMs(nil, 0.99); got != 0 {
		t.Errorf("quantile of nothing = %v, want 0", got)
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("QuantileMs sorted its argument in place")
	}
}
