package ctxtime

import (
	"context"
	"testing"
	"time"
)

func TestSleepWaitsTheDuration(t *testing.T) {
	start := time.Now()
	if !Sleep(context.Background(), 20*time.Millisecond) {
		t.Fatal("Sleep with a live context reported it ended")
	}
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Fatalf("Sleep returned after %v, before its 20ms", waited)
	}
}

func TestSleepEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	start := time.Now()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep reported the hour passed")
	}
	if waited := time.Since(start); waited > time.Minute {
		t.Fatalf("Sleep outlived its context by %v", waited)
	}
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep on an ended context reported the hour passed")
	}
}
