package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestBenchAgentsServesTheControlProtocol(t *testing.T) {
	in := strings.NewReader(`{"op":"report"}` + "\n" + `{"op":"stop"}` + "\n" + `{"op":"report"}` + "\n")
	var out, errOut bytes.Buffer
	if err := NewMain().Run(context.Background(), []string{"bench", "agents"}, in, &out, &errOut); err != nil {
		t.Fatalf("bench agents: %v (stderr %q)", err, errOut.String())
	}
	var replies []map[string]any
	dec := json.NewDecoder(&out)
	for dec.More() {
		var r map[string]any
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("stdout is not JSON lines: %v: %q", err, out.String())
		}
		replies = append(replies, r)
	}
	if len(replies) != 3 {
		t.Fatalf("replies = %v, want hello, report, stop (and nothing after stop)", replies)
	}
	if replies[0]["op"] != "hello" || replies[1]["op"] != "report" || replies[1]["err"] == nil || replies[2]["op"] != "stop" {
		t.Errorf("replies = %v, want hello, a report refused before start, stop", replies)
	}
}

func TestBenchFleetRejectsNegativeProcs(t *testing.T) {
	var out, errOut bytes.Buffer
	err := NewMain().Run(context.Background(), []string{"bench", "fleet", "--agent-procs", "-1"}, strings.NewReader(""), &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "--agent-procs") {
		t.Errorf("bench fleet --agent-procs -1: %v", err)
	}
}

func TestBenchFleetIdleCPUFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--idle-cpu", "30s"}, "--idle-cpu needs the agents in child processes"},
		{[]string{"--agent-procs", "2", "--idle-cpu", "-1s"}, "--idle-cpu must not be negative"},
		{[]string{"--agent-procs", "2", "--idle-cpuprofile", "a.pprof"}, "--idle-cpuprofile needs --idle-cpu"},
		{[]string{"--fanout-cpuprofile", "f.pprof", "--cpuprofile", "c.pprof"}, "--fanout-cpuprofile and --cpuprofile cannot be combined"},
		{[]string{"--agents-cpuprofile", "a.pprof"}, "--agents-cpuprofile needs the agents in child processes"},
		{[]string{"--agent-procs", "2", "--idle-cpu", "30s", "--agents-cpuprofile", "a.pprof"}, "--agents-cpuprofile and --idle-cpu cannot be combined"},
	} {
		var out, errOut bytes.Buffer
		err := NewMain().Run(context.Background(), append([]string{"bench", "fleet"}, tc.args...), strings.NewReader(""), &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bench fleet %v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}
