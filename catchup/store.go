package catchup

import (
	"errors"
	"fmt"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
)

// StoreSource is the Source of a broker's *store.DB. It translates the
// store's refusals into catchup's: store.ErrUnknownCopy → ErrUnknownSegment,
// store.ErrNotSealed → ErrUnsealed, store.ErrLatched → ErrLatched,
// store.ErrShort and store.ErrCorrupt (the footer disagrees with the
// expectation) → ErrMismatch, store.ErrBusy (the copy is itself being
// received) → ErrBusy. The store's error stays wrapped too.
type StoreSource struct{ DB *store.DB }

// OpenSource implements Source with store.DB.OpenSource, which checks the
// file's size and its seal footer against seg.
func (s StoreSource) OpenSource(seg meta.Segment) (File, int64, error) {
	f, err := s.DB.OpenSource(seg.ID, seg)
	if err != nil {
		return nil, 0, classifySource(err)
	}
	return f, seg.ByteSize + store.FooterSize, nil
}

func classifySource(err error) error {
	var kind error
	switch {
	case errors.Is(err, store.ErrLatched):
		kind = ErrLatched
	case errors.Is(err, store.ErrUnknownCopy):
		kind = ErrUnknownSegment
	case errors.Is(err, store.ErrNotSealed):
		kind = ErrUnsealed
	case errors.Is(err, store.ErrShort), errors.Is(err, store.ErrCorrupt):
		kind = ErrMismatch
	case errors.Is(err, store.ErrBusy):
		kind = ErrBusy
	case errors.Is(err, store.ErrInvalid):
		kind = ErrMalformed
	default:
		return err
	}
	return fmt.Errorf("%w: %w", kind, err)
}

// StoreSink is the Sink of a broker's *store.DB: store.DB.OpenTarget finds
// the copy's durable end and cuts it there; Commit is store.Target.Commit,
// whose store.ErrCorrupt and store.ErrShort are reported as ErrVerify.
type StoreSink struct{ DB *store.DB }

// OpenTarget implements Sink.
func (s StoreSink) OpenTarget(seg meta.Segment) (Target, error) {
	t, err := s.DB.OpenTarget(seg.ID, seg)
	if err != nil {
		return nil, err
	}
	return storeTarget{t: t, size: seg.ByteSize + store.FooterSize}, nil
}

type storeTarget struct {
	t    *store.Target
	size int64
}

func (t storeTarget) Resume() int64 { return t.t.Resume() }
func (t storeTarget) Size() int64   { return t.size }
func (t storeTarget) File() File    { return t.t.File() }
func (t storeTarget) Abort() error  { return t.t.Abort() }

// Fail implements Failer: store.Target.Fail latches the copy.
func (t storeTarget) Fail(op string, err error) error { return t.t.Fail(op, err) }

func (t storeTarget) Commit() error {
	err := t.t.Commit()
	if err != nil && !errors.Is(err, store.ErrLatched) && (errors.Is(err, store.ErrCorrupt) || errors.Is(err, store.ErrShort)) {
		return fmt.Errorf("%w: %w", ErrVerify, err)
	}
	return err
}
