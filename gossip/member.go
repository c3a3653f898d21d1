package gossip

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// State is a member's state as this member sees it.
type State int

const (
	// Alive: the member answers probes (or has not been found silent yet).
	Alive State = iota
	// Suspect: the member stopped answering and may be declared Dead. memberlist v0.5.4
	// does not surface suspicion to its delegates, so Members reports a suspect member as
	// Alive until it is declared Dead; the value exists so consumers can switch on it.
	Suspect
	// Dead: the member stopped answering probes without leaving (crash, power loss,
	// network cut, or Close without Leave).
	Dead
	// Left: the member announced a graceful departure with Leave.
	Left
)

// String returns "alive", "suspect", "dead" or "left".
func (s State) String() string {
	switch s {
	case Alive:
		return "alive"
	case Suspect:
		return "suspect"
	case Dead:
		return "dead"
	case Left:
		return "left"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// MemberInfo is one member as this member sees it.
type MemberInfo struct {
	// Name is the member's Config.Name.
	Name string
	// Addr is the member's gossip address, host:port.
	Addr string
	// Meta is what the member announced; zero if it announced something unreadable.
	Meta Meta
	// State is Alive, Dead or Left (see Suspect).
	State State
	// Since is when this member saw State begin (local clock).
	Since time.Time
}

// Member is this process's membership in the gossip pool: servers and agents alike.
//
// Its methods are safe for concurrent use. Lifecycle: New (listening, alone), Join (merged
// with the pool), optionally Leave (others see Left), then Close (others see Dead if Leave
// was not called).
type Member struct {
	name        string
	instance    string // random per New: tells a restarted member from its former self
	meta        []byte // encoded wireMeta, announced in every alive message
	forgetAfter time.Duration
	log         *slog.Logger
	ml          *memberlist.Memberlist
	localAddr   string
	broadcasts  *memberlist.TransmitLimitedQueue // our leave intents, piggybacked on gossip
	closed      atomic.Bool
	silence     *silence
	stop        chan struct{} // closed by Close: ends rejoinAfterSilence
	stopped     chan struct{} // closed when rejoinAfterSilence returned

	lifeMu sync.Mutex // serialises Leave and Close (memberlist panics on Leave after Shutdown)
	left   bool       // guarded by lifeMu

	// mu guards the fields below. It is taken inside memberlist callbacks (which hold
	// memberlist's own locks), so nothing may call into memberlist or the broadcast queue
	// while holding it.
	mu          sync.Mutex
	members     map[string]*record
	alive       int // records in state Alive, self included
	hints       chan string
	hintsClosed bool
	dropped     uint64 // hints dropped because the channel was full
}

// record is what we know about one member.
type record struct {
	info     MemberInfo
	instance string
	leaving  bool // it announced Leave: its death is Left, not Dead
}

// wireMeta is the node metadata on the wire: Meta plus the instance id.
type wireMeta struct {
	Meta
	Instance string `json:"instance"`
}

// New validates cfg, binds the gossip port and starts memberlist, alone until Join.
// Call Close to stop it.
func New(cfg Config) (*Member, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t, _ := profileTimings(cfg.Profile) // validated above
	if cfg.tune != nil {
		cfg.tune(&t)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("member", cfg.Name)

	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("gossip: instance id: %w", err)
	}
	instance := hex.EncodeToString(id[:])
	meta, err := json.Marshal(wireMeta{Meta: cfg.Meta, Instance: instance})
	if err != nil {
		return nil, fmt.Errorf("gossip: encode meta: %w", err)
	}
	hintBuffer := cfg.HintBuffer
	if hintBuffer == 0 {
		hintBuffer = DefaultHintBuffer
	}
	m := &Member{
		name:        cfg.Name,
		instance:    instance,
		meta:        meta,
		forgetAfter: t.forgetAfter,
		log:         logger,
		members:     make(map[string]*record),
		hints:       make(chan string, hintBuffer),
		silence:     newSilence(t.probeInterval, time.Now),
		stop:        make(chan struct{}),
		stopped:     make(chan struct{}),
	}
	m.broadcasts = &memberlist.TransmitLimitedQueue{NumNodes: m.numAlive, RetransmitMult: t.retransmitMult}

	mc := cfg.memberlistConfig(t, m, logger)
	if cfg.cut != nil && cfg.Traffic == nil {
		cfg.Traffic = &Traffic{}
	}
	tr, err := newTransport(mc.BindAddr, mc.BindPort, logger)
	if err != nil {
		return nil, fmt.Errorf("gossip: start %s on %s: %w", cfg.Name, cfg.BindAddr, err)
	}
	if mc.BindPort == 0 { // as memberlist does when it binds itself
		mc.BindPort = tr.port()
		mc.AdvertisePort = mc.BindPort
	}
	mc.Transport = tr
	if cfg.Traffic != nil {
		mc.Transport = newCountingTransport(tr, cfg.Traffic, cfg.cut)
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = mc.Transport.Shutdown()
		return nil, fmt.Errorf("gossip: start %s on %s: %w", cfg.Name, cfg.BindAddr, err)
	}
	m.ml = ml
	m.localAddr = ml.LocalNode().Address()
	go m.rejoinAfterSilence()
	logger.Debug("gossip member started", "addr", m.localAddr, "profile", cfg.Profile)
	return m, nil
}

// LocalAddr returns the host:port other members reach this one at: the advertised
// address with the port actually bound, so a BindAddr with port 0 works. Give it to
// others as a seed.
func (m *Member) LocalAddr() string { return m.localAddr }

// Join contacts the seeds (host:port each) and merges state with every one it reaches.
// It returns how many it reached; the error is non-nil only if it reached none.
// A seed using another Key is not reached. Join may block up to the profile's TCP
// timeout per unreachable seed.
func (m *Member) Join(seeds []string) (int, error) {
	if m.closed.Load() {
		return 0, errors.New("gossip: join: member is closed")
	}
	n, err := m.ml.Join(seeds)
	if err != nil {
		return n, newJoinError(err)
	}
	return n, nil
}

// joinError flattens memberlist's multi-line, per-seed join error into one line.
type joinError struct {
	msg string
	err error
}

func newJoinError(err error) *joinError {
	var parts []string
	if multi, ok := err.(interface{ WrappedErrors() []error }); ok {
		for _, e := range multi.WrappedErrors() {
			parts = append(parts, e.Error())
		}
	} else {
		parts = []string{err.Error()}
	}
	msg := "gossip: join: " + strings.Join(parts, "; ")
	if strings.Contains(msg, "decrypt") {
		msg += " (the seeds use another gossip key)"
	}
	return &joinError{msg: msg, err: err}
}

func (e *joinError) Error() string { return e.msg }
func (e *joinError) Unwrap() error { return e.err }

// Members returns every member this one knows, itself included, sorted by name: the
// alive ones, and the Dead and Left ones for an hour after their change (so a reconcile
// loop can tell a crash from a graceful stop).
func (m *Member) Members() []MemberInfo {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]MemberInfo, 0, len(m.members))
	for name, r := range m.members {
		gone := r.info.State == Dead || r.info.State == Left
		if gone && now.Sub(r.info.Since) > m.forgetAfter {
			delete(m.members, name)
			continue
		}
		out = append(out, r.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Hints returns a channel of member names whose state or metadata changed. The channel
// is buffered and never blocks memberlist: when it is full, hints are dropped, so a
// consumer must also reconcile Members on a ticker and treat hints as "look again soon".
// Close closes the channel.
func (m *Member) Hints() <-chan string { return m.hints }

// Leave announces a graceful departure and waits up to timeout (0: no limit) for the
// announcement to be sent; afterwards the others list this member as Left. The member
// keeps answering until Close. Leave is idempotent; it fails after Close.
func (m *Member) Leave(timeout time.Duration) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if m.closed.Load() {
		return errors.New("gossip: leave: member is closed")
	}
	if m.left {
		return nil
	}
	m.left = true
	start := time.Now()

	m.mu.Lock()
	if r := m.members[m.name]; r != nil {
		r.leaving = true
	}
	others := m.alive - 1
	m.mu.Unlock()

	// First our own leave intent, so the others already know it is graceful when
	// memberlist's leave message marks us gone. Half the time budget at most.
	if others > 0 {
		msg := encodeIntent(m.name, m.instance)
		// The servers decide the Node's Ready condition from this: they get the
		// intent over TCP too, so one lost datagram cannot turn a graceful stop
		// into a crash. The others learn it by gossip.
		m.sendToServers(msg)
		done := make(chan struct{}, 1)
		m.broadcasts.QueueBroadcast(&leaveBroadcast{name: m.name, msg: msg, done: done})
		var limit <-chan time.Time
		if timeout > 0 {
			t := time.NewTimer(timeout / 2)
			defer t.Stop()
			limit = t.C
		}
		select {
		case <-done:
		case <-limit:
			m.log.Debug("gossip: leave intent not fully sent before half the timeout")
		}
	}
	remaining := time.Duration(0)
	if timeout > 0 {
		remaining = max(timeout-time.Since(start), time.Millisecond)
	}
	if err := m.ml.Leave(remaining); err != nil {
		return fmt.Errorf("gossip: leave: %w", err)
	}
	return nil
}

// sendToServers sends msg over memberlist's reliable (TCP) channel to every
// live server member but this one. Failures are logged: gossip still carries
// msg.
func (m *Member) sendToServers(msg []byte) {
	for _, n := range m.ml.Members() {
		if n.Name == m.name {
			continue
		}
		var wm wireMeta
		if json.Unmarshal(n.Meta, &wm) != nil || wm.Role != RoleServer {
			continue
		}
		if err := m.ml.SendReliable(n, msg); err != nil {
			m.log.Debug("gossip: leave intent to a server not sent; gossip carries it", "peer", n.Name, "err", err)
		}
	}
}

// Close stops gossiping without announcing it, so the others detect this member as Dead
// (use Leave first for a graceful stop). It closes the Hints channel. Idempotent; it
// waits for a Leave in progress. memberlist's goroutines exit shortly after it returns.
func (m *Member) Close() error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if m.closed.Swap(true) {
		return nil
	}
	close(m.stop)
	<-m.stopped
	err := m.ml.Shutdown()
	m.mu.Lock()
	m.hintsClosed = true
	close(m.hints)
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("gossip: close: %w", err)
	}
	return nil
}

