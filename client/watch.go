package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/resources"
)

// streamWatcher decodes a watch response body, one {"type","object"} JSON
// value after another, into typed watch events. Its one goroutine owns the
// body; it ends when the stream ends, fails, or Stop is called, and then
// closes the result channel.
type streamWatcher struct {
	r      *resources.Resource
	body   io.ReadCloser
	cancel func() // cancels the request, unblocking a pending read
	log    *slog.Logger

	result   chan watch.Event
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

func newStreamWatcher(r *resources.Resource, body io.ReadCloser, cancel func(), log *slog.Logger) *streamWatcher {
	w := &streamWatcher{
		r: r, body: body, cancel: cancel, log: log,
		result: make(chan watch.Event),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go w.run()
	return w
}

// ResultChan implements watch.Interface.
func (w *streamWatcher) ResultChan() <-chan watch.Event { return w.result }

// Stop implements watch.Interface. It is idempotent and returns once the
// watcher's goroutine has exited.
func (w *streamWatcher) Stop() {
	w.stopOnce.Do(func() {
		close(w.stop)
		w.cancel()
	})
	<-w.done
}

func (w *streamWatcher) run() {
	defer close(w.done)
	defer close(w.result)
	defer w.cancel()
	defer w.body.Close()
	dec := json.NewDecoder(w.body)
	for {
		var raw metav1.WatchEvent
		if err := dec.Decode(&raw); err != nil {
			select {
			case <-w.stop:
				return
			default:
			}
			if !errors.Is(err, io.EOF) {
				w.log.Debug("watch stream ended", "err", err)
			}
			return
		}
		ev, err := w.decode(raw)
		if err != nil {
			// A malformed event ends the stream with an error event, as
			// client-go does, so the caller re-lists instead of missing it.
			ev = watch.Event{Type: watch.Error, Object: &apierrors.NewInternalError(err).ErrStatus}
		}
		select {
		case w.result <- ev:
		case <-w.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

func (w *streamWatcher) decode(raw metav1.WatchEvent) (watch.Event, error) {
	typ := watch.EventType(raw.Type)
	switch typ {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
		obj := w.r.New()
		if err := json.Unmarshal(raw.Object.Raw, obj); err != nil {
			return watch.Event{}, fmt.Errorf("client: decode %s watch event: %w", w.r.Kind, err)
		}
		w.r.SetTypeMeta(obj)
		return watch.Event{Type: typ, Object: obj}, nil
	case watch.Error:
		st := &metav1.Status{}
		if err := json.Unmarshal(raw.Object.Raw, st); err != nil {
			return watch.Event{}, fmt.Errorf("client: decode watch error event: %w", err)
		}
		st.APIVersion, st.Kind = "v1", "Status"
		return watch.Event{Type: typ, Object: st}, nil
	}
	return watch.Event{}, fmt.Errorf("client: unknown watch event type %q", raw.Type)
}
