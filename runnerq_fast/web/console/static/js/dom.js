// Small DOM and formatting helpers shared by every page of the console.

/** h("tag.class#id", {attr: v, onclick: fn}, ...children): an element. Strings become text nodes. */
export function h(spec, attrs, ...children) {
  const m = /^([a-z0-9]+)?((?:[.#][\w-]+)*)$/i.exec(spec);
  const el = document.createElement((m && m[1]) || "div");
  if (m && m[2]) {
    for (const part of m[2].match(/[.#][\w-]+/g)) {
      if (part[0] === ".") el.classList.add(part.slice(1));
      else el.id = part.slice(1);
    }
  }
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
      else if (k === "dataset") Object.assign(el.dataset, v);
      else if (k === "value") el.value = v;
      else if (k === "checked") el.checked = !!v;
      else el.setAttribute(k, v === true ? "" : String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Replace everything inside el. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

const numberFormat = new Intl.NumberFormat("en");
/** 12345 -> "12,345". */
export const fmtNum = (n) => (n === null || n === undefined ? "–" : numberFormat.format(n));

/** Seconds as "850 ms", "12.3 s", "4 min 10 s", "3 h 5 min", "2 d 4 h". */
export function fmtDuration(s) {
  if (s === null || s === undefined || Number.isNaN(s)) return "–";
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.floor(s % 60)} s`;
  const hr = Math.floor(m / 60);
  if (hr < 48) return `${hr} h ${m % 60} min`;
  return `${Math.floor(hr / 24)} d ${hr % 24} h`;
}

/** An RFC 3339 time as local "YYYY-MM-DD HH:MM:SS.mmm" (a <time> element with the exact value). */
export function fmtTime(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  const text = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
  return h("time", { datetime: iso, title: iso }, text);
}

/** "3 s ago" for an RFC 3339 time. */
export function fmtAgo(iso) {
  if (!iso) return "–";
  return `${fmtDuration(Math.max(0, (Date.now() - Date.parse(iso)) / 1000))} ago`;
}

export const PRIORITIES = { 1: "low", 2: "normal", 3: "high", 4: "critical" };

/** A status as a coloured badge. */
export const badge = (status) => h(`span.badge.s-${status}`, { dataset: { status } }, status.replace("_", " "));

/** JSON text, indented, for <pre>. */
export const pretty = (value) => JSON.stringify(value, null, 2);

/** An activity id shortened for tables: its last 10 hex digits (ids are time-ordered, so their heads repeat). */
export const shortId = (id) => `…${id.slice(-10)}`;

/** An activity's attempt as "3 of 6": its current, next or last attempt (retry_count + 1) out of the most it may
 * make (max_retries + 1), so a dead-lettered one reads "6 of 6" after its 6 attempts. */
export const fmtAttempt = (a) => h("span.attempt", {
  title: `attempt ${a.retry_count + 1} of at most ${a.max_retries + 1} (retries taken: ${a.retry_count} of ` +
    `${a.max_retries})`,
}, `${a.retry_count + 1} of ${a.max_retries + 1}`);
