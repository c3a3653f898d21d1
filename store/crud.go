package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/everynode/everynode/resources"
)

// Create stores a new object and returns it with its resourceVersion.
// obj.ResourceVersion must be empty; obj is not modified. An object under the
// same key yields AlreadyExists.
func (s *Store) Create(ctx context.Context, r *resources.Resource, obj resources.Object) (resources.Object, error) {
	if err := checkType(r, obj); err != nil {
		return nil, err
	}
	ns, name := obj.GetNamespace(), obj.GetName()
	key, err := keyOf(r, ns, name)
	if err != nil {
		return nil, err
	}
	if obj.GetResourceVersion() != "" {
		return nil, newError(Invalid, r, ns, name, errors.New("resourceVersion should not be set on objects to be created"))
	}
	data, out, err := encode(r, obj)
	if err != nil {
		return nil, err
	}
	if data, err = s.atRest.toStorage(r, key, data); err != nil {
		return nil, newError(Internal, r, ns, name, err)
	}
	opts, err := s.leases.putOpts(ctx, r)
	if err != nil {
		return nil, newError(Internal, r, ns, name, err)
	}
	if err := notStarted(ctx); err != nil {
		return nil, newError(Internal, r, ns, name, fmt.Errorf("store: create %s: %w", key, err))
	}
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(data), opts...)).
		Commit()
	if err != nil {
		return nil, newError(Internal, r, ns, name, fmt.Errorf("store: create %s: %w", key, err))
	}
	if !resp.Succeeded {
		return nil, newError(AlreadyExists, r, ns, name, nil)
	}
	s.noteWritten(r, resp.Header.Revision)
	out.SetResourceVersion(formatRV(resp.Header.Revision))
	return out, nil
}

// Get reads one object from etcd (a linearizable read, not the cache). The
// caller owns the returned object.
func (s *Store) Get(ctx context.Context, r *resources.Resource, namespace, name string) (resources.Object, error) {
	key, err := keyOf(r, namespace, name)
	if err != nil {
		return nil, err
	}
	obj, _, _, err := s.get(ctx, r, key, namespace, name)
	return obj, err
}

// get reads and decodes key, returning the object, its stored bytes
// (decrypted) and whether they are stored under an older key or in plaintext.
func (s *Store) get(ctx context.Context, r *resources.Resource, key, namespace, name string) (resources.Object, []byte, bool, error) {
	resp, err := s.client.Get(ctx, key)
	if err != nil {
		return nil, nil, false, newError(Internal, r, namespace, name, fmt.Errorf("store: get %s: %w", key, err))
	}
	if len(resp.Kvs) == 0 {
		return nil, nil, false, newError(NotFound, r, namespace, name, nil)
	}
	kv := resp.Kvs[0]
	data, stale, err := s.atRest.fromStorage(r, key, kv.Value)
	if err != nil {
		return nil, nil, false, newError(Internal, r, namespace, name, fmt.Errorf("store: get %s: %w", key, err))
	}
	obj, err := decode(r, data, kv.ModRevision)
	if err != nil {
		return nil, nil, false, newError(Internal, r, namespace, name, fmt.Errorf("store: get %s: %w", key, err))
	}
	return obj, data, stale, nil
}

// Update replaces an object if obj.ResourceVersion equals its stored
// revision (Conflict otherwise; Invalid if empty; NotFound if it does not
// exist) and returns it with the new resourceVersion. obj is not modified.
func (s *Store) Update(ctx context.Context, r *resources.Resource, obj resources.Object) (resources.Object, error) {
	if err := checkType(r, obj); err != nil {
		return nil, err
	}
	ns, name := obj.GetNamespace(), obj.GetName()
	key, err := keyOf(r, ns, name)
	if err != nil {
		return nil, err
	}
	rv, err := parseRV(obj.GetResourceVersion())
	if err != nil {
		return nil, newError(Invalid, r, ns, name, err)
	}
	if rv == 0 {
		return nil, newError(Invalid, r, ns, name, errors.New("metadata.resourceVersion must be specified for an update"))
	}
	data, out, err := encode(r, obj)
	if err != nil {
		return nil, err
	}
	if data, err = s.atRest.toStorage(r, key, data); err != nil {
		return nil, newError(Internal, r, ns, name, err)
	}
	newRV, _, err := s.casPut(ctx, r, key, ns, name, rv, data)
	if err != nil {
		return nil, err
	}
	out.SetResourceVersion(formatRV(newRV))
	return out, nil
}

