package demo

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// TestCompareFlags: --backfill-rate compare takes the kill with clients on
// 4+ brokers; anything else is a usage error that names what was wrong.
func TestCompareFlags(t *testing.T) {
	o, err := ParseFlags([]string{"--backfill-rate", "compare", "--clients", "2", "--faults", "kill"}, io.Discard)
	if err != nil || !o.Compare || o.Clients != 2 {
		t.Fatalf("compare with 2 clients: %+v, %v", o.Compare, err)
	}
	if o, err := ParseFlags([]string{"--backfill-rate", "4096"}, io.Discard); err != nil || o.Compare || o.BackfillRate != 4096 {
		t.Fatalf("--backfill-rate 4096: compare %v rate %d, %v", o.Compare, o.BackfillRate, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--backfill-rate", "compare", "--clients", "0"}, "--clients"},
		{[]string{"--backfill-rate", "compare", "--clients", "1", "--faults", "kill,pause"}, "kill stage only"},
		{[]string{"--backfill-rate", "compare", "--clients", "1", "--brokers", "3"}, "--brokers 4"},
		{[]string{"--backfill-rate", "compare", "--clients", "1", "--nemesis", "random"}, "not --nemesis"},
		{[]string{"--backfill-rate", "compare", "--clients", "1", "--insecure"}, "--insecure"},
		{[]string{"--backfill-rate", "fast"}, "compare"},
		{[]string{"--backfill-rate", "compare", "--clients", "1", "--compare-rounds", "0"}, "--compare-rounds 0"},
	} {
		_, err := ParseFlags(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one naming %q", c.args, err, c.want)
		}
		if err != nil && !errors.Is(err, ErrUsage) && !strings.Contains(err.Error(), "invalid value") {
			t.Errorf("%v: %v is neither a usage error nor a flag error", c.args, err)
		}
	}
}
