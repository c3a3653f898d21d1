package exepages

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mapping is one mapping of /proc/self/smaps: its header line and the
// sizes that matter here.
type mapping struct {
	start, end uintptr
	perms      string
	dev        string // major:minor, hex
	inode      uint64
	rss        int64 // bytes resident
	anonymous  int64 // bytes of private copies: pages the process changed
}

// releasable reports whether advising the mapping away loses nothing: it is
// not writable, and none of its pages is a private copy. Read-only mappings
// can hold such copies: the dynamic loader relocates a position-independent
// or externally linked binary's read-only-after-relocation data (RELRO: the
// global offset table) before protecting it, and a debugger's breakpoints
// are copies too. Advising those would bring back the file's bytes.
func (m mapping) releasable() bool {
	return !strings.Contains(m.perms, "w") && m.anonymous == 0
}

// Release unmaps this process's releasable mappings of its own executable
// (code and read-only data) with madvise(MADV_DONTNEED) and returns their
// size in bytes. It finds none, and says so, where /proc cannot tell which
// mappings are the executable's.
func Release() (int64, error) {
	ms, err := exeMappings()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, m := range ms {
		if !m.releasable() {
			continue
		}
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_DONTNEED); e != 0 {
			return n, fmt.Errorf("exepages: madvise %x-%x: %w", m.start, m.end, e)
		}
		n += int64(m.end - m.start)
	}
	if n == 0 {
		return 0, errors.New("exepages: no read-only mapping of the executable without private pages in /proc/self/smaps")
	}
	return n, nil
}

// Resident returns how many bytes of this process's releasable mappings of
// its executable are resident.
func Resident() (int64, error) {
	ms, err := exeMappings()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, m := range ms {
		if m.releasable() {
			n += m.rss
		}
	}
	return n, nil
}

// exeMappings lists the mappings of the file this code was loaded from:
// those with the device and inode of the mapping that holds this package's
// own code. (stat of /proc/self/exe can name another device than the
// mappings do, as on btrfs subvolumes and some overlay filesystems.)
func exeMappings() ([]mapping, error) {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return nil, fmt.Errorf("exepages: %w", err)
	}
	all, err := parseSmaps(b)
	if err != nil {
		return nil, err
	}
	pc := reflect.ValueOf(Release).Pointer()
	var self *mapping
	for i := range all {
		if all[i].start <= pc && pc < all[i].end {
			self = &all[i]
			break
		}
	}
	if self == nil || self.inode == 0 {
		return nil, errors.New("exepages: the executable's code is not a file mapping in /proc/self/smaps")
	}
	var ms []mapping
	for _, m := range all {
		if m.inode == self.inode && m.dev == self.dev {
			ms = append(ms, m)
		}
	}
	return ms, nil
}

// parseSmaps parses /proc/self/smaps: a header line per mapping ("start-end
// perms offset dev inode [path]") followed by "Name: value kB" lines.
func parseSmaps(b []byte) ([]mapping, error) {
	var ms []mapping
	for line := range bytes.Lines(b) {
		s := strings.TrimSpace(string(line))
		if m, ok := parseMapping(s); ok {
			ms = append(ms, m)
			continue
		}
		if len(ms) == 0 {
			continue
		}
		cur := &ms[len(ms)-1]
		for _, f := range []struct {
			name string
			to   *int64
		}{{"Rss:", &cur.rss}, {"Anonymous:", &cur.anonymous}} {
			rest, ok := strings.CutPrefix(s, f.name)
			if !ok {
				continue
			}
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("exepages: smaps: %q: %w", s, err)
			}
			*f.to = kb << 10
		}
	}
	return ms, nil
}

// parseMapping parses a mapping's header line of /proc/self/maps or smaps;
// ok is false for other lines.
func parseMapping(line string) (mapping, bool) {
	f := strings.Fields(line)
	if len(f) < 5 {
		return mapping{}, false
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	if !ok {
		return mapping{}, false
	}
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	inode, err3 := strconv.ParseUint(f[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || len(f[1]) != 4 || !strings.Contains(f[3], ":") {
		return mapping{}, false
	}
	return mapping{start: uintptr(start), end: uintptr(end), perms: f[1], dev: f[3], inode: inode}, true
}
