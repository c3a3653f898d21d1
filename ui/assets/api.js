// The dashboard's only way to the cluster: same-origin requests to /ui/api/,
// where the server turns the session cookie into the API's bearer token.
// State-changing requests carry the session's CSRF token.

let csrf = '';

export class APIError extends Error {
  constructor(code, message) { super(message); this.code = code; }
}

async function failure(res) {
  let msg = res.statusText;
  try { const s = await res.json(); if (s.message) msg = s.message; } catch { /* not JSON */ }
  return new APIError(res.status, `${res.status}: ${msg}`);
}

export async function session() {
  const res = await fetch('/ui/session', { credentials: 'same-origin' });
  if (!res.ok) throw await failure(res);
  const s = await res.json();
  csrf = s.csrf;
  return s.user;
}

export async function login(token) {
  const res = await fetch('/ui/login', {
    method: 'POST', credentials: 'same-origin',
    headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ token }),
  });
  if (!res.ok) throw await failure(res);
  const s = await res.json();
  csrf = s.csrf;
  return s.user;
}

export async function logout() {
  await fetch('/ui/logout', { method: 'POST', credentials: 'same-origin', headers: { 'X-Everynode-CSRF': csrf } });
  csrf = '';
}

// request calls the API: path is the API's own ("/api/v1/nodes").
export async function request(method, path, body, contentType = 'application/merge-patch+json') {
  const headers = { Accept: 'application/json' };
  if (method !== 'GET') headers['X-Everynode-CSRF'] = csrf;
  if (body !== undefined) headers['Content-Type'] = contentType;
  const send = () => fetch('/ui/api' + path, {
    method, credentials: 'same-origin', headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  // No answer at all (a TypeError, "Failed to fetch"): the connection
  // went away under the request. Chromium closes every connection when the
  // machine's network interfaces change (a Docker network created counts);
  // the server closes an HTTP/2 connection whose ping is not answered
  // within a second, which a busy browser or server, or a slow link, can
  // miss; a restarting server closes its connections too. A request that
  // changes nothing, a read or a dry run, is sent again on a new connection
  // after a short wait, up to three more times; a change never is.
  const safe = method === 'GET' || /[?&]dryRun=All(&|$)/.test(path);
  let res;
  for (let wait = 250; ; wait *= 2) {
    try {
      res = await send();
      break;
    } catch (e) {
      if (!(e instanceof TypeError) || !safe || wait > 1000) throw e;
      await new Promise((r) => setTimeout(r, wait));
    }
  }
  if (!res.ok) throw await failure(res);
  const ct = res.headers.get('Content-Type') || '';
  return ct.includes('json') ? res.json() : res.text();
}

export const get = (path) => request('GET', path);

// yieldTask resolves in a new task, after the browser had a chance to draw.
function yieldTask() {
  if (globalThis.scheduler?.yield) return globalThis.scheduler.yield();
  return new Promise((r) => { const c = new MessageChannel(); c.port1.onmessage = () => r(); c.port2.postMessage(0); });
}

// lines streams a response's lines to onLine until it ends or signal aborts.
export async function lines(path, signal, onLine) {
  const res = await fetch('/ui/api' + path, { credentials: 'same-origin', signal });
  if (!res.ok) throw await failure(res);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let slice = performance.now();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let i, from = 0;
    while ((i = buf.indexOf('\n', from)) >= 0) {
      const line = buf.slice(from, i);
      from = i + 1;
      if (line.trim()) onLine(line);
      // A burst of lines (hundreds of watch events in one read on a busy
      // machine) is handled in slices of a few milliseconds, letting the
      // page draw in between instead of stalling in one long task.
      if (performance.now() - slice > 8) {
        await yieldTask();
        slice = performance.now();
      }
    }
    buf = buf.slice(from);
  }
  if (buf.trim()) onLine(buf);
}

// Mirror keeps every object of one kind: a list, then one watch stream
// from its resourceVersion, listed again when the watch ends or expires.
// onChange(null) follows a list; onChange(prev, next) an event (prev
// undefined for a new object, next undefined for a deleted one).
export class Mirror {
  constructor(path, onChange, onError) {
    this.path = path; this.onChange = onChange; this.onError = onError;
    this.items = new Map(); this.ctl = new AbortController(); this.synced = false;
  }
  key(o) { return (o.metadata.namespace || '') + '/' + o.metadata.name; }
  async run() {
    const signal = this.ctl.signal;
    while (!signal.aborted) {
      try {
        const list = await get(this.path);
        this.items = new Map(list.items.map((o) => [this.key(o), o]));
        this.synced = true;
        this.onChange(null);
        const sep = this.path.includes('?') ? '&' : '?';
        let rv = list.metadata.resourceVersion;
        let expired = false;
        await lines(`${this.path}${sep}watch=1&allowWatchBookmarks=true&resourceVersion=${rv}`, signal, (line) => {
          const ev = JSON.parse(line);
          if (ev.type === 'ERROR') { expired = true; return; }
          if (ev.type === 'BOOKMARK') return;
          const k = this.key(ev.object);
          const prev = this.items.get(k);
          if (ev.type === 'DELETED') this.items.delete(k);
          else this.items.set(k, ev.object);
          this.onChange(prev, ev.type === 'DELETED' ? undefined : ev.object);
        });
        if (expired) continue;
      } catch (e) {
        if (signal.aborted) return;
        this.onError(e);
        if (e.code === 401) return;
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  stop() { this.ctl.abort(); }
}
