package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/pflag"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/everynode/everynode/client"
)

// LastAppliedAnnotation holds the manifest as last applied, as kubectl's
// client-side apply keeps it, so a later apply can tell removed fields from
// fields the server or other writers set.
const LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// applyFieldManager is the fieldManager kubectl's client-side apply sends.
const applyFieldManager = "kubectl-client-side-apply"

// maxApplyAttempts bounds retries after a write conflict.
const maxApplyAttempts = 5

// ApplyCommand is "everynode apply -f FILE|DIR|-".
type ApplyCommand struct {
	main *Main

	clientFlags
	filename string
}

func (c *ApplyCommand) flags(fs *pflag.FlagSet) {
	fs.StringVarP(&c.filename, "filename", "f", "", "file, directory or - (stdin) with the objects to apply")
}

func (c *ApplyCommand) complete(pos []string) error {
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("unexpected arguments %q", pos), "apply takes only -f")
	}
	if c.filename == "" {
		return usageError("must specify -f", "pass -f FILE, -f DIR or -f - for stdin")
	}
	return nil
}

// Run implements the command: for each object, create it when it does not
// exist, else update it (three-way merge of the last-applied manifest, the
// new manifest and the live object, written with the live resourceVersion).
func (c *ApplyCommand) Run(ctx context.Context, std IO) error {
	ms, err := readManifests(c.filename, std.In)
	if err != nil {
		return err
	}
	if len(ms) == 0 {
		return usageError("no objects passed to apply", "the file holds no documents")
	}
	h, err := c.connect(c.main)
	if err != nil {
		return err
	}
	defer h.Close()
	var last error
	for _, m := range ms {
		result, err := c.applyOne(ctx, h, m)
		if err != nil {
			err = explainTransport(err, h.Server())
			if last != nil {
				fmt.Fprintln(std.Err, FormatError(last))
			}
			last = err
			continue
		}
		fmt.Fprintf(std.Out, "%s %s\n", objectRef(m.r, m.obj.GetName()), result)
	}
	return last
}

func (c *ApplyCommand) applyOne(ctx context.Context, h client.Interface, m manifest) (string, error) {
	result, _, err := applyManifest(ctx, h, m, c.clientFlags, false)
	return result, err
}

// applyManifest applies one manifest as "everynode apply" does and returns
// the result word (created, configured, unchanged) and the object as the
// server answered (the live one when unchanged). With dryRun every write
// is sent with dryRun=All: the server checks and answers it in full and
// stores nothing.
func applyManifest(ctx context.Context, h client.Interface, m manifest, c clientFlags, dryRun bool) (string, client.Object, error) {
	md, _ := m.raw["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		m.raw["metadata"] = md
	}
	name, _ := md["name"].(string)
	if name == "" {
		return "", nil, withFix(fmt.Errorf("error when applying %s: %s has no metadata.name", m.source, m.r.Kind), "give every object a name")
	}
	ns := ""
	if m.r.Namespaced {
		ns, _ = md["namespace"].(string)
		switch {
		case ns == "":
			ns = c.ns()
			md["namespace"] = ns
		case c.namespace != "" && ns != c.namespace:
			return "", nil, withFix(fmt.Errorf("the namespace from the provided object %q does not match the namespace %q", ns, c.namespace),
				fmt.Sprintf("pass --namespace=%s or remove -n", ns))
		}
	}

	// The annotation holds the manifest without itself, as kubectl stores it.
	annotations, _ := md["annotations"].(map[string]any)
	if annotations != nil {
		delete(annotations, LastAppliedAnnotation)
		if len(annotations) == 0 {
			delete(md, "annotations")
		}
	}
	lastApplied, err := json.Marshal(m.raw)
	if err != nil {
		return "", nil, fmt.Errorf("encode %s: %w", name, err)
	}
	if annotations == nil {
		annotations = map[string]any{}
	}
	annotations[LastAppliedAnnotation] = string(lastApplied) + "\n"
	md["annotations"] = annotations
	modified, err := json.Marshal(m.raw)
	if err != nil {
		return "", nil, fmt.Errorf("encode %s: %w", name, err)
	}
	desired := m.r.New()
	if err := json.Unmarshal(modified, desired); err != nil {
		return "", nil, fmt.Errorf("decode %s: %w", name, err)
	}

	opts := client.WriteOptions{FieldManager: applyFieldManager, DryRun: dryRun}
	cur, err := h.Get(ctx, m.r, ns, name)
	if apierrors.IsNotFound(err) {
		out, err := h.Create(ctx, desired, opts)
		if err != nil {
			return "", nil, annotateAPIError(err, "creating", m.source)
		}
		return "created", out, nil
	}
	if err != nil {
		return "", nil, err
	}
	for attempt := 1; ; attempt++ {
		next, changed, err := mergeApplied(m, cur, modified)
		if err != nil {
			return "", nil, err
		}
		if !changed {
			return "unchanged", cur, nil
		}
		upd, err := h.Update(ctx, next, opts)
		if apierrors.IsConflict(err) && attempt < maxApplyAttempts {
			if cur, err = h.Get(ctx, m.r, ns, name); err != nil {
				return "", nil, err
			}
			continue
		}
		if err != nil {
			return "", nil, annotateAPIError(err, "applying patch to", m.source)
		}
		// A write that changed nothing keeps the resourceVersion; a dry
		// run always does, so its answer is compared instead.
		if !dryRun && upd.GetResourceVersion() == cur.GetResourceVersion() || dryRun && sameContent(upd, cur) {
			return "unchanged", upd, nil
		}
		return "configured", upd, nil
	}
}

