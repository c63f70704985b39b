package main

import "context"

// Stages that fault a broker's filesystem: diskfull, readonly. (Being
// written; each reports Skipped.)

func (d *demo) stageDiskFull(ctx context.Context) (faultReport, error) {
	return faultReport{Stage: "diskfull", Skipped: "not built yet"}, nil
}

func (d *demo) stageReadOnly(ctx context.Context) (faultReport, error) {
	return faultReport{Stage: "readonly", Skipped: "not built yet"}, nil
}
