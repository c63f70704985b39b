package psi

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// DefaultDir is where the kernel publishes the pressure files.
const DefaultDir = "/proc/pressure"

// Line is one line of a pressure file: the share of time (percent) some
// (or all, for "full") non-idle tasks were stalled, averaged over 10, 60
// and 300 seconds, and the total stall time in microseconds.
type Line struct {
	Avg10, Avg60, Avg300 float64
	Total                uint64
}

// Resource is one resource's pressure. Known is false when the kernel
// does not report it; HasFull when its file has a "full" line.
type Resource struct {
	Known   bool
	Some    Line
	Full    Line
	HasFull bool
}

// Pressure is one reading of the resources pace uses.
type Pressure struct {
	IO, CPU Resource
}

// Reader reads the pressure files under Dir (DefaultDir when empty).
type Reader struct {
	Dir string
}

// Read reads io and cpu. A missing file leaves its Resource unknown
// (invariant 1); an unreadable or malformed one is an error naming it, and
// the other resource is still returned.
func (r Reader) Read() (Pressure, error) {
	dir := r.Dir
	if dir == "" {
		dir = DefaultDir
	}
	var p Pressure
	var errs []error
	for _, f := range []struct {
		name string
		res  *Resource
	}{{"io", &p.IO}, {"cpu", &p.CPU}} {
		res, err := ReadFile(filepath.Join(dir, f.name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		*f.res = res
	}
	return p, errors.Join(errs...)
}

// ReadFile reads one pressure file; a missing one (or one the kernel
// refuses with EOPNOTSUPP) is an unknown Resource and no error.
func ReadFile(path string) (Resource, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EOPNOTSUPP) {
		return Resource{}, nil
	}
	if err != nil {
		return Resource{}, fmt.Errorf("psi: %w", err)
	}
	return Parse(path, data)
}

// Parse parses the text of the pressure file named name (for errors).
func Parse(name string, data []byte) (Resource, error) {
	var r Resource
	seen := map[string]bool{}
	for i, raw := range bytes.Split(data, []byte("\n")) {
		text := strings.TrimSpace(string(raw))
		if text == "" {
			continue
		}
		kind, rest, _ := strings.Cut(text, " ")
		var dst *Line
		switch kind {
		case "some":
			dst = &r.Some
		case "full":
			dst, r.HasFull = &r.Full, true
		default:
			return Resource{}, fmt.Errorf("psi: %s: line %d: %q: want \"some\" or \"full\"", name, i+1, kind)
		}
		if seen[kind] {
			return Resource{}, fmt.Errorf("psi: %s: line %d: a second %q line", name, i+1, kind)
		}
		seen[kind] = true
		l, err := parseLine(rest)
		if err != nil {
			return Resource{}, fmt.Errorf("psi: %s: line %d (%s): %w", name, i+1, kind, err)
		}
		*dst = l
	}
	if !seen["some"] {
		return Resource{}, fmt.Errorf("psi: %s: no \"some\" line", name)
	}
	r.Known = true
	return r, nil
}

// parseLine parses "avg10=… avg60=… avg300=… total=…".
func parseLine(s string) (Line, error) {
	var l Line
	avgs := map[string]*float64{"avg10": &l.Avg10, "avg60": &l.Avg60, "avg300": &l.Avg300}
	found := 0
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return Line{}, fmt.Errorf("field %q: want key=value", f)
		}
		if dst, ok := avgs[k]; ok {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || x < 0 || x > 100 {
				return Line{}, fmt.Errorf("%s = %q: want a percentage", k, v)
			}
			*dst, found = x, found+1
		} else if k == "total" {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return Line{}, fmt.Errorf("total = %q: want a count of microseconds", v)
			}
			l.Total, found = n, found+1
		}
	}
	if found != 4 {
		return Line{}, fmt.Errorf("%q: want each of avg10, avg60, avg300 and total once", s)
	}
	return l, nil
}
