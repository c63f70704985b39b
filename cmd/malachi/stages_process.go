package main

import "context"

// Stages that fault processes and data directories: pause, swap,
// backfill-kill, nospare, lost. (Being written; each reports Skipped.)

func (d *demo) stagePause(ctx context.Context) (faultReport, error) {
	return faultReport{Stage: "pause", Skipped: "not built yet"}, nil
}

func (d *demo) stageSwap(ctx context.Context) (faultReport, error) {
	return faultReport{Stage: "swap", Skipped: "not built yet"}, nil
}

func (d *demo) stageBackfillKill(ctx context.Context) (faultReport, error) {
	return faultReport{Stage: "backfill-kill", Skipped: "not built yet"}, nil
}

func (d *demo) stageNoSpare(ctx context.Context) (faultReport, error) {
	return faultReport{Stage: "nospare", Skipped: "not built yet"}, nil
}

func (d *demo) stageLost(ctx context.Context) (faultReport, error) {
	return faultReport{Stage: "lost", Skipped: "not built yet"}, nil
}
