package exepages

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mapping is one line of /proc/self/maps.
type mapping struct {
	start, end uintptr
	perms      string
	dev        string // major:minor, hex
	inode      uint64
}

// Release unmaps this process's read-only mappings of its own executable
// with madvise(MADV_DONTNEED) and returns their size in bytes. Writable
// mappings (initialized data, whose pages the program has changed) are
// left alone: advising them would bring back the file's original bytes.
func Release() (int64, error) {
	ms, err := exeMappings()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, m := range ms {
		if strings.Contains(m.perms, "w") {
			continue
		}
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_DONTNEED); e != 0 {
			return n, fmt.Errorf("exepages: madvise %x-%x: %w", m.start, m.end, e)
		}
		n += int64(m.end - m.start)
	}
	return n, nil
}

// Resident returns how many bytes of this process's read-only mappings of
// its executable are resident, from /proc/self/smaps.
func Resident() (int64, error) {
	ms, err := exeMappings()
	if err != nil {
		return 0, err
	}
	ro := map[uintptr]bool{}
	for _, m := range ms {
		if !strings.Contains(m.perms, "w") {
			ro[m.start] = true
		}
	}
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, fmt.Errorf("exepages: %w", err)
	}
	var n int64
	in := false
	for line := range bytes.Lines(b) {
		s := strings.TrimSpace(string(line))
		if m, ok := parseMapping(s); ok {
			in = ro[m.start]
			continue
		}
		if rest, ok := strings.CutPrefix(s, "Rss:"); ok && in {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("exepages: smaps: %q: %w", s, err)
			}
			n += kb << 10
		}
	}
	return n, nil
}

// exeMappings lists the mappings of the file /proc/self/exe names, matched
// by device and inode, so a binary replaced or deleted on disk since the
// process started is still recognised.
func exeMappings() ([]mapping, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &st); err != nil {
		return nil, fmt.Errorf("exepages: stat the executable: %w", err)
	}
	dev := fmt.Sprintf("%02x:%02x", unix.Major(st.Dev), unix.Minor(st.Dev))
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, fmt.Errorf("exepages: %w", err)
	}
	defer f.Close()
	var ms []mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := parseMapping(sc.Text()); ok && m.inode == st.Ino && m.dev == dev {
			ms = append(ms, m)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("exepages: read /proc/self/maps: %w", err)
	}
	return ms, nil
}

// parseMapping parses a mapping's line ("start-end perms offset dev inode
// [path]") of /proc/self/maps or smaps; ok is false for other lines.
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