// casPut writes data under key if its mod revision is rev. On a mismatch it
// returns a Conflict error together with the current kv (nil if the key is
// gone, in which case the error is NotFound).
func (s *Store) casPut(ctx context.Context, r *resources.Resource, key, ns, name string, rev int64, data []byte) (int64, *kvState, error) {
	// An expiring object's TTL starts again at every write, as in Kubernetes.
	opts, err := s.leases.putOpts(ctx, r)
	if err != nil {
		return 0, nil, newError(Internal, r, ns, name, err)
	}
	if err := notStarted(ctx); err != nil {
		return 0, nil, newError(Internal, r, ns, name, fmt.Errorf("store: update %s: %w", key, err))
	}
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, string(data), opts...)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return 0, nil, newError(Internal, r, ns, name, fmt.Errorf("store: update %s: %w", key, err))
	}
	if resp.Succeeded {
		s.noteWritten(r, resp.Header.Revision)
		return resp.Header.Revision, nil, nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return 0, nil, newError(NotFound, r, ns, name, nil)
	}
	return 0, &kvState{value: kvs[0].Value, rev: kvs[0].ModRevision}, newError(Conflict, r, ns, name, errModified)
}

// kvState is one stored version of a key.
type kvState struct {
	value []byte
	rev   int64
}

// GuaranteedUpdate reads the object, calls try with a copy of it and writes
// try's result if the object has not changed meanwhile; on a concurrent change
// it re-reads and calls try again. An error from try is returned as is. If
// try's result encodes to the same bytes as the stored object, nothing is
// written and the current object (with its unchanged resourceVersion) is
// returned. The resourceVersion of try's result is ignored: callers that need
// a precondition check it inside try. try must keep namespace and name.
//
// The first read is the watch cache's copy when it has one, as
// kube-apiserver's storage starts from its cached object: the write is
// conditional on that version, so a copy that is out of date costs a failed
// write, which returns the current version, and try runs again on it. What
// try decides on a cached copy is not final either: when try fails, or
// changes nothing, the object is read from etcd and try runs on that, so
// errors and no-op answers are about the current object, as before. So try
// may run on an out-of-date copy, and more than once: what it does besides
// returning the object (an allocation, say) must be safe to repeat or to
// leave unused, as it already had to be for a conflict.
func (s *Store) GuaranteedUpdate(ctx context.Context, r *resources.Resource, namespace, name string,
	try func(cur resources.Object) (resources.Object, error)) (resources.Object, error) {
	key, err := keyOf(r, namespace, name)
	if err != nil {
		return nil, err
	}
	var (
		cur      resources.Object
		curData  []byte
		stale    bool
		current  = true // cur was read from etcd, not the cache
		readEtcd = func() error {
			var err error
			cur, curData, stale, err = s.get(ctx, r, key, namespace, name)
			current = true
			return err
		}
	)
	if cur = s.cachedObject(r, key); cur != nil {
		current = false
	} else if err := readEtcd(); err != nil {
		return nil, err
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, newError(Internal, r, namespace, name, fmt.Errorf("store: update %s: %w", key, err))
		}
		rev, _ := parseRV(cur.GetResourceVersion())
		in, ok := cur.DeepCopyObject().(resources.Object)
		if !ok {
			return nil, newError(Internal, r, namespace, name, fmt.Errorf("store: copy of %T is not an Object", cur))
		}
		if !current {
			// The cached copy's value, to tell a no-op: encoded from try's
			// copy before try gets it, instead of copying the object again.
			rv := in.GetResourceVersion()
			if curData, err = encodeInPlace(r, in); err != nil {
				return nil, err
			}
			in.SetResourceVersion(rv)
		}
		next, err := try(in)
		if err != nil {
			if !current {
				if err := readEtcd(); err != nil {
					return nil, err
				}
				continue
			}
			return nil, err
		}
		if err := checkType(r, next); err != nil {
			return nil, err
		}
		if next.GetNamespace() != namespace || next.GetName() != name {
			return nil, newError(Invalid, r, namespace, name, fmt.Errorf("update changed the object's key to %s/%s", next.GetNamespace(), next.GetName()))
		}
		data, out, err := encode(r, next)
		if err != nil {
			return nil, err
		}
		if !current {
			if bytes.Equal(data, curData) {
				// No change to the cached copy: compare with the stored one.
				if err := readEtcd(); err != nil {
					return nil, err
				}
				if !bytes.Equal(data, curData) {
					continue
				}
			}
		}
		if bytes.Equal(data, curData) && !stale {
			return cur, nil
		}
		stored, err := s.atRest.toStorage(r, key, data)
		if err != nil {
			return nil, newError(Internal, r, namespace, name, err)
		}
		newRV, latest, err := s.casPut(ctx, r, key, namespace, name, rev, stored)
		if err == nil {
			out.SetResourceVersion(formatRV(newRV))
			return out, nil
		}
		if latest == nil {
			return nil, err
		}
		current = true
		if curData, stale, err = s.atRest.fromStorage(r, key, latest.value); err != nil {
			return nil, newError(Internal, r, namespace, name, fmt.Errorf("store: update %s: %w", key, err))
		}
		if cur, err = decode(r, curData, latest.rev); err != nil {
			return nil, newError(Internal, r, namespace, name, fmt.Errorf("store: update %s: %w", key, err))
		}
	}
}

