package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/nodeagent"
	"github.com/everynode/everynode/nodeagent/runtime/fake"
	"github.com/everynode/everynode/resources"
)

// AgentProcessNode is the node name of the separately measured agent process.
const AgentProcessNode = "bench-agent-process"

// procStatusKB reads a "Name:   123 kB" field of /proc/<pid>/status.
func procStatusKB(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, field)
}

// rssMB is a process's VmRSS in MiB; 0 if it cannot be read.
func rssMB(pid int) float64 {
	kb, err := procStatusKB(pid, "VmRSS")
	if err != nil {
		return 0
	}
	return float64(kb) / 1024
}

// cpuSeconds is the CPU time (user + system) this process used so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// userHZ is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// every Linux architecture Go supports).
const userHZ = 100

// procCPUSeconds is the CPU time (user + system) process pid used so far;
// 0 if it cannot be read.
func procCPUSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces: count from after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return float64(utime+stime) / userHZ
}

// loadAvg1 is the 1-minute load average; 0 if it cannot be read.
func loadAvg1() float64 {
	f := strings.Fields(loadAvg())
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// loadAvg is the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// Machine describes the machine a run was made on.
type Machine struct {
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpu_model"`
	MemoryMB int64  `json:"memory_mb"`
	Kernel   string `json:"kernel"`
	Go       string `json:"go"`
}

// ThisMachine reads /proc for the machine's CPU model, memory and kernel.
func ThisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				m.MemoryMB = kb / 1024
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// agentMem is the memory of the idle agent process, in MiB: VmRSS, and its
// parts RssAnon (heap, stacks: the process's own) and RssFile (pages of the
// executable and libraries, shared with any process of the same binary);
// and its CPU (ms a second) and wake-ups (context switches a second) over
// its idle time after the first idleCPUSettle, a window of idleS seconds.
type agentMem struct{ rss, anon, file, cpuMsPerS, wakeupsPerS, idleS float64 }

// minAgentIdleCPUS is the shortest window whose CPU time is reported: it is
// read in 10 ms ticks, so 30 s of an agent at 2 ms/s holds 6 of them.
const minAgentIdleCPUS = 30

// agentProcessRSS starts one agent process, waits until its Node is Ready,
// lets it idle, and returns its memory and idle CPU.
func agentProcessRSS(ctx context.Context, srv *benchServer, dir string, cfg Config) (agentMem, error) {
	var m agentMem
	t := AgentTarget{Server: srv.url, JoinToken: srv.srv.JoinToken(), CAPEM: srv.srv.CAPEM(),
		NodeToken: srv.srv.NodeToken(AgentProcessNode), NodeName: AgentProcessNode, DataDir: filepath.Join(dir, "agent-process")}
	if err := os.MkdirAll(t.DataDir, 0o700); err != nil {
		return m, fmt.Errorf("bench: agent process dir: %w", err)
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := cfg.AgentProcess(pctx, t)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		return m, fmt.Errorf("bench: start agent process: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cancel()
		<-exited
	}()
	err := watchUntil(ctx, srv.local, resources.Nodes, "", client.ListOptions{FieldSelector: "metadata.name=" + AgentProcessNode}, time.Minute, nil,
		func(ev watch.Event) (bool, error) {
			node, ok := ev.Object.(*corev1.Node)
			return ok && ev.Type != watch.Deleted && nodeReady(node), nil
		})
	if err != nil {
		return m, fmt.Errorf("bench: agent process never became a Ready node: %w", err)
	}
	idle := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-exited:
			exited <- err
			return fmt.Errorf("bench: agent process exited: %v", err)
		case <-time.After(d):
			return nil
		}
	}
	pid := cmd.Process.Pid
	settle := min(idleCPUSettle, cfg.AgentIdle/2)
	if err := idle(settle); err != nil {
		return m, err
	}
	s0, err := sampleProcs([]int{pid})
	if err != nil {
		return m, err
	}
	t0 := time.Now()
	if err := idle(cfg.AgentIdle - settle); err != nil {
		return m, err
	}
	s1, err := sampleProcs([]int{pid})
	if err != nil {
		return m, err
	}
	var rates Result
	m.idleS = time.Since(t0).Seconds()
	idleCPURates(s0, s1, m.idleS, 1, &rates)
	m.wakeupsPerS = rates.IdleWakeupsPerS
	if m.idleS >= minAgentIdleCPUS {
		m.cpuMsPerS = rates.IdleCPUMsPerS
	}
	for _, f := range []struct {
		name string
		to   *float64
	}{{"VmRSS", &m.rss}, {"RssAnon", &m.anon}, {"RssFile", &m.file}} {
		kb, err := procStatusKB(pid, f.name)
		if err != nil {
			return m, fmt.Errorf("bench: agent process memory: %w", err)
		}
		*f.to = float64(kb) / 1024
	}
	return m, nil
}

// RunAgentProcess runs one node agent with the fake runtime against
// t.Server with t.NodeToken until ctx ends: the minimal agent process (no
// gossip, no join) for when "everynode agent" is not at hand.
func RunAgentProcess(ctx context.Context, t AgentTarget) error {
	h, err := client.NewHTTP(client.Config{Server: t.Server, CAPEM: t.CAPEM, Token: t.NodeToken, UserAgent: "everynode-bench-agent", Protobuf: true})
	if err != nil {
		return err
	}
	defer h.Close()
	ag, err := nodeagent.New(nodeagent.Config{NodeName: t.NodeName, NodeIP: "127.0.0.1", Client: h,
		Runtime: fake.New(fake.Config{Images: []string{ImageV1, ImageV2}, IP: "127.0.0.1"}), DataDir: t.DataDir})
	if err != nil {
		return err
	}
	err = ag.Run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}
