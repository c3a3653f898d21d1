package cli

import (
	"strings"
	"testing"
)

func TestLogsFlags(t *testing.T) {
	for _, tc := range []struct {
		args, target, query, err string
	}{
		{args: "p", target: "p", query: ""},
		{args: "p -c app -f --tail 5 --timestamps --since 90s -p", target: "p",
			query: "container=app&follow=true&previous=true&sinceSeconds=90&tailLines=5&timestamps=true"},
		{args: "ds/agent -n kube-system --since 1500ms --limit-bytes 10", target: "ds/agent", query: "limitBytes=10&sinceSeconds=2"},
		{args: "p side --tail 0", target: "p", query: "container=side&tailLines=0"},
		{args: "p --since-time 2026-01-02T03:04:05Z", target: "p", query: "sinceTime=2026-01-02T03%3A04%3A05Z"},
		{args: "", err: "logs needs a pod name"},
		{args: "p a b", err: "unexpected arguments"},
		{args: "p a -c b", err: "unexpected arguments"},
		{args: "p --since 1s --since-time 2026-01-02T03:04:05Z", err: "at most one"},
		{args: "p --since-time yesterday", err: "invalid --since-time"},
		{args: "p --tail -2", err: "must not be negative"},
	} {
		c := &LogsCommand{}
		err := parse(c, strings.Fields(tc.args))
		target := c.target
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("logs %s: error %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("logs %s: %v", tc.args, err)
			continue
		}
		if target != tc.target || c.query(c.container).Encode() != tc.query {
			t.Errorf("logs %s: target %q query %q, want %q %q", tc.args, target, c.query(c.container).Encode(), tc.target, tc.query)
		}
	}
}
