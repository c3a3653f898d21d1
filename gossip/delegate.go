package gossip

import (
	"encoding/json"

	"github.com/hashicorp/memberlist"
)

// The adapters below are the only types memberlist calls. memberlist calls them from its
// network and timer goroutines, sometimes holding its own locks: they must not block and
// must not call back into memberlist.

var (
	_ memberlist.Delegate       = (*delegate)(nil)
	_ memberlist.EventDelegate  = (*eventDelegate)(nil)
	_ memberlist.NamedBroadcast = (*leaveBroadcast)(nil)
)

// msgLeaveIntent prefixes a user message announcing a graceful leave.
const msgLeaveIntent byte = 1

// intent names a member instance that announced Leave.
type intent struct {
	Name     string `json:"name"`
	Instance string `json:"instance"`
}

// pushPullState is our part of memberlist's periodic full state exchange: the leave
// intents, so a member that missed the gossip still learns a departure was graceful.
type pushPullState struct {
	Leaving []intent `json:"leaving,omitempty"`
}

func encodeIntent(name, instance string) []byte {
	b, _ := json.Marshal(intent{Name: name, Instance: instance}) // strings always encode
	return append([]byte{msgLeaveIntent}, b...)
}

// delegate adapts Member to memberlist.Delegate: metadata, leave intents and their
// push/pull anti-entropy.
type delegate struct{ m *Member }

// NodeMeta returns the encoded metadata, which Validate kept within the limit.
func (d *delegate) NodeMeta(limit int) []byte {
	if len(d.m.meta) > limit {
		return nil
	}
	return d.m.meta
}

// NotifyMsg handles a leave intent and passes news on (epidemic spread).
func (d *delegate) NotifyMsg(buf []byte) {
	if len(buf) == 0 || buf[0] != msgLeaveIntent {
		return
	}
	var in intent
	if err := json.Unmarshal(buf[1:], &in); err != nil {
		d.m.log.Debug("gossip: bad leave intent", "err", err)
		return
	}
	if d.m.observeIntent(in.Name, in.Instance) {
		msg := append([]byte(nil), buf...) // buf is reused by memberlist after we return
		d.m.broadcasts.QueueBroadcast(&leaveBroadcast{name: in.Name, msg: msg})
	}
}

// GetBroadcasts hands memberlist our queued leave intents to piggyback.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.m.broadcasts.GetBroadcasts(overhead, limit)
}

// LocalState sends the leave intents we know in a push/pull.
func (d *delegate) LocalState(join bool) []byte {
	d.m.mu.Lock()
	st := pushPullState{Leaving: d.m.leavingLocked()}
	d.m.mu.Unlock()
	b, _ := json.Marshal(st) // strings always encode
	return b
}

// MergeRemoteState applies a peer's leave intents.
func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	if len(buf) == 0 {
		return
	}
	var st pushPullState
	if err := json.Unmarshal(buf, &st); err != nil {
		d.m.log.Debug("gossip: bad push/pull state", "err", err)
		return
	}
	for _, in := range st.Leaving {
		d.m.observeIntent(in.Name, in.Instance)
	}
}

// eventDelegate adapts Member to memberlist.EventDelegate: it updates the member table
// and offers a hint, never blocking.
type eventDelegate struct{ m *Member }

func (e *eventDelegate) NotifyJoin(n *memberlist.Node)   { e.m.observeAlive(n) }
func (e *eventDelegate) NotifyUpdate(n *memberlist.Node) { e.m.observeAlive(n) }
func (e *eventDelegate) NotifyLeave(n *memberlist.Node)  { e.m.observeGone(n) }

// leaveBroadcast is a leave intent in memberlist's transmit-limited queue. A newer intent
// for the same member replaces an older one.
type leaveBroadcast struct {
	name string
	msg  []byte
	done chan struct{} // optional, buffered 1: signalled when no longer sent
}

func (b *leaveBroadcast) Name() string { return "leave/" + b.name }

func (b *leaveBroadcast) Invalidates(other memberlist.Broadcast) bool {
	o, ok := other.(memberlist.NamedBroadcast)
	return ok && o.Name() == b.Name()
}

func (b *leaveBroadcast) Message() []byte { return b.msg }

func (b *leaveBroadcast) Finished() {
	if b.done == nil {
		return
	}
	select {
	case b.done <- struct{}{}:
	default:
	}
}
