package kafkaload

import (
	"strings"
	"testing"
)

// polled and committed are a group consumer's events.
func polled(rs ...Record) []GroupEvent {
	var out []GroupEvent
	for _, r := range rs {
		out = append(out, GroupEvent{Record: r})
	}
	return out
}

func committed(p int32, off int64) GroupEvent {
	return GroupEvent{Commit: &Commit{Partition: p, Offset: off}}
}

func events(parts ...[]GroupEvent) []GroupEvent {
	var out []GroupEvent
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestCheckGroup runs the group checker over constructed histories: each
// kind of violation, and the at-least-once re-reads it allows beside
// them.
func TestCheckGroup(t *testing.T) {
	r := []Record{rec(0, 0, 0, 0), rec(0, 1, 1, 0), rec(0, 2, 0, 1), rec(0, 3, 1, 1)}
	ends := map[int32]int64{0: 4}
	other := rec(0, 1, 1, 9)
	for _, tc := range []struct {
		name         string
		h            GroupHistory
		want         GroupResult // Group, Committed, Violations and More not compared
		wantMentions string
	}{
		{name: "clean", h: GroupHistory{Events: events(polled(r[0], r[1]), []GroupEvent{committed(0, 2)}, polled(r[2], r[3]), []GroupEvent{committed(0, 4)}),
			Final: map[int32]int64{0: 4}}, want: GroupResult{Consumed: 4, Commits: 2}},
		{name: "re-read from the committed offset is allowed",
			h: GroupHistory{Events: events(polled(r[0], r[1], r[2]), []GroupEvent{committed(0, 2)}, polled(r[2], r[3]), []GroupEvent{committed(0, 4)}),
				Final: map[int32]int64{0: 4}}, want: GroupResult{Consumed: 4, Commits: 2, ConsumedTwice: 1}},
		{name: "skipped", h: GroupHistory{Events: events(polled(r[0], r[2], r[3]), []GroupEvent{committed(0, 4)}), Final: map[int32]int64{0: 4}},
			want: GroupResult{Consumed: 3, Skipped: 1, Commits: 1}, wantMentions: "skipped: t/0@1"},
		{name: "another record at its offset is a skip", h: GroupHistory{Events: events(polled(r[0], other, r[2], r[3]), []GroupEvent{committed(0, 4)}),
			Final: map[int32]int64{0: 4}}, want: GroupResult{Consumed: 3, Skipped: 1, Commits: 1}, wantMentions: "consumed t/0@1"},
		{name: "a commit went backwards", h: GroupHistory{Events: events(polled(r...), []GroupEvent{committed(0, 4), committed(0, 3)}),
			Final: map[int32]int64{0: 4}}, want: GroupResult{Consumed: 4, Commits: 2, CommitsLost: 1}, wantMentions: "committed 3 after 4"},
		{name: "resumed below an acknowledged commit",
			h: GroupHistory{Events: events(polled(r[0], r[1], r[2]), []GroupEvent{committed(0, 3)}, polled(r[1], r[2], r[3]), []GroupEvent{committed(0, 4)}),
				Final: map[int32]int64{0: 4}}, want: GroupResult{Consumed: 4, Commits: 2, ConsumedTwice: 2, CommitsLost: 1}, wantMentions: "resumed at offset 1, below its acknowledged commit 3"},
		{name: "the committed offset at the end is below the last acknowledged",
			h:    GroupHistory{Events: events(polled(r...), []GroupEvent{committed(0, 4)}), Final: map[int32]int64{0: 2}},
			want: GroupResult{Consumed: 4, Commits: 1, CommitsLost: 1}, wantMentions: "at the end is 2"},
		{name: "no committed offset at the end", h: GroupHistory{Events: events(polled(r...), []GroupEvent{committed(0, 4)})},
			want: GroupResult{Consumed: 4, Commits: 1, CommitsLost: 1}, wantMentions: "absent: true"},
		{name: "a committed offset beyond the high watermark",
			h:    GroupHistory{Events: events(polled(r...), []GroupEvent{committed(0, 9)}), Final: map[int32]int64{0: 9}},
			want: GroupResult{Consumed: 4, Commits: 1, CommitsLost: 2}, wantMentions: "beyond its high watermark 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.h.Group = "g"
			got := CheckGroup(r, tc.h, ends)
			if got.Group != "g" {
				t.Errorf("group %q, want g", got.Group)
			}
			gotCounts, wantCounts := got, tc.want
			gotCounts.Group, gotCounts.Committed, gotCounts.Violations, gotCounts.More = "", nil, nil, 0
			if gotCounts.Consumed != wantCounts.Consumed || gotCounts.Skipped != wantCounts.Skipped || gotCounts.ConsumedTwice != wantCounts.ConsumedTwice ||
				gotCounts.Commits != wantCounts.Commits || gotCounts.CommitsLost != wantCounts.CommitsLost {
				t.Fatalf("got %+v, want %+v", gotCounts, wantCounts)
			}
			ok := tc.want.Skipped == 0 && tc.want.CommitsLost == 0
			if got.OK() != ok {
				t.Fatalf("OK %v, want %v: %v", got.OK(), ok, got.Violations)
			}
			if tc.wantMentions != "" && !strings.Contains(strings.Join(got.Violations, "\n"), tc.wantMentions) {
				t.Fatalf("violations do not mention %q:\n%s", tc.wantMentions, strings.Join(got.Violations, "\n"))
			}
			if ok && len(got.Violations) != 0 {
				t.Fatalf("clean history with violations %v", got.Violations)
			}
		})
	}
}

// TestReportGroup: a group's committed offset lost fails the report,
// and is in the clients line and AllViolations.
func TestReportGroup(t *testing.T) {
	r := []Record{rec(0, 0, 0, 0)}
	g := CheckGroup(r, GroupHistory{Group: "g", Events: events(polled(r...), []GroupEvent{committed(0, 1)})}, map[int32]int64{0: 1})
	rep := &Report{Producers: 1, Topic: "t", Result: Check(r, r), Group: &g}
	if rep.OK() || rep.CommitsLost() != 1 {
		t.Fatalf("OK %v, committed offsets lost %d: want a failed report with 1", rep.OK(), rep.CommitsLost())
	}
	var text strings.Builder
	rep.WriteText(&text)
	for _, want := range []string{"VIOLATION: 1 producers", "1 committed offsets lost", "VIOLATION group committed offset lost"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	if v := rep.AllViolations(); len(v) != 1 || !strings.HasPrefix(v[0], "clients: group committed offset lost") {
		t.Errorf("AllViolations %q", v)
	}
}
