package server

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
)

// Audit log defaults: kube-apiserver's --audit-log-maxsize is in megabytes;
// everynode keeps a bounded number of backups so an edge box's disk cannot
// fill with them.
const (
	DefaultAuditLogMaxSize    = 100
	DefaultAuditLogMaxBackups = 10
)

// auditFile is the audit log: an append-only file (0600) rotated by size.
// When a line would take it past maxSize bytes, FILE.1 … FILE.<n-1> become
// FILE.2 … FILE.<n>, FILE becomes FILE.1 and a new FILE is started; with
// maxBackups 0 every rotated file is kept. It starts no goroutine (unlike
// lumberjack, whose compaction goroutine outlives Close). Safe for
// concurrent use; one Write is one line and is never split across files.
type auditFile struct {
	path       string
	maxSize    int64
	maxBackups int

	mu   sync.Mutex
	f    *os.File
	size int64
}

// openAuditLog opens (appending to) the audit log at path, rotated at
// maxSizeMB megabytes (0: DefaultAuditLogMaxSize) keeping maxBackups
// rotated files (0: all).
func openAuditLog(path string, maxSizeMB, maxBackups int) (*auditFile, error) {
	if maxSizeMB <= 0 {
		maxSizeMB = DefaultAuditLogMaxSize
	}
	if maxBackups < 0 {
		return nil, errors.New("audit log: the number of backups is negative")
	}
	a := &auditFile{path: path, maxSize: int64(maxSizeMB) << 20, maxBackups: maxBackups}
	if err := a.open(); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *auditFile) open() error {
	f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("audit log: %w (give --audit-log a file in a writable directory)", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("audit log: %w", err)
	}
	a.f, a.size = f, fi.Size()
	return nil
}

// Write appends one line, rotating first if it would not fit.
func (a *auditFile) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return 0, errors.New("audit log: closed")
	}
	if a.size > 0 && a.size+int64(len(p)) > a.maxSize {
		if err := a.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := a.f.Write(p)
	a.size += int64(n)
	return n, err
}

func (a *auditFile) rotate() error {
	if err := a.f.Close(); err != nil {
		return fmt.Errorf("audit log: rotate: %w", err)
	}
	a.f = nil
	last := a.maxBackups
	if last == 0 {
		// Keep all: shift every existing backup.
		for last = 1; ; last++ {
			if _, err := os.Stat(a.backup(last)); err != nil {
				break
			}
		}
	} else {
		_ = os.Remove(a.backup(last))
	}
	for i := last - 1; i >= 1; i-- {
		if err := os.Rename(a.backup(i), a.backup(i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("audit log: rotate: %w", err)
		}
	}
	if err := os.Rename(a.path, a.backup(1)); err != nil {
		return fmt.Errorf("audit log: rotate: %w", err)
	}
	return a.open()
}

func (a *auditFile) backup(i int) string { return a.path + "." + strconv.Itoa(i) }

// Close closes the file; later writes fail.
func (a *auditFile) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return nil
	}
	err := a.f.Close()
	a.f = nil
	return err
}
