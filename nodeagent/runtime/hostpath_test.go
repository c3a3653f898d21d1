package runtime

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestCheckHostPath: kubelet's hostPath type checks and their messages;
// the OrCreate types create what is missing (and only that).
func TestCheckHostPath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	missing := filepath.Join(dir, "missing")
	tests := []struct {
		path string
		typ  HostPathType
		want string // error message; empty: no error
	}{
		{missing, "", ""},
		{dir, HostPathDirectory, ""},
		{file, HostPathDirectory, "hostPath type check failed: " + file + " is not a directory, it's a File"},
		{missing, HostPathDirectory, "hostPath type check failed, " + missing + " is not a directory, unable to determine its type: path \"" + missing + "\" does not exist"},
		{file, HostPathFile, ""},
		{dir, HostPathFile, "hostPath type check failed: " + dir + " is not a file, it's a Directory"},
		{file, HostPathDirectoryOrCreate, "hostPath type check failed: " + file + " is not a directory, it's a File"},
		{dir, HostPathFileOrCreate, "hostPath type check failed: " + dir + " is not a file, it's a Directory"},
		{sock, HostPathSocket, ""},
		{file, HostPathSocket, "hostPath type check failed: " + file + " is not a socket file, it's a File"},
		{"/dev/null", HostPathCharDev, ""},
		{file, HostPathCharDev, "hostPath type check failed: " + file + " is not a character device, it's a File"},
		{"/dev/null", HostPathBlockDev, "hostPath type check failed: /dev/null is not a block device, it's a CharDevice"},
		{dir, "Weird", "Weird is an invalid volume type"},
	}
	for _, tt := range tests {
		err := CheckHostPath(tt.path, tt.typ)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("CheckHostPath(%s, %q) = %q, want %q", tt.path, tt.typ, got, tt.want)
		}
	}
	if _, err := os.Stat(missing); err == nil {
		t.Fatal("a check without OrCreate created the path")
	}

	newDir := filepath.Join(dir, "a", "b")
	if err := CheckHostPath(newDir, HostPathDirectoryOrCreate); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(newDir); err != nil || !fi.IsDir() || fi.Mode().Perm()&0o755 != fi.Mode().Perm() {
		t.Errorf("DirectoryOrCreate: %v %v", fi, err)
	}
	newFile := filepath.Join(dir, "new")
	if err := CheckHostPath(newFile, HostPathFileOrCreate); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(newFile); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Errorf("FileOrCreate: %v %v", fi, err)
	}
	if err := CheckHostPath(filepath.Join(dir, "no", "parent"), HostPathFileOrCreate); err == nil {
		t.Error("FileOrCreate made a missing parent directory (kubelet does not)")
	}
}
