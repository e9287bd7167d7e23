// viiwork dashboards: GET a JSON document from this node (same origin),
// with a deadline, asking the operator once for an API key when the node
// answers 401.

const TIMEOUT_MS = 2500;

// A node with client keys (api.keys_env / api.keys_file) answers 401: ask once, keep the key for this browser session.
const KEY_STORE = 'viiwork.apiKey';
let keyAsked = false;

function authHeaders() {
  const key = sessionStorage.getItem(KEY_STORE);
  return key ? { accept: 'application/json', authorization: `Bearer ${key}` } : { accept: 'application/json' };
}

/**
 * After a 401 for a request sent with `usedKey`: true when there is now a key worth retrying with. A key
 * another request already stored is used without asking; a refused key is dropped; the operator is asked
 * at most once per page load.
 */
function askForKey(usedKey) {
  const stored = sessionStorage.getItem(KEY_STORE);
  if (stored && stored !== usedKey) return true;
  if (stored) sessionStorage.removeItem(KEY_STORE);
  if (keyAsked) return false;
  keyAsked = true;
  const key = (window.prompt('This viiwork node needs an API key (ask its operator):') || '').trim();
  if (!key) return false;
  sessionStorage.setItem(KEY_STORE, key);
  return true;
}

export async function getJson(path, { accept503 = false } = {}) {
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), TIMEOUT_MS);
  try {
    const usedKey = sessionStorage.getItem(KEY_STORE);
    let res = await fetch(path, { signal: ctrl.signal, cache: 'no-store', headers: authHeaders() });
    if (res.status === 401 && askForKey(usedKey)) res = await fetch(path, { signal: ctrl.signal, cache: 'no-store', headers: authHeaders() });
    let body = null;
    try {
      body = await res.json();
    } catch {
      body = null;
    }
    if (!res.ok && !(accept503 && res.status === 503 && body)) {
      const why = body && body.error && typeof body.error.message === 'string' ? `: ${body.error.message}` : '';
      throw new Error(`${path} answered ${res.status}${why}`);
    }
    if (body === null) throw new Error(`${path} answered no JSON`);
    return body;
  } catch (err) {
    if (err && err.name === 'AbortError') throw new Error(`${path} gave no answer within ${TIMEOUT_MS / 1000} s`);
    if (err instanceof TypeError) throw new Error(`${path}: ${err.message || 'network error'}`);
    throw err;
  } finally {
    clearTimeout(timer);
  }
}
