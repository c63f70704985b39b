package bytesize

import (
	"fmt"
	"strconv"
	"strings"
)

// Size is a flag.Value holding a byte count written as a plain number or
// with a binary (KiB, MiB, GiB) or decimal (kB, MB, GB) unit.
type Size int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"kB", 1000}, {"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30},
	{"B", 1},
}

// Parse parses "1MiB", "64KiB", "4096", "1.5MiB". The result must
// be a whole, positive number of bytes.
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	if t == "" {
		return 0, fmt.Errorf("size %q: no number", s)
	}
	if v, err := strconv.ParseInt(t, 10, 64); err == nil {
		if v <= 0 {
			return 0, fmt.Errorf("size %q: want more than zero bytes", s)
		}
		if v > (1<<62)/mult {
			return 0, fmt.Errorf("size %q: too large", s)
		}
		return v * mult, nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: want a number of bytes such as 4096, 64KiB or 1MiB", s)
	}
	b := f * float64(mult)
	if b < 1 || b > 1<<62 || b != float64(int64(b)) {
		return 0, fmt.Errorf("size %q: want a whole, positive number of bytes", s)
	}
	return int64(b), nil
}

// Format renders n with a binary unit, e.g. "1.0 MiB".
func Format(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

func (b *Size) String() string { return Format(int64(*b)) }

func (b *Size) Set(s string) error {
	v, err := Parse(s)
	if err != nil {
		return err
	}
	*b = Size(v)
	return nil
}