// rejoinAfterSilence exchanges state with the member that answered first
// after a silence (see silence), until Close.
func (m *Member) rejoinAfterSilence() {
	defer close(m.stopped)
	for {
		select {
		case <-m.stop:
			return
		case addr := <-m.silence.rejoin:
			if _, err := m.ml.Join([]string{addr}); err != nil {
				m.log.Debug("gossip: state exchange after a silence failed; the periodic one will do", "peer", addr, "err", err)
			} else {
				m.log.Info("gossip: exchanged state after a silence (a member declared dead meanwhile refutes now)", "peer", addr)
			}
		}
	}
}

// numAlive is the member count the broadcast queue scales retransmissions with.
func (m *Member) numAlive() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return max(m.alive, 1)
}

// hintLocked offers name to the Hints channel without blocking. m.mu must be held.
func (m *Member) hintLocked(name string) {
	if m.hintsClosed {
		return
	}
	select {
	case m.hints <- name:
	default:
		m.dropped++
	}
}

// setStateLocked moves r to state s, keeping the alive count. m.mu must be held.
func (m *Member) setStateLocked(r *record, s State, now time.Time) {
	if r.info.State == Alive {
		m.alive--
	}
	if s == Alive {
		m.alive++
	}
	if r.info.State != s {
		r.info.Since = now
	}
	r.info.State = s
}