// sameContent reports whether two versions of an object are the same but
// for their managedFields.
func sameContent(a, b client.Object) bool {
	a, b = a.DeepCopyObject().(client.Object), b.DeepCopyObject().(client.Object)
	a.SetManagedFields(nil)
	b.SetManagedFields(nil)
	return apiequality.Semantic.DeepEqual(a, b)
}

// mergeApplied computes the object to write: the live object with the
// three-way strategic merge patch (last applied → modified, against live)
// applied. changed is false when the patch is empty.
func mergeApplied(m manifest, cur client.Object, modified []byte) (client.Object, bool, error) {
	curJSON, err := json.Marshal(cur)
	if err != nil {
		return nil, false, fmt.Errorf("encode live %s: %w", cur.GetName(), err)
	}
	var original []byte
	if s := cur.GetAnnotations()[LastAppliedAnnotation]; s != "" {
		original = []byte(s)
	}
	meta, err := strategicpatch.NewPatchMetaFromStruct(m.r.New())
	if err != nil {
		return nil, false, fmt.Errorf("patch metadata for %s: %w", m.r.Kind, err)
	}
	patch, err := strategicpatch.CreateThreeWayMergePatch(original, modified, curJSON, meta, true)
	if err != nil {
		return nil, false, fmt.Errorf("compute patch for %s %q: %w", m.r.Kind, cur.GetName(), err)
	}
	if string(patch) == "{}" {
		return nil, false, nil
	}
	merged, err := strategicpatch.StrategicMergePatch(curJSON, patch, m.r.New())
	if err != nil {
		return nil, false, fmt.Errorf("apply patch to %s %q: %w", m.r.Kind, cur.GetName(), err)
	}
	next := m.r.New()
	if err := json.Unmarshal(merged, next); err != nil {
		return nil, false, fmt.Errorf("decode patched %s: %w", m.r.Kind, err)
	}
	next.SetResourceVersion(cur.GetResourceVersion())
	return next, true, nil
}

// annotateAPIError prefixes an API error's message like kubectl does
// (`error when creating "ds.yaml": ...`), keeping it an API error.
func annotateAPIError(err error, verb, source string) error {
	var se *apierrors.StatusError
	if !errors.As(err, &se) {
		return err
	}
	st := se.ErrStatus
	st.Message = fmt.Sprintf("error when %s %q: %s", verb, source, st.Message)
	return &apierrors.StatusError{ErrStatus: st}
}
