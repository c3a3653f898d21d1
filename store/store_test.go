package store

import (
	"testing"
	"time"
)

func TestOpenClose(t *testing.T) {
	start := time.Now()
	s := openTest(t)
	t.Logf("open took %s", time.Since(start))
	start = time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("close took %s", time.Since(start))
}
