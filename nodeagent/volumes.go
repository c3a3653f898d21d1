package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	resources "github.com/everynode/everynode/resources/core"
)

// defaultFileMode is the mode of projected files when the volume gives none
// (the API defaults defaultMode to it too).
const defaultFileMode = 0o644

// podObjectRefs are the ConfigMaps and Secrets pod reads (env, envFrom,
// configMap, secret and projected volumes), each once.
func podObjectRefs(pod *corev1.Pod) []objectRef {
	var out []objectRef
	add := func(r *resources.Resource, name string) {
		ref := objectRef{Resource: r, Namespace: pod.Namespace, Name: name}
		if name != "" && !slices.Contains(out, ref) {
			out = append(out, ref)
		}
	}
	eachContainer(pod, func(c *corev1.Container) {
		for _, ef := range c.EnvFrom {
			if ef.ConfigMapRef != nil {
				add(resources.ConfigMaps, ef.ConfigMapRef.Name)
			}
			if ef.SecretRef != nil {
				add(resources.Secrets, ef.SecretRef.Name)
			}
		}
		for _, e := range c.Env {
			if vf := e.ValueFrom; vf != nil {
				if vf.ConfigMapKeyRef != nil {
					add(resources.ConfigMaps, vf.ConfigMapKeyRef.Name)
				}
				if vf.SecretKeyRef != nil {
					add(resources.Secrets, vf.SecretKeyRef.Name)
				}
			}
		}
	})
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			add(resources.ConfigMaps, v.ConfigMap.Name)
		case v.Secret != nil:
			add(resources.Secrets, v.Secret.SecretName)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					add(resources.ConfigMaps, s.ConfigMap.Name)
				}
				if s.Secret != nil {
					add(resources.Secrets, s.Secret.Name)
				}
			}
		}
	}
	return out
}

func eachContainer(pod *corev1.Pod, f func(*corev1.Container)) {
	for i := range pod.Spec.InitContainers {
		f(&pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		f(&pod.Spec.Containers[i])
	}
}

// projectedVolume reports whether v's content is written by the agent
// (configMap, secret, downwardAPI, projected).
func projectedVolume(v *corev1.Volume) bool {
	return v.ConfigMap != nil || v.Secret != nil || v.DownwardAPI != nil || v.Projected != nil
}

func (a *Agent) volumeDir(pod *corev1.Pod, name string) string {
	return filepath.Join(a.podDir(pod.UID), "volumes", name)
}

// Volume directory modes. A volume directory is bind-mounted into containers
// that may run as any user: the agent writes the content of configMap,
// secret, downwardAPI, projected and token volumes, which containers read
// (0755, files by their modes); an emptyDir is the containers' own scratch
// space, which any of them may write, as kubelet makes it (0777).
const (
	writtenVolumeMode fs.FileMode = 0o755
	emptyDirMode      fs.FileMode = 0o777
)

// makeVolumeDir creates pod's volume directory name with mode, and the
// pod's directories above it private to the agent's user (0700), if they do
// not exist yet. The mode is set whatever the agent's umask when the
// directory is created, and only then: a container may have changed it
// since (an init container making its data directory 0700), and kubelet
// too sets a volume up once. The runtime, as root, reaches the volume
// through the private parents.
func (a *Agent) makeVolumeDir(pod *corev1.Pod, name string, mode fs.FileMode) (string, error) {
	dir := a.volumeDir(pod, name)
	err := os.Mkdir(dir, mode)
	if errors.Is(err, fs.ErrNotExist) { // the pod's directories first
		if err = os.MkdirAll(filepath.Dir(dir), 0o700); err == nil {
			err = os.Mkdir(dir, mode)
		}
	}
	switch {
	case errors.Is(err, fs.ErrExist):
		return dir, nil // set up before: one system call on a refresh
	case err != nil:
		return "", err
	}
	return dir, os.Chmod(dir, mode)
}

// errSubPathDirs marks prepareSubPath's failures to make a missing
// subPath's directories (or to open its volume), kubelet's "failed to
// create subPath directory".
var errSubPathDirs = errors.New("making the subPath's directories")

// prepareSubPath returns the host path of sub (relative, without "..")
// inside the volume directory root, as kubelet prepares a subPath of any
// volume: a sub that does not exist yet is made as directories, each with
// root's mode (setuid, setgid and sticky bits included); one that exists may be a
// file or a directory, reached through symbolic links that stay inside the
// volume. It works inside root as an os.Root, so a link a container planted
// in the volume cannot lead it, or what it makes, outside; the path it
// returns has those links resolved, so the runtime binds what was checked.
func prepareSubPath(root, sub string) (string, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errSubPathDirs, err)
	}
	defer r.Close()
	if _, err = r.Stat(sub); errors.Is(err, fs.ErrNotExist) {
		if err := makeSubPathDirs(r, sub); err != nil {
			return "", fmt.Errorf("%w: %w", errSubPathDirs, err)
		}
		_, err = r.Stat(sub)
	}
	if err != nil {
		return "", err
	}
	base, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", err
	}
	p, err := filepath.EvalSymlinks(filepath.Join(base, sub))
	if err != nil {
		return "", err
	}
	if rel, err := filepath.Rel(base, p); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%s leads out of the volume to %s", sub, p)
	}
	return p, nil
}

