package exepages

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// touchAll reads every read-only page of the executable's mappings through
// /proc/self/mem, which faults them into this process's page tables.
func touchAll(t *testing.T) int64 {
	t.Helper()
	ms, err := exeMappings()
	if err != nil {
		t.Fatal(err)
	}
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	buf := make([]byte, 1<<20)
	var size int64
	for _, m := range ms {
		if !m.releasable() {
			continue
		}
		size += int64(m.end - m.start)
		for off := int64(m.start); off < int64(m.end); off += int64(len(buf)) {
			n := min(int64(len(buf)), int64(m.end)-off)
			if _, err := mem.ReadAt(buf[:n], off); err != nil {
				t.Fatalf("read %x: %v", off, err)
			}
		}
	}
	return size
}

func TestReleaseUnmapsTheExecutable(t *testing.T) {
	size := touchAll(t)
	if size < 1<<20 {
		t.Fatalf("the executable's read-only mappings are %d bytes; a Go test binary has megabytes", size)
	}
	before, err := Resident()
	if err != nil {
		t.Fatal(err)
	}
	if before < size*9/10 {
		t.Fatalf("after reading every page, %d of %d bytes resident", before, size)
	}
	released, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	if released != size {
		t.Errorf("released %d bytes, want the %d of the read-only mappings", released, size)
	}
	after, err := Resident()
	if err != nil {
		t.Fatal(err)
	}
	// What runs between Release and the reading (this test, the runtime)
	// maps its pages back; most stay out.
	if after > before*3/4 {
		t.Errorf("resident %d bytes after Release, %d before: want most of it unmapped", after, before)
	}
	t.Logf("read-only executable mappings %d KiB: resident %d KiB, after Release %d KiB", size>>10, before>>10, after>>10)
}

// TestReleaseInPositionIndependentBinary runs a program that releases its
// pages and carries on, built as a position-independent executable: its
// loader relocates read-only data (the global offset table), and releasing
// those private copies would crash it.
func TestReleaseInPositionIndependentBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	bin := filepath.Join(t.TempDir(), "release")
	build := exec.Command("go", "build", "-buildmode=pie", "-o", bin, "./testdata/release")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -buildmode=pie: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "cache in page pages stay the the") {
		t.Fatalf("the program released its pages and then: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

func TestPrivateCopiesAreNotReleasable(t *testing.T) {
	smaps := []byte(`00400000-00600000 r-xp 00000000 fd:01 42 /bin/x
Rss:                 800 kB
Anonymous:             0 kB
00600000-00700000 r--p 00200000 fd:01 42 /bin/x
Rss:                 100 kB
Anonymous:             4 kB
00700000-00800000 rw-p 00300000 fd:01 42 /bin/x
Rss:                  40 kB
Anonymous:            40 kB
VmFlags: rd wr mr mw me ac
`)
	ms, err := parseSmaps(smaps)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 {
		t.Fatalf("parsed %d mappings, want 3: %+v", len(ms), ms)
	}
	want := []struct {
		rss, anonymous int64
		releasable     bool
	}{{800 << 10, 0, true}, {100 << 10, 4 << 10, false}, {40 << 10, 40 << 10, false}}
	for i, w := range want {
		if m := ms[i]; m.rss != w.rss || m.anonymous != w.anonymous || m.releasable() != w.releasable {
			t.Errorf("mapping %d: %+v, releasable %v; want rss %d, anonymous %d, releasable %v", i, m, m.releasable(), w.rss, w.anonymous, w.releasable)
		}
	}
}

func TestParseMapping(t *testing.T) {
	m, ok := parseMapping("00400000-027eb000 r-xp 00000000 fd:01 1234567                    /usr/bin/everynode (deleted)")
	if !ok || m.start != 0x400000 || m.end != 0x27eb000 || m.perms != "r-xp" || m.dev != "fd:01" || m.inode != 1234567 {
		t.Errorf("parsed %+v, %v", m, ok)
	}
	for _, bad := range []string{"Rss:                  30956 kB", "VmFlags: rd ex mr mw me dw", "", "zz-10 r-xp 0 fd:01 1"} {
		if _, ok := parseMapping(bad); ok {
			t.Errorf("%q parsed as a mapping", bad)
		}
	}
}
