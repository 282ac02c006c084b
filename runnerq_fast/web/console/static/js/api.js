// The HTTP API the console runs on: the app's own routes under its mount prefix, and the bearer token.

const ROOT = document.querySelector('meta[name="rq-root"]')?.content ?? "";
const TOKEN_KEY = "runnerq-fast.token";

/**
 * An absolute URL for an API path ("/api/v1/...") under the mount prefix. params: an object (arrays joined
 * by ",") or URLSearchParams (for repeated keys such as metadata).
 */
export function apiUrl(path, params) {
  const u = new URL(ROOT + path, location.origin);
  if (params instanceof URLSearchParams) {
    for (const [k, v] of params) u.searchParams.append(k, v);
    return u;
  }
  for (const [k, v] of Object.entries(params ?? {})) {
    if (v === undefined || v === null || v === "") continue;
    if (Array.isArray(v)) {
      if (v.length) u.searchParams.set(k, v.join(","));
    } else u.searchParams.append(k, String(v));
  }
  return u;
}

/** An HTTP error with the problem's detail (RFC 9457). */
export class ApiError extends Error {
  constructor(status, detail) {
    super(detail || `HTTP ${status}`);
    this.status = status;
  }
}

async function failure(resp) {
  let detail = `${resp.status} ${resp.statusText}`;
  try {
    const body = await resp.json();
    if (body && body.detail) detail = body.detail;
  } catch {
    /* not a problem body */
  }
  return new ApiError(resp.status, detail);
}

/** The token field's value, kept in sessionStorage (this tab only). */
export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY) ?? "",
  set: (v) => (v ? sessionStorage.setItem(TOKEN_KEY, v) : sessionStorage.removeItem(TOKEN_KEY)),
};

/** GET a JSON route. Throws ApiError on a non-2xx answer. */
export async function getJSON(path, params, signal) {
  const resp = await fetch(apiUrl(path, params), { headers: { Accept: "application/json" }, signal });
  if (!resp.ok) throw await failure(resp);
  return resp.json();
}

/**
 * A write (POST/DELETE) with the bearer token when one is set; resolves to the JSON answer.
 * Always "Content-Type: application/json", with a body or without: the server refuses any other type on a write
 * (a page of another site could send those without a CORS preflight).
 */
export async function send(method, path, body) {
  const headers = { Accept: "application/json", "Content-Type": "application/json" };
  const t = token.get();
  if (t) headers.Authorization = `Bearer ${t}`;
  const resp = await fetch(apiUrl(path), {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!resp.ok) throw await failure(resp);
  return resp.json();
}

/** Path of a queue's routes. */
export const queuePath = (queue) => `/api/v1/queues/${encodeURIComponent(queue)}`;
