package nodeagent

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/nodeagent/runtime"
	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
	"github.com/everynode/everynode/resources"
)

func testConfigMap(data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cfg"},
		Data:       data,
	}
}

func testSecret() *corev1.Secret {
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "sec"},
		Data:       map[string][]byte{"password": []byte("hunter2"), "user": []byte("admin")},
	}
}

func ref(name string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: name} }

// consumingPod uses the ConfigMap cfg and the Secret sec every way a pod can.
func consumingPod(p *corev1.Pod) {
	p.Labels = map[string]string{"app": "web", "tier": "a"}
	p.Spec.ServiceAccountName = "robot"
	p.Status.PodIP = "10.1.2.3"
	p.Status.PodIPs = []corev1.PodIP{{IP: "10.1.2.3"}, {IP: "fd00::3"}}
	p.Spec.Volumes = []corev1.Volume{
		{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: ref("cfg"), DefaultMode: ptr(int32(0o640)),
			Items: []corev1.KeyToPath{{Key: "app.conf", Path: "conf/app.conf"}, {Key: "level", Path: "level", Mode: ptr(int32(0o600))}}}}},
		{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "sec"}}},
		{Name: "opt", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "absent", Optional: ptr(true)}}},
		{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
		}}}},
		{Name: "all", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: ref("cfg"), Items: []corev1.KeyToPath{{Key: "level", Path: "level"}}}},
			{Secret: &corev1.SecretProjection{LocalObjectReference: ref("sec"), Items: []corev1.KeyToPath{{Key: "user", Path: "user"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "ns", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		}}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	c := &p.Spec.Containers[0]
	c.EnvFrom = []corev1.EnvFromSource{
		{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref("cfg")}},
		{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: ref("gone"), Optional: ptr(true)}},
	}
	fr := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	c.Env = []corev1.EnvVar{
		{Name: "LEVEL", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref("cfg"), Key: "level"}}},
		{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: ref("sec"), Key: "password"}}},
		{Name: "NOKEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: ref("sec"), Key: "nope", Optional: ptr(true)}}},
		{Name: "CFG_level", Value: "overridden"},
		{Name: "SA", ValueFrom: fr("spec.serviceAccountName")},
		{Name: "UID", ValueFrom: fr("metadata.uid")},
		{Name: "TIER", ValueFrom: fr("metadata.labels['tier']")},
		{Name: "IPS", ValueFrom: fr("status.podIPs")},
		{Name: "HOST", ValueFrom: fr("status.hostIP")},
		{Name: "DIR", Value: "sub-$(TIER)"},
	}
	c.VolumeMounts = []corev1.VolumeMount{
		{Name: "cfg", MountPath: "/etc/app"},
		{Name: "sec", MountPath: "/etc/sec"},
		{Name: "opt", MountPath: "/etc/opt"},
		{Name: "info", MountPath: "/etc/info"},
		{Name: "all", MountPath: "/etc/all"},
		{Name: "cfg", MountPath: "/etc/level", SubPath: "level"},
		{Name: "scratch", MountPath: "/data", SubPathExpr: "$(DIR)"},
	}
}

