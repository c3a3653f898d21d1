package leader

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
)

var portSeq atomic.Int64

// startEtcd runs an embedded etcd on unix sockets in a temp dir (etcd's own
// test convention) and returns an in-process client.
func startEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.LogLevel = "error"
	n := portSeq.Add(1)
	cu, _ := url.Parse(fmt.Sprintf("unix://localhost:%d%d1", os.Getpid(), n))
	pu, _ := url.Parse(fmt.Sprintf("unix://localhost:%d%d2", os.Getpid(), n))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("etcd not ready")
	}
	cli := v3client.New(e.Server)
	t.Cleanup(func() { cli.Close() })
	return cli
}

func TestOneLeaderAtATimeAndHandover(t *testing.T) {
	cli := startEtcd(t)
	var (
		mu      sync.Mutex
		leaders int
		maxSeen int
		terms   = map[string]int{}
	)
	elected := make(chan string, 4)
	work := func(id string) func(context.Context) {
		return func(ctx context.Context) {
			mu.Lock()
			leaders++
			maxSeen = max(maxSeen, leaders)
			terms[id]++
			mu.Unlock()
			elected <- id
			<-ctx.Done()
			mu.Lock()
			leaders--
			mu.Unlock()
		}
	}
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopB()
	var wg sync.WaitGroup
	for _, c := range []struct {
		ctx context.Context
		id  string
	}{{ctxA, "a"}, {ctxB, "b"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Run(c.ctx, Config{Client: cli, Identity: c.id, TTL: 2}, work(c.id)); err != nil {
				t.Error(err)
			}
		}()
	}
	first := waitElected(t, elected)
	select {
	case id := <-elected:
		t.Fatalf("%s elected while %s leads", id, first)
	case <-time.After(300 * time.Millisecond):
	}
	// The leader stops: the other takes over.
	if first == "a" {
		stopA()
	} else {
		stopB()
	}
	second := waitElected(t, elected)
	if second == first {
		t.Fatalf("%s re-elected after stopping", first)
	}
	stopA()
	stopB()
	wg.Wait()
	if maxSeen != 1 {
		t.Errorf("%d leaders at once", maxSeen)
	}
}

func waitElected(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case id := <-ch:
		return id
	case <-time.After(20 * time.Second):
		t.Fatal("nobody elected")
	}
	return ""
}

func TestRunValidates(t *testing.T) {
	if err := Run(context.Background(), Config{}, func(context.Context) {}); err == nil {
		t.Error("Run without client succeeded")
	}
}

// crashedTerm leaves behind what a SIGKILLed leader leaves: its election key
// under a lease that nobody keeps alive but that lasts ttl seconds.
func crashedTerm(t *testing.T, cli *clientv3.Client, identity string, ttl int) {
	t.Helper()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if err := concurrency.NewElection(s, DefaultPrefix).Campaign(context.Background(), identity); err != nil {
		t.Fatal(err)
	}
	s.Orphan() // stop the keep-alives without revoking: the lease outlives the "process"
}

func TestRestartedCandidateReleasesItsStaleTerm(t *testing.T) {
	cli := startEtcd(t)
	crashedTerm(t, cli, "server-1", 60)

	run := func(ctx context.Context, id string, elected chan<- string) {
		_ = Run(ctx, Config{Client: cli, Identity: id, RetryDelay: 50 * time.Millisecond}, func(ctx context.Context) {
			elected <- id
			<-ctx.Done()
		})
	}

	// Another identity must not take over a term that is still leased.
	otherCtx, stopOther := context.WithCancel(context.Background())
	other := make(chan string, 1)
	done := make(chan struct{})
	go func() { defer close(done); run(otherCtx, "server-2", other) }()
	select {
	case id := <-other:
		t.Fatalf("%s was elected while server-1's lease still holds the term", id)
	case <-time.After(time.Second):
	}
	stopOther()
	<-done

	// The same identity, restarted, releases its old term and leads long
	// before the 60 s lease would have expired.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	same := make(chan string, 1)
	go run(ctx, "server-1", same)
	select {
	case <-same:
	case <-time.After(20 * time.Second):
		t.Fatal("restarted server-1 was not elected: it waited for its own stale lease")
	}
}
