//go:build !linux

package exepages

// Release does nothing outside Linux.
func Release() (int64, error) { return 0, nil }

// Resident reports 0 outside Linux.
func Resident() (int64, error) { return 0, nil }
