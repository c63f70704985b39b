package ratelog

import (
	"sync"
	"time"
)

// DefaultInterval is the interval of a zero Limiter.
const DefaultInterval = time.Minute

// Limiter says when a key may log again. The zero value allows one line
// per key per DefaultInterval.
type Limiter struct {
	// Interval between two lines of one key; 0 means DefaultInterval.
	Interval time.Duration

	mu   sync.Mutex
	keys map[string]*entry // protected by mu
}

type entry struct {
	last       time.Time
	suppressed int
}

// Allow reports whether key may log at now and, when it may, how many of
// its refusals were not logged since its last line.
func (l *Limiter) Allow(key string, now time.Time) (ok bool, suppressed int) {
	iv := l.Interval
	if iv <= 0 {
		iv = DefaultInterval
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		l.keys = map[string]*entry{}
	}
	e := l.keys[key]
	if e != nil && now.Sub(e.last) < iv {
		e.suppressed++
		return false, 0
	}
	if e == nil {
		if len(l.keys) >= 4096 {
			for k, v := range l.keys {
				if now.Sub(v.last) >= iv {
					delete(l.keys, k)
				}
			}
		}
		e = &entry{}
		l.keys[key] = e
	}
	suppressed, e.suppressed, e.last = e.suppressed, 0, now
	return true, suppressed
}