// Delete removes an object if the preconditions hold (Conflict otherwise) and
// returns its last state with the deletion's resourceVersion, as Kubernetes
// does, so a watch can resume right after the delete.
//
// As GuaranteedUpdate, it starts from the watch cache's copy when there is
// one: the delete is conditional on that version, and a precondition that
// fails on it is checked again on the object read from etcd.
func (s *Store) Delete(ctx context.Context, r *resources.Resource, namespace, name string, pre *Preconditions) (resources.Object, error) {
	key, err := keyOf(r, namespace, name)
	if err != nil {
		return nil, err
	}
	var preRV int64
	if pre != nil {
		if preRV, err = parseRV(pre.ResourceVersion); err != nil {
			return nil, newError(Invalid, r, namespace, name, fmt.Errorf("precondition: %w", err))
		}
	}
	cur, current := s.cachedObject(r, key), false // cur is read-only: it may be the cache's
	if cur == nil {
		if cur, _, _, err = s.get(ctx, r, key, namespace, name); err != nil {
			return nil, err
		}
		current = true
	}
	for {
		if err := checkPreconditions(r, cur, pre, preRV); err != nil {
			if current {
				return nil, err
			}
			if cur, _, _, err = s.get(ctx, r, key, namespace, name); err != nil {
				return nil, err
			}
			current = true
			continue
		}
		rev, _ := parseRV(cur.GetResourceVersion())
		if err := notStarted(ctx); err != nil {
			return nil, newError(Internal, r, namespace, name, fmt.Errorf("store: delete %s: %w", key, err))
		}
		resp, err := s.client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpDelete(key, clientv3.WithPrevKV())).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return nil, newError(Internal, r, namespace, name, fmt.Errorf("store: delete %s: %w", key, err))
		}
		if resp.Succeeded {
			s.noteWritten(r, resp.Header.Revision)
			prev := resp.Responses[0].GetResponseDeleteRange().GetPrevKvs()
			if len(prev) == 0 { // etcd returns what it deleted; cannot happen
				return nil, newError(Internal, r, namespace, name, fmt.Errorf("store: delete %s: no previous value", key))
			}
			out, err := s.atRest.decode(r, prev[0].Key, prev[0].Value, prev[0].ModRevision)
			if err != nil {
				return nil, newError(Internal, r, namespace, name, fmt.Errorf("store: delete %s: %w", key, err))
			}
			out.SetResourceVersion(formatRV(resp.Header.Revision))
			return out, nil
		}
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return nil, newError(NotFound, r, namespace, name, nil)
		}
		if cur, err = s.atRest.decode(r, kvs[0].Key, kvs[0].Value, kvs[0].ModRevision); err != nil {
			return nil, newError(Internal, r, namespace, name, fmt.Errorf("store: delete %s: %w", key, err))
		}
		current = true
	}
}

// checkPreconditions is Delete's check of pre (preRV parsed) against cur.
func checkPreconditions(r *resources.Resource, cur resources.Object, pre *Preconditions, preRV int64) error {
	if pre == nil {
		return nil
	}
	ns, name := cur.GetNamespace(), cur.GetName()
	if pre.UID != "" && string(cur.GetUID()) != pre.UID {
		return newError(Conflict, r, ns, name,
			fmt.Errorf("precondition failed: UID in precondition: %s, UID in object meta: %s", pre.UID, cur.GetUID()))
	}
	if preRV != 0 && cur.GetResourceVersion() != formatRV(preRV) {
		return newError(Conflict, r, ns, name,
			fmt.Errorf("precondition failed: ResourceVersion in precondition: %d, ResourceVersion in object meta: %s", preRV, cur.GetResourceVersion()))
	}
	return nil
}

// notStarted is ctx's error if it has already ended: a write whose request
// was cancelled or timed out is not sent at all (etcd's client would send it
// and only then report the deadline, leaving the caller unsure whether it
// happened).
func notStarted(ctx context.Context) error {
	return ctx.Err()
}