// observeAlive records a member memberlist reports alive (join or update).
func (m *Member) observeAlive(n *memberlist.Node) {
	var wm wireMeta
	if err := json.Unmarshal(n.Meta, &wm); err != nil {
		m.log.Debug("gossip: unreadable member metadata", "peer", n.Name, "err", err)
		wm = wireMeta{}
	}
	addr := n.Address()
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.members[n.Name]
	if r == nil || r.instance != wm.Instance {
		// New, or restarted since we saw it: start afresh.
		if r != nil && r.info.State == Alive {
			m.alive--
		}
		r = &record{info: MemberInfo{Name: n.Name, State: Dead}, instance: wm.Instance}
		m.members[n.Name] = r
	}
	r.leaving = false
	r.info.Addr = addr
	r.info.Meta = wm.Meta
	m.setStateLocked(r, Alive, now)
	m.hintLocked(n.Name)
}

// observeGone records a member memberlist declared dead or left.
func (m *Member) observeGone(n *memberlist.Node) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.members[n.Name]
	if r == nil {
		r = &record{info: MemberInfo{Name: n.Name, Addr: n.Address(), State: Dead, Since: now}}
		m.members[n.Name] = r
	}
	s := Dead
	if r.leaving {
		s = Left
	}
	m.setStateLocked(r, s, now)
	m.log.Debug("gossip: member gone", "peer", n.Name, "state", s)
	m.hintLocked(n.Name)
}

// observeIntent records that the named instance announced Leave. It reports whether
// that was news (worth passing on).
func (m *Member) observeIntent(name, instance string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.members[name]
	if r == nil || r.instance != instance || r.leaving {
		return false
	}
	r.leaving = true
	if r.info.State == Dead {
		// memberlist's leave overtook our intent: it was graceful after all.
		r.info.State = Left
		m.hintLocked(name)
	}
	return true
}

// leavingLocked lists the members known to be leaving or Left. m.mu must be held.
func (m *Member) leavingLocked() []intent {
	var out []intent
	for name, r := range m.members {
		if r.leaving {
			out = append(out, intent{Name: name, Instance: r.instance})
		}
	}
	return out
}