func TestConfigMapSecretConsumption(t *testing.T) {
	e := newEnv(t, rtfake.Config{}, testConfigMap(map[string]string{"app.conf": "a=1\n", "level": "debug"}), testSecret())
	pod := newPod("consumer", consumingPod)
	spec, err := e.agent.containerSpec(t.Context(), pod, &pod.Spec.Containers[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	var names []string
	for _, v := range spec.Env {
		env[v.Name] = v.Value
		names = append(names, v.Name)
	}
	wantEnv := map[string]string{
		"CFG_app.conf": "a=1\n", "CFG_level": "overridden", "LEVEL": "debug", "PASSWORD": "hunter2",
		"SA": "robot", "UID": "uid-consumer", "TIER": "a", "IPS": "10.1.2.3,fd00::3", "HOST": "192.0.2.10", "DIR": "sub-a",
	}
	for k, v := range wantEnv {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	if _, ok := env["NOKEY"]; ok {
		t.Errorf("optional missing key set: %v", names)
	}
	if len(env) != len(wantEnv) {
		t.Errorf("env names %v, want those of %v", names, wantEnv)
	}
	mounts := map[string]runtime.Mount{}
	for _, m := range spec.Mounts {
		mounts[m.Target] = m
	}
	read := func(target, rel string) string {
		t.Helper()
		m := mounts[target]
		if m.Type != runtime.MountBind || !m.ReadOnly {
			t.Errorf("mount %s = %+v, want a read-only bind", target, m)
		}
		b, err := os.ReadFile(filepath.Join(m.Source, rel))
		if err != nil {
			t.Fatalf("mount %s: %v", target, err)
		}
		return string(b)
	}
	mode := func(target, rel string) os.FileMode {
		t.Helper()
		fi, err := os.Stat(filepath.Join(mounts[target].Source, rel))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	checks := []struct{ target, rel, want string }{
		{"/etc/app", "conf/app.conf", "a=1\n"},
		{"/etc/app", "level", "debug"},
		{"/etc/sec", "password", "hunter2"},
		{"/etc/info", "labels", "app=\"web\"\ntier=\"a\""},
		{"/etc/info", "name", "consumer"},
		{"/etc/all", "level", "debug"},
		{"/etc/all", "user", "admin"},
		{"/etc/all", "ns", "default"},
		{"/etc/level", "", "debug"},
	}
	for _, c := range checks {
		if got := read(c.target, c.rel); got != c.want {
			t.Errorf("%s/%s = %q, want %q", c.target, c.rel, got, c.want)
		}
	}
	if m := mode("/etc/app", "conf/app.conf"); m != 0o640 {
		t.Errorf("defaultMode: %o", m)
	}
	if m := mode("/etc/app", "level"); m != 0o600 {
		t.Errorf("item mode: %o", m)
	}
	if m := mode("/etc/sec", "user"); m != defaultFileMode {
		t.Errorf("secret default mode: %o", m)
	}
	if entries, err := os.ReadDir(mounts["/etc/opt"].Source); err != nil || len(entries) != 2 { // ..data and its target
		t.Errorf("optional missing secret volume: %v %v", entries, err)
	}
	if d := mounts["/data"]; d.ReadOnly || !strings.HasSuffix(d.Source, filepath.Join("volumes", "scratch", "sub-a")) {
		t.Errorf("subPathExpr mount %+v", d)
	}
	// Volume directories' modes, as kubelet's, which the process's umask
	// must not narrow (TestMakeVolumeDirModes sets one): an emptyDir and the
	// subPath made in it are writable by the containers' users (0777); a
	// volume the agent writes is readable (0755).
	dirMode := func(path string) os.FileMode {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	if m := dirMode(filepath.Dir(mounts["/data"].Source)); m != 0o777 {
		t.Errorf("emptyDir directory mode %o, want 777", m)
	}
	if m := dirMode(mounts["/data"].Source); m != 0o777 {
		t.Errorf("emptyDir subPath directory mode %o, want 777", m)
	}
	if m := dirMode(mounts["/etc/sec"].Source); m != 0o755 {
		t.Errorf("secret volume directory mode %o, want 755", m)
	}
	// Kubelet's layout: the visible names are symlinks through ..data.
	if target, err := os.Readlink(filepath.Join(mounts["/etc/sec"].Source, "password")); err != nil || target != "..data/password" {
		t.Errorf("password -> %q (%v)", target, err)
	}
}

// TestMakeVolumeDirModes: a new emptyDir directory is 0777 whatever the
// umask, and the pod's directories above it private; one that exists keeps
// the mode a container gave it (kubelet sets a volume up once).
func TestMakeVolumeDirModes(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	a := &Agent{cfg: Config{DataDir: t.TempDir()}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "uid-modes"}}
	dir, err := a.makeVolumeDir(pod, "scratch", emptyDirMode)
	if err != nil {
		t.Fatal(err)
	}
	checkMode(t, dir, 0o777)
	checkMode(t, a.podDir(pod.UID), 0o700)
	checkMode(t, filepath.Dir(dir), 0o700)
	if err := os.Chmod(dir, 0o700); err != nil { // an init container's chmod
		t.Fatal(err)
	}
	if again, err := a.makeVolumeDir(pod, "scratch", emptyDirMode); err != nil || again != dir {
		t.Fatalf("makeVolumeDir again = %q, %v", again, err)
	}
	checkMode(t, dir, 0o700)
}

// TestPrepareSubPath: a missing subPath's new directories take the volume's
// mode, setgid and sticky bits included, whatever the umask; an existing one
// may be a file, or reached through a link inside the volume, and comes back
// resolved; a symbolic link cannot lead it outside the volume, and nothing
// is made there.
func TestPrepareSubPath(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	tmp, err := filepath.EvalSymlinks(t.TempDir()) // paths come back resolved
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(tmp, "vol")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o777|os.ModeSetgid|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	sub, err := prepareSubPath(root, "a/b")
	if err != nil || sub != filepath.Join(root, "a", "b") {
		t.Fatalf("prepareSubPath = %q, %v", sub, err)
	}
	for _, p := range []string{filepath.Join(root, "a"), sub} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := fi.Mode()&(os.ModePerm|os.ModeSetgid|os.ModeSticky), 0o777|os.ModeSetgid|os.ModeSticky; got != want {
			t.Errorf("%s: mode %v, want %v", p, got, want)
		}
	}
	if again, err := prepareSubPath(root, "a/b"); err != nil || again != sub {
		t.Errorf("prepareSubPath of an existing path = %q, %v", again, err)
	}

	// A file an init container wrote, and links that stay inside.
	file := filepath.Join(root, "a", "app.conf")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o644); err != nil { // the umask took some
		t.Fatal(err)
	}
	if err := os.Symlink("a/b", filepath.Join(root, "in")); err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]string{"a/app.conf": file, "in": sub, "in/c": filepath.Join(sub, "c")} {
		if got, err := prepareSubPath(root, s); err != nil || got != want {
			t.Errorf("prepareSubPath(%q) = %q, %v; want %q", s, got, err, want)
		}
	}

	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../..", filepath.Join(root, "a", "up")); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"out/x", "out", "a/up", "a/up/x"} {
		if p, err := prepareSubPath(root, s); err == nil {
			t.Errorf("prepareSubPath(%q) = %q through a link out of the volume", s, p)
		} else if errors.Is(err, errSubPathDirs) {
			t.Errorf("prepareSubPath(%q): %v, a failure to make directories", s, err)
		}
	}
	if entries, err := os.ReadDir(outside); err != nil || len(entries) != 0 {
		t.Errorf("made outside the volume: %v %v", entries, err)
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(root), "x")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("made next to the volume: %v", err)
	}
	if p, err := prepareSubPath(filepath.Join(root, "missing"), "x"); !errors.Is(err, errSubPathDirs) {
		t.Errorf("prepareSubPath in a missing volume = %q, %v", p, err)
	}

	// A directory swapped for a link after it was made: its mode is set
	// through a descriptor opened without following the link, so the
	// file the link names keeps its own.
	r, err := os.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := os.Symlink("a/app.conf", filepath.Join(root, "swapped")); err != nil {
		t.Fatal(err)
	}
	if err := chmodDir(r, "swapped", 0o777|os.ModeSetgid); err == nil {
		t.Error("chmodDir followed a link")
	}
	checkMode(t, file, 0o644)
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s: mode %o, want %o", path, got, want)
	}
}

