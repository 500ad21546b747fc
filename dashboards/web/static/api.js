// cartd's JSON API (docs/dashboard.md): reads, actions and live streams, each with the user's
// token as a bearer header (kept in localStorage, never sent as a cookie).
import {fail, show} from './notice.js';

const tokenKey = 'cart.token';

export function token() {
  return localStorage.getItem(tokenKey) || '';
}
export function saveToken(value) {
  localStorage.setItem(tokenKey, value);
}
export function forgetToken() {
  localStorage.removeItem(tokenKey);
}

function headers(extra) {
  const out = Object.assign({}, extra || {});
  if (token()) out['Authorization'] = 'Bearer ' + token();
  return out;
}

// GET (or `opts`) /api/v1/PATH; the parsed answer, or an Error with cartd's message and the
// HTTP status in `.status`.
export async function api(path, opts) {
  const res = await fetch('/api/v1/' + path, Object.assign({headers: headers()}, opts || {}));
  let body = null;
  try {
    body = await res.json();
  } catch (e) {
    body = null;
  }
  if (!res.ok) {
    const err = new Error((body && body.error) || ('HTTP ' + res.status));
    err.status = res.status;
    throw err;
  }
  return body;
}

export async function post(path, body) {
  return api(path, {
    method: 'POST',
    headers: headers({'Content-Type': 'application/json'}),
    body: JSON.stringify(body || {}),
  });
}

// An action (cancel, resume, extend, annotate): asks `confirmText` first if given, says in the
// notice line what cartd answered, and returns the answer, or null if refused or not confirmed.
export async function act(path, confirmText, body) {
  if (confirmText && !window.confirm(confirmText)) return null;
  try {
    const out = await post(path, body);
    show('Done: ' + JSON.stringify(out), true);
    return out;
  } catch (e) {
    if (e.status === 401) {
      show('Refused: ' + e.message + ' (enter a user token above)');
    } else {
      show('Refused: ' + e.message);
    }
    return null;
  }
}

// Server-sent events over fetch, so that the bearer header can go with them (EventSource
// cannot send headers). Calls onEvent(name, data) per event; returns a stop function.
export function follow(path, onEvent) {
  const ctrl = new AbortController();
  (async () => {
    try {
      const res = await fetch('/api/v1/' + path, {headers: headers(), signal: ctrl.signal});
      if (!res.ok) {
        fail(new Error('live updates: HTTP ' + res.status));
        return;
      }
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buf += dec.decode(value, {stream: true});
        let at;
        while ((at = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, at);
          buf = buf.slice(at + 2);
          let name = 'message', data = '';
          for (const line of block.split('\n')) {
            if (line.startsWith('event: ')) {
              name = line.slice(7);
            } else if (line.startsWith('data: ')) {
              data += line.slice(6);
            }
          }
          if (data) onEvent(name, JSON.parse(data));
        }
      }
    } catch (e) {
      if (e.name !== 'AbortError') fail(e);
    }
  })();
  return () => ctrl.abort();
}