// makeSubPathDirs makes the directories of sub that do not exist in r,
// each with the mode of r's top directory.
func makeSubPathDirs(r *os.Root, sub string) error {
	fi, err := r.Stat(".")
	if err != nil {
		return err
	}
	mode := fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	p := "."
	for part := range strings.SplitSeq(filepath.Clean(sub), string(filepath.Separator)) {
		p = filepath.Join(p, part)
		err := r.Mkdir(p, mode.Perm())
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err == nil {
			err = chmodDir(r, p, mode)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// chmodDir sets the mode of the directory p in r through a descriptor of
// it, opened without following a link: a container that swapped the new
// directory for a link cannot have the agent change another file's mode.
func chmodDir(r *os.Root, p string, mode fs.FileMode) error {
	f, err := r.OpenFile(p, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Chmod(mode)
}

// writeVolume writes payload into pod's volume directory name (atomically)
// and returns the directory.
func (a *Agent) writeVolume(pod *corev1.Pod, name string, payload map[string]fileProjection) (string, error) {
	dir, err := a.makeVolumeDir(pod, name, writtenVolumeMode)
	if err != nil {
		return "", err
	}
	if _, err := writeAtomic(dir, payload, a.clock.Now()); err != nil {
		return "", fmt.Errorf("write %s: %w", dir, err)
	}
	return dir, nil
}

// setUpVolume writes the content of a configMap, secret, downwardAPI or
// projected volume into its directory (atomically, as kubelet) and returns
// the directory. The error is kubelet's MountVolume.SetUp message.
func (a *Agent) setUpVolume(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) (string, error) {
	if a.cfg.DataDir == "" {
		return "", fmt.Errorf("volume %q: %s volumes need the agent's data dir (--data-dir)", v.Name, volumeKind(v))
	}
	payload, err := a.volumePayload(ctx, pod, v)
	if err != nil {
		return "", fmt.Errorf("MountVolume.SetUp failed for volume %q : %w", v.Name, err)
	}
	dir, err := a.writeVolume(pod, v.Name, payload)
	if err != nil {
		return "", fmt.Errorf("MountVolume.SetUp failed for volume %q : %w", v.Name, err)
	}
	return dir, nil
}

// refreshVolumes rewrites the agent-written volumes already set up, so
// ConfigMap and Secret edits reach running containers. A volume whose
// content cannot be computed now (its object was deleted, the server is
// unreachable and nothing is kept) keeps what it has, as with kubelet.
func (a *Agent) refreshVolumes(ctx context.Context, pod *corev1.Pod) {
	if a.cfg.DataDir == "" {
		return
	}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if !projectedVolume(v) {
			continue
		}
		if _, err := os.Lstat(filepath.Join(a.volumeDir(pod, v.Name), atomicDataDir)); err != nil {
			continue // not set up yet: the container start does it
		}
		if _, err := a.setUpVolume(ctx, pod, v); err != nil {
			a.log.Debug("volume not refreshed", "pod", podRef(pod), "volume", v.Name, "err", err)
		}
	}
	if _, err := os.Lstat(filepath.Join(a.volumeDir(pod, serviceAccountVolume), atomicDataDir)); err == nil {
		if _, err := a.setUpServiceAccountVolume(ctx, pod); err != nil {
			a.log.Debug("service account token not refreshed", "pod", podRef(pod), "err", err)
		}
	}
}

func volumeKind(v *corev1.Volume) string {
	switch {
	case v.ConfigMap != nil:
		return "configMap"
	case v.Secret != nil:
		return "secret"
	case v.DownwardAPI != nil:
		return "downwardAPI"
	case v.Projected != nil:
		return "projected"
	}
	return "unknown"
}

// volumePayload is the files of an agent-written volume.
func (a *Agent) volumePayload(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) (map[string]fileProjection, error) {
	out := map[string]fileProjection{}
	switch {
	case v.ConfigMap != nil:
		s := v.ConfigMap
		return out, a.projectObject(ctx, out, objectRef{resources.ConfigMaps, pod.Namespace, s.Name}, s.Items, s.DefaultMode, s.Optional)
	case v.Secret != nil:
		s := v.Secret
		return out, a.projectObject(ctx, out, objectRef{resources.Secrets, pod.Namespace, s.SecretName}, s.Items, s.DefaultMode, s.Optional)
	case v.DownwardAPI != nil:
		return out, a.projectDownward(pod, out, v.DownwardAPI.Items, v.DownwardAPI.DefaultMode)
	case v.Projected != nil:
		mode := v.Projected.DefaultMode
		for _, s := range v.Projected.Sources {
			var err error
			switch {
			case s.ConfigMap != nil:
				err = a.projectObject(ctx, out, objectRef{resources.ConfigMaps, pod.Namespace, s.ConfigMap.Name}, s.ConfigMap.Items, mode, s.ConfigMap.Optional)
			case s.Secret != nil:
				err = a.projectObject(ctx, out, objectRef{resources.Secrets, pod.Namespace, s.Secret.Name}, s.Secret.Items, mode, s.Secret.Optional)
			case s.DownwardAPI != nil:
				err = a.projectDownward(pod, out, s.DownwardAPI.Items, mode)
			case s.ServiceAccountToken != nil:
				err = a.projectToken(ctx, pod, out, s.ServiceAccountToken, mode)
			default:
				err = errors.New("only configMap, secret, downwardAPI and serviceAccountToken projections are supported")
			}
			if err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("volume %q is not a %s volume", v.Name, "configMap, secret, downwardAPI or projected")
}

// objectData is a ConfigMap's data and binaryData, or a Secret's data.
func objectData(obj resources.Object) map[string][]byte {
	out := map[string][]byte{}
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		for k, v := range o.Data {
			out[k] = []byte(v)
		}
		for k, v := range o.BinaryData {
			out[k] = v
		}
	case *corev1.Secret:
		for k, v := range o.Data {
			out[k] = v
		}
	}
	return out
}

func fileMode(item, def *int32) os.FileMode {
	switch {
	case item != nil:
		return os.FileMode(*item) & os.ModePerm
	case def != nil:
		return os.FileMode(*def) & os.ModePerm
	}
	return defaultFileMode
}

// projectObject adds the keys of a ConfigMap or Secret (all, or items) to
// out, with kubelet's errors for what is missing and not optional.
func (a *Agent) projectObject(ctx context.Context, out map[string]fileProjection, r objectRef, items []corev1.KeyToPath, defMode *int32, optional *bool) error {
	opt := optional != nil && *optional
	obj, err := a.objects.get(ctx, r)
	if apierrors.IsNotFound(err) && opt {
		return nil
	}
	if err != nil {
		return err
	}
	data := objectData(obj)
	if len(items) == 0 {
		for k, v := range data {
			out[k] = fileProjection{Data: v, Mode: fileMode(nil, defMode)}
		}
		return nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if opt {
				continue
			}
			if r.Resource == resources.Secrets {
				return fmt.Errorf("references non-existent secret key: %s", it.Key)
			}
			return fmt.Errorf("configmap references non-existent config key: %s", it.Key)
		}
		out[it.Path] = fileProjection{Data: v, Mode: fileMode(it.Mode, defMode)}
	}
	return nil
}

// projectDownward adds downwardAPI items to out.
func (a *Agent) projectDownward(pod *corev1.Pod, out map[string]fileProjection, items []corev1.DownwardAPIVolumeFile, defMode *int32) error {
	for _, it := range items {
		var v string
		var err error
		switch {
		case it.FieldRef != nil:
			v, err = a.fieldRef(pod, it.FieldRef.FieldPath)
		case it.ResourceFieldRef != nil:
			i := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == it.ResourceFieldRef.ContainerName })
			if i < 0 {
				err = fmt.Errorf("container %q not found in pod", it.ResourceFieldRef.ContainerName)
				break
			}
			v, err = resourceFieldRef(&pod.Spec.Containers[i], it.ResourceFieldRef)
		default:
			err = errors.New("item has neither fieldRef nor resourceFieldRef")
		}
		if err != nil {
			return fmt.Errorf("downwardAPI %s: %w", it.Path, err)
		}
		out[it.Path] = fileProjection{Data: []byte(v), Mode: fileMode(it.Mode, defMode)}
	}
	return nil
}
