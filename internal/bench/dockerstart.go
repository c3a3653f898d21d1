package bench

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// DockerStart is what BenchmarkDockerStart (make bench-docker) measured on a
// real Docker Engine: medians, in seconds, of a container created and of its
// image updated, through everynode, a bare docker run and a Swarm global
// service, each from the command (or API call) to the engine's start event of
// the new container. The ToEngine fields end at the engine's create event
// instead: the orchestration before the engine's own work.
type DockerStart struct {
	Bare, Everynode, Swarm DockerWay
	// SwarmSkipped says why Swarm was not measured ("" when it was).
	SwarmSkipped string
}

// DockerWay is one way of starting the container: its medians in seconds.
type DockerWay struct {
	CreateS, UpdateS                 float64
	CreateToEngineS, UpdateToEngineS float64
}

// measured reports whether the way ran.
func (w DockerWay) measured() bool { return w.CreateS > 0 && w.UpdateS > 0 }

// dockerStartBenchmark is the benchmark's name in go test's output.
const dockerStartBenchmark = "BenchmarkDockerStart"

// ParseDockerStart reads the output of make bench-docker (go test -bench
// '^BenchmarkDockerStart$' -v or not): the benchmark's result line, with the
// metrics it reports, and the log line saying why Swarm was skipped. With
// several result lines (-count, -cpu lists) the last one counts.
func ParseDockerStart(r io.Reader) (DockerStart, error) {
	var d DockerStart
	found := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if _, why, ok := strings.Cut(line, "Swarm skipped: "); ok {
			d.SwarmSkipped = why
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || (f[0] != dockerStartBenchmark && !strings.HasPrefix(f[0], dockerStartBenchmark+"-")) {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue // a log line naming the benchmark, not its result
		}
		if len(f)%2 != 0 {
			return DockerStart{}, fmt.Errorf("%s result line: values and units do not pair up: %q", dockerStartBenchmark, line)
		}
		for i := 2; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return DockerStart{}, fmt.Errorf("%s result line: metric %s: %w", dockerStartBenchmark, f[i+1], err)
			}
			d.set(f[i+1], v)
		}
		found = true
	}
	if err := sc.Err(); err != nil {
		return DockerStart{}, fmt.Errorf("read %s output: %w", dockerStartBenchmark, err)
	}
	if !found {
		return DockerStart{}, fmt.Errorf("no %s result in the output (was Docker there? the benchmark skips without an engine)", dockerStartBenchmark)
	}
	if !d.Bare.measured() || !d.Everynode.measured() {
		return DockerStart{}, fmt.Errorf("%s result lacks the bare or everynode medians", dockerStartBenchmark)
	}
	return d, nil
}

// set files one reported metric ("everynode-create-s", ...); the ratios the
// benchmark reports are recomputed from the medians, and other units ignored.
func (d *DockerStart) set(unit string, v float64) {
	way, metric, ok := strings.Cut(unit, "-")
	if !ok {
		return
	}
	var w *DockerWay
	switch way {
	case "bare":
		w = &d.Bare
	case "everynode":
		w = &d.Everynode
	case "swarm":
		w = &d.Swarm
	default:
		return
	}
	switch metric {
	case "create-s":
		w.CreateS = v
	case "update-s":
		w.UpdateS = v
	case "create-to-engine-create-s":
		w.CreateToEngineS = v
	case "update-to-engine-create-s":
		w.UpdateToEngineS = v
	}
}

// dockerTargetRatio is the bound on everynode's time over a bare
// docker run's.
const dockerTargetRatio = 1.2

// renderDocker writes the real-Docker section and returns its target lines.
func renderDocker(p func(string, ...any), d DockerStart) []string {
	p("\n## Real Docker\n\n")
	p("`make bench-docker`: one node on this machine's Docker Engine, the same local images (built in the run, no\n")
	p("registry), medians of 7 rounds. Each time runs from the command (or the API call) to the engine's `start`\n")
	p("event of the new container; in brackets, to its `create` event (the orchestration before the engine's own\n")
	p("work, which is the same for all three).\n\n")
	p("| | create: container running (s) | image update: new container running (s) | everynode ÷ this: create / update | target |\n")
	p("|---|---:|---:|---:|---|\n")
	way := func(name string, w DockerWay, why string, ratio bool, target string) {
		if !w.measured() {
			if why == "" {
				why = "not measured"
			}
			p("| %s | skipped: %s | | | %s |\n", name, strings.ReplaceAll(why, "|", "\\|"), target)
			return
		}
		r := "–"
		if ratio {
			r = fmt.Sprintf("%.2f / %.2f", d.Everynode.CreateS/w.CreateS, d.Everynode.UpdateS/w.UpdateS)
		}
		p("| %s | %.2f (%.2f) | %.2f (%.2f) | %s | %s |\n", name, w.CreateS, w.CreateToEngineS, w.UpdateS, w.UpdateToEngineS, r, target)
	}
	way("everynode: a DaemonSet created, then its image changed (maxUnavailable 1)", d.Everynode, "", false, "")
	way("bare `docker run`; `docker stop` and `docker run`", d.Bare, "", true, fmt.Sprintf("everynode ≤ %g×", dockerTargetRatio))
	way("Docker Swarm global service; `docker service update --image`", d.Swarm, d.SwarmSkipped, true, "everynode ahead (< 1×)")

	var out []string
	// The verdict is on the ratios as printed (two decimals), so that a
	// reader's check of the printed figure agrees with it.
	judge := func(what string, create, update, limit float64, strict bool) {
		create, update = math.Round(create*100)/100, math.Round(update*100)/100
		ok := create <= limit && update <= limit
		if strict {
			ok = create < limit && update < limit
		}
		verdict := "**met**"
		if !ok {
			verdict = "**missed**"
		}
		cmp := "≤"
		if strict {
			cmp = "<"
		}
		out = append(out, fmt.Sprintf("real Docker, everynode ÷ %s: create %.2f×, image update %.2f× (%s %g×) — %s.", what, create, update, cmp, limit, verdict))
	}
	judge("a bare `docker run`", d.Everynode.CreateS/d.Bare.CreateS, d.Everynode.UpdateS/d.Bare.UpdateS, dockerTargetRatio, false)
	if d.Swarm.measured() {
		judge("a Swarm global service", d.Everynode.CreateS/d.Swarm.CreateS, d.Everynode.UpdateS/d.Swarm.UpdateS, 1, true)
	} else {
		out = append(out, "real Docker, everynode against a Swarm global service: not judged (Swarm skipped).")
	}
	return out
}
