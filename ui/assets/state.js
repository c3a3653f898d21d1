// Per-cell rollout state: the controller's rules (everynode's
// daemonset.Progress, shown by `everynode rollout status --nodes`) applied
// to one node and one DaemonSet from the watched objects.

export const STATES = {
  ready: { icon: '✔', text: 'current, ready' },
  old: { icon: '◷', text: 'old revision' },
  updating: { icon: '↻', text: 'updating' },
  pending: { icon: '…', text: 'pending' },
  failing: { icon: '✖', text: 'failing' },
  unreachable: { icon: '⚠', text: 'node unreachable' },
  removing: { icon: '⇣', text: 'removing' },
  ineligible: { icon: '–', text: 'not eligible' },
};

// Waiting reasons that mean the pod will not become ready by itself.
const FAILING = new Set(['CrashLoopBackOff', 'ImagePullBackOff', 'ErrImagePull', 'ErrImageNeverPull',
  'InvalidImageName', 'CreateContainerConfigError', 'CreateContainerError', 'RunContainerError']);

// The tolerations every DaemonSet pod gets (Kubernetes' AddOrUpdateDaemonPodTolerations).
const DAEMON_TOLERATED = new Set(['node.kubernetes.io/not-ready', 'node.kubernetes.io/unreachable',
  'node.kubernetes.io/disk-pressure', 'node.kubernetes.io/memory-pressure', 'node.kubernetes.io/pid-pressure',
  'node.kubernetes.io/unschedulable', 'node.kubernetes.io/network-unavailable']);

export function nodeReady(node) {
  return (node.status?.conditions || []).find((c) => c.type === 'Ready');
}

function tolerates(tols, taint) {
  if (DAEMON_TOLERATED.has(taint.key)) return true;
  return tols.some((t) => (!t.effect || t.effect === taint.effect) &&
    (t.operator === 'Exists' ? (!t.key || t.key === taint.key) : t.key === taint.key && (t.value || '') === (taint.value || '')));
}

function matchExpr(labels, e) {
  const has = Object.hasOwn(labels, e.key);
  switch (e.operator) {
    case 'In': return has && e.values.includes(labels[e.key]);
    case 'NotIn': return !has || !e.values.includes(labels[e.key]);
    case 'Exists': return has;
    case 'DoesNotExist': return !has;
    case 'Gt': return has && Number(labels[e.key]) > Number(e.values[0]);
    case 'Lt': return has && Number(labels[e.key]) < Number(e.values[0]);
  }
  return false;
}

// eligibility: why the DaemonSet's pod does not belong on node ('' it does).
export function ineligible(ds, node) {
  const spec = ds.spec.template.spec || {};
  const labels = node.metadata.labels || {};
  for (const [k, v] of Object.entries(spec.nodeSelector || {})) {
    if (labels[k] !== v) return `nodeSelector ${k}=${v} does not match`;
  }
  const terms = spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;
  if (terms?.length && !terms.some((t) => (t.matchExpressions || []).every((e) => matchExpr(labels, e)))) {
    return 'required node affinity does not match';
  }
  const fields = { 'metadata.name': node.metadata.name };
  if (terms?.length && terms.some((t) => t.matchFields) &&
      !terms.some((t) => (t.matchFields || []).every((e) => matchExpr(fields, e)))) {
    return 'required node affinity does not match';
  }
  for (const taint of node.spec?.taints || []) {
    if (taint.effect === 'PreferNoSchedule') continue;
    if (!tolerates(spec.tolerations || [], taint)) return `taint ${taint.key}${taint.value ? '=' + taint.value : ''}:${taint.effect} not tolerated`;
  }
  return '';
}

function podReady(p) {
  return (p.status?.conditions || []).find((c) => c.type === 'Ready');
}

function available(p, minReady, now) {
  const c = podReady(p);
  if (!c || c.status !== 'True') return false;
  return !minReady || (now - Date.parse(c.lastTransitionTime)) / 1000 >= minReady;
}

function failing(p) {
  if (p.status?.phase === 'Failed') return 'pod failed' + (p.status.reason ? ': ' + p.status.reason : '');
  const all = [...(p.status?.initContainerStatuses || []), ...(p.status?.containerStatuses || [])];
  for (const cs of all) {
    const w = cs.state?.waiting;
    if (w && FAILING.has(w.reason)) return `container ${cs.name}: ${w.reason}` + (cs.restartCount ? ` (${cs.restartCount} restarts)` : '');
  }
  return '';
}

export function paused(ds) {
  return ds.metadata.annotations?.['rollout.everynode.io/paused'] === 'true';
}

// cell returns {state, reason, pod} for ds on node; pods are ds's pods on node.
export function cell(ds, node, pods, now = Date.now()) {
  const why = ineligible(ds, node);
  const gen = ds.metadata.annotations?.['deprecated.daemonset.template.generation'] ?? String(ds.metadata.generation);
  const live = pods.filter((p) => !p.metadata.deletionTimestamp && p.status?.phase !== 'Succeeded');
  const terminating = pods.filter((p) => p.metadata.deletionTimestamp);
  const isNew = (p) => p.metadata.labels?.['pod-template-generation'] === gen;
  const newPod = live.find(isNew);
  const old = live.filter((p) => !isNew(p));
  const shown = newPod || old[0] || terminating[0];
  const out = (state, reason) => ({ state, reason, pod: shown?.metadata.name || '' });
  if (why && !live.length && !terminating.length) return out('ineligible', why);
  const ready = nodeReady(node);
  if (ready && ready.status !== 'True') return out('unreachable', ready.status === 'False' ? 'node not ready' : 'node unreachable');
  const decisive = newPod || old[0];
  const f = decisive && failing(decisive);
  if (f) return out('failing', f);
  if (why) return out('removing', why);
  const minReady = ds.spec.minReadySeconds || 0;
  if (newPod && available(newPod, minReady, now)) {
    return old.length ? out('updating', 'new pod available; the old one goes next') : out('ready', 'available');
  }
  if (newPod) return out('updating', podReady(newPod)?.status === 'True' ? `ready, available after minReadySeconds ${minReady}` : 'starting');
  if (!live.length && terminating.length) return out('updating', 'old pod terminating');
  if (!live.length) return out('pending', 'no pod yet');
  if (ds.spec.updateStrategy?.type === 'OnDelete') return out('old', 'OnDelete: delete the pod to update it');
  if (paused(ds)) return out('old', 'rollout paused');
  return out('old', 'waiting for the update budget');
}
