package nodeagent

import (
	"bufio"
	"bytes"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// KubeletVersion is the kubeletVersion the agent reports in the Node's
// nodeInfo: the Kubernetes API level it follows, marked as everynode's.
const KubeletVersion = "v1.32.0-everynode"

// maxPods is the pods capacity reported, kubelet's default.
const maxPods = 110

// sysFiles are the host files read for the Node's facts; tests point them
// elsewhere.
type sysFiles struct {
	meminfo   string // MemTotal
	osrelease string // kernel release, as uname -r
	osRelease string // /etc/os-release PRETTY_NAME
}

// hostSysFiles are the real host's files.
func hostSysFiles() sysFiles {
	return sysFiles{
		meminfo:   "/proc/meminfo",
		osrelease: "/proc/sys/kernel/osrelease",
		osRelease: "/etc/os-release",
	}
}

// hostFacts are what the agent reports about its host.
type hostFacts struct {
	capacity      corev1.ResourceList
	kernelVersion string
	osImage       string
}

// readHostFacts gathers the host's CPU count, memory, kernel release and OS
// image; what cannot be read is left out (memory) or empty.
func readHostFacts(files sysFiles) hostFacts {
	f := hostFacts{capacity: corev1.ResourceList{
		corev1.ResourceCPU:  *resource.NewQuantity(int64(goruntime.NumCPU()), resource.DecimalSI),
		corev1.ResourcePods: *resource.NewQuantity(maxPods, resource.DecimalSI),
	}}
	if mem, ok := memTotal(files.meminfo); ok {
		f.capacity[corev1.ResourceMemory] = *resource.NewQuantity(mem, resource.BinarySI)
	}
	if b, err := os.ReadFile(files.osrelease); err == nil {
		f.kernelVersion = strings.TrimSpace(string(b))
	}
	f.osImage = osImage(files.osRelease)
	return f
}

// memTotal reads MemTotal (kB) from a meminfo file, in bytes.
func memTotal(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, false
			}
			return kb * 1024, true
		}
	}
	return 0, false
}

// osImage returns PRETTY_NAME from an os-release file, "" when absent.
func osImage(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "PRETTY_NAME="); ok {
			if u, err := strconv.Unquote(v); err == nil {
				return u
			}
			return strings.Trim(v, `"'`)
		}
	}
	return ""
}