func TestMissingReferenceThenAppears(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.seed(newPod("waits", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref("cfg")}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}}
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "K", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref("cfg"), Key: "k"}}}}
	}))
	p, _ := e.sync("waits")
	if s := cstatus(t, p); waitingReason(s) != reasonCreateConfigError || s.State.Waiting.Message != `configmap "cfg" not found` {
		t.Fatalf("state %+v", s.State)
	}
	if err := e.api.Seed(testConfigMap(map[string]string{"other": "x"})); err != nil {
		t.Fatal(err)
	}
	// What the watch does when the ConfigMap appears.
	e.agent.objects.set(objectRef{resources.ConfigMaps, "default", "cfg"}, e.getConfigMap(), true)
	p, _ = e.sync("waits")
	if s := cstatus(t, p); waitingReason(s) != reasonCreateConfigError || s.State.Waiting.Message != `couldn't find key k in ConfigMap default/cfg` {
		t.Fatalf("state %+v", s.State)
	}
	if n := e.rt.CountCalls("CreateContainer"); n != 0 {
		t.Fatalf("%d creates", n)
	}
}

func (e *env) getConfigMap() *corev1.ConfigMap {
	e.t.Helper()
	o, err := e.api.Get(e.t.Context(), resources.ConfigMaps, "default", "cfg")
	if err != nil {
		e.t.Fatal(err)
	}
	return o.(*corev1.ConfigMap)
}

// TestRunConfigMapLifecycle: through the agent's watches, a pod waiting for
// its ConfigMap starts once it is created, an edit reaches the mounted
// volume, the Secret it uses is kept on disk with mode 0600, and the copies
// go when the pod does.
func TestRunConfigMapLifecycle(t *testing.T) {
	e := newEnv(t, rtfake.Config{IP: "10.88.0.9"}, testSecret())
	if err := e.api.Seed(newPod("cm", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{
			{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref("cfg")}}},
			{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "sec"}}},
		}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}, {Name: "sec", MountPath: "/sec"}}
	})); err != nil {
		t.Fatal(err)
	}
	e.run()
	eventually(t, "CreateContainerConfigError for the missing ConfigMap", func() bool {
		s := e.apiPod("cm").Status.ContainerStatuses
		return len(s) == 1 && waitingReason(s[0]) == reasonCreateConfigError &&
			s[0].State.Waiting.Message == `MountVolume.SetUp failed for volume "cfg" : configmap "cfg" not found`
	})
	if _, err := e.api.Create(t.Context(), testConfigMap(map[string]string{"k": "v1"}), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod running once the ConfigMap exists", func() bool {
		return e.apiPod("cm").Status.Phase == corev1.PodRunning
	})
	file := filepath.Join(e.agent.volumeDir(e.apiPod("cm"), "cfg"), "k")
	readFile := func() string { b, _ := os.ReadFile(file); return string(b) }
	if got := readFile(); got != "v1" {
		t.Fatalf("mounted k = %q", got)
	}
	secretCopy := filepath.Join(e.agent.cfg.DataDir, objectsDir, "secrets", "default", "sec.json")
	if fi, err := os.Stat(secretCopy); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret copy: %v %v", fi, err)
	}
	cm := e.getConfigMap()
	cm.Data["k"] = "v2"
	if _, err := e.api.Update(t.Context(), cm, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "edit reaches the volume", func() bool { return readFile() == "v2" })
	if n := e.rt.CountCalls("CreateContainer"); n != 1 {
		t.Errorf("%d creates: an edit restarted the container", n)
	}
	if _, err := e.api.Delete(t.Context(), resources.Pods, "default", "cm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "kept copies removed with the pod", func() bool {
		_, err := os.Stat(secretCopy)
		return os.IsNotExist(err)
	})
}
