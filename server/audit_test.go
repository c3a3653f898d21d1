package server

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestAuditLogRotation: the audit log is rotated by size into FILE.1 …
// FILE.<maxbackup>, the oldest dropped; no line is split or lost from the
// kept files; every file is 0600; reopening appends.
func TestAuditLogRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	a, err := openAuditLog(path, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	a.maxSize = 1000                                                                             // bytes, for the test: 1 MB lines would be slow
	line := func(i int) []byte { return fmt.Appendf(nil, `{"n":%d,"pad":"%0100d"}`+"\n", i, 0) } // 120 bytes
	const n = 60                                                                                 // 7200 bytes: 8 lines per file
	for i := range n {
		if _, err := a.Write(line(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	var seen []int
	for _, p := range []string{path + ".2", path + ".1", path} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if fi.Size() > 1000 || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %d bytes, mode %v", p, fi.Size(), fi.Mode().Perm())
		}
		f, _ := os.Open(p)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var i int
			if _, err := fmt.Sscanf(sc.Text(), `{"n":%d,`, &i); err != nil || sc.Text()+"\n" != string(line(i)) {
				t.Fatalf("%s: broken line %q", p, sc.Text())
			}
			seen = append(seen, i)
		}
		f.Close()
	}
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Fatalf("a third backup was kept: %v", err)
	}
	// The kept lines are the newest, in order, none missing.
	for k, i := range seen {
		if i != n-len(seen)+k {
			t.Fatalf("kept lines %v are not the newest %d in order", seen, len(seen))
		}
	}
	if len(seen) < 16 {
		t.Fatalf("only %d lines kept", len(seen))
	}
	// Reopening appends to the current file.
	a, err = openAuditLog(path, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(path)
	if _, err := a.Write([]byte(strconv.Quote("x") + "\n")); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if after, _ := os.Stat(path); after.Size() != before.Size()+4 {
		t.Fatalf("reopened log did not append: %d -> %d", before.Size(), after.Size())
	}
	if _, err := openAuditLog(filepath.Join(t.TempDir(), "missing", "dir", "audit.log"), 1, 2); err == nil {
		t.Fatal("an audit log in a missing directory opened")
	}
}
