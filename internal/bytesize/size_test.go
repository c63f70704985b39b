package bytesize

import (
	"strings"
	"testing"
)

func TestParseByteSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"4096", 4096, ""},
		{"1MiB", 1 << 20, ""},
		{"64KiB", 64 << 10, ""},
		{"1.5MiB", 3 << 19, ""},
		{"2 GiB", 2 << 30, ""},
		{"10MB", 10_000_000, ""},
		{"1k", 0, "want a number of bytes"},
		{"0", 0, "more than zero"},
		{"-5", 0, "more than zero"},
		{"MiB", 0, "no number"},
		{"0.3B", 0, "whole, positive"},
		{"lots", 0, "want a number of bytes"},
	} {
		got, err := Parse(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), tc.in) {
				t.Errorf("Parse(%q) = %d, %v; want error naming the value and containing %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for in, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3 << 19: "1.5 MiB", 300 << 20: "300.0 MiB", 5 << 30: "5.0 GiB"} {
		if got := Format(in); got != want {
			t.Errorf("Format(%d) = %q, want %q", in, got, want)
		}
	}
}
