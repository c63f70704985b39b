package plugin

import (
	"errors"
	"fmt"
	"os"

	"github.com/malachi-log/malachi/catchup"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
)

// storeSource adapts a *store.DB to catchup.Source.
type storeSource struct{ db *store.DB }

func (s storeSource) OpenSource(seg meta.Segment) (catchup.File, int64, error) {
	f, err := s.db.OpenSource(seg.ID, seg)
	if err != nil {
		switch {
		case errors.Is(err, store.ErrUnknownCopy), errors.Is(err, os.ErrNotExist):
			err = fmt.Errorf("%w: %w", catchup.ErrUnknownSegment, err)
		case errors.Is(err, store.ErrNotSealed):
			err = fmt.Errorf("%w: %w", catchup.ErrUnsealed, err)
		case errors.Is(err, store.ErrLatched):
			err = fmt.Errorf("%w: %w", catchup.ErrLatched, err)
		case errors.Is(err, store.ErrShort), errors.Is(err, store.ErrCorrupt):
			err = fmt.Errorf("%w: %w", catchup.ErrMismatch, err)
		}
		return nil, 0, err
	}
	return f, seg.ByteSize + store.FooterSize, nil
}

// storeSink adapts a *store.DB to catchup.Sink.
type storeSink struct{ db *store.DB }

func (s storeSink) OpenTarget(seg meta.Segment) (catchup.Target, error) {
	t, err := s.db.OpenTarget(seg.ID, seg)
	if err != nil {
		return nil, err
	}
	return storeTarget{t: t, size: seg.ByteSize + store.FooterSize}, nil
}

type storeTarget struct {
	t    *store.Target
	size int64
}

func (t storeTarget) Resume() int64      { return t.t.Resume() }
func (t storeTarget) Size() int64        { return t.size }
func (t storeTarget) File() catchup.File { return t.t.File() }
func (t storeTarget) Abort() error       { return t.t.Abort() }
func (t storeTarget) Commit() error {
	err := t.t.Commit()
	if errors.Is(err, store.ErrShort) || errors.Is(err, store.ErrCorrupt) {
		return fmt.Errorf("%w: %w", catchup.ErrVerify, err)
	}
	return err
}
