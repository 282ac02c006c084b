// The event stream, read off the page's main thread. This dedicated worker reads the SSE response with
// fetch() (the Last-Event-ID header resumes it after a reconnect or a server restart), scans each chunk
// as a whole -- counting events, keeping the last id, noticing a watched activity id or a resync -- and
// posts one summary at most every FLUSH_MS. Nothing is done per event but a substring search, so
// 10,000 events/s cost the browser next to nothing and the page nothing at all.

const FLUSH_MS = 250;
const BACKOFF_MS = [250, 500, 1000, 2000]; // between failed connection attempts

let url = null;
let generation = 0; // bumped by "open": an older loop stops
let controller = null;
let lastId = null;
let pending = 0;
let total = 0;
let watched = null;
let hit = false;
let resumed = false;
let resync = false;
let state = "connecting";
let dirty = false;

function setState(next) {
  if (next !== state) {
    state = next;
    dirty = true;
  }
}

/** Account for a run of whole SSE blocks ("...\n\n"). */
function scan(text) {
  let n = 0;
  const at = text.startsWith("data:") ? 1 : 0;
  for (let i = text.indexOf("\ndata:"); i !== -1; i = text.indexOf("\ndata:", i + 6)) n++;
  n += at;
  const resyncAt = text.indexOf("event: resync");
  if (resyncAt !== -1) {
    n--; // its data line is not an activity event
    resync = true;
    dirty = true;
  }
  const idAt = text.lastIndexOf("id: ");
  if (idAt !== -1 && (idAt === 0 || text[idAt - 1] === "\n")) {
    const end = text.indexOf("\n", idAt);
    lastId = text.slice(idAt + 4, end === -1 ? undefined : end).trim();
  }
  if (n > 0) {
    pending += n;
    total += n;
    if (watched !== null && !hit && text.indexOf(watched) !== -1) hit = true;
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function follow(gen) {
  let failures = 0;
  let connected = false;
  while (gen === generation) {
    controller = new AbortController();
    try {
      const headers = { Accept: "text/event-stream" };
      if (lastId !== null) headers["Last-Event-ID"] = lastId;
      const resp = await fetch(url, { headers, signal: controller.signal, cache: "no-store" });
      if (!resp.ok || !resp.body) throw new Error(`HTTP ${resp.status}`);
      if (connected || total > 0) resumed = true; // things may have moved while we were away
      connected = true;
      failures = 0;
      setState("live");
      dirty = true;
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done || gen !== generation) break;
        buf += value;
        const end = buf.lastIndexOf("\n\n");
        if (end === -1) continue;
        scan(buf.slice(0, end + 2));
        buf = buf.slice(end + 2);
      }
    } catch {
      failures++;
    }
    if (gen !== generation) return;
    setState("reconnecting"); // the stream ended (server restart, resync) or could not open
    await sleep(BACKOFF_MS[Math.min(failures, BACKOFF_MS.length - 1)]);
  }
}

self.onmessage = ({ data }) => {
  if (data.cmd === "open") {
    generation++;
    if (controller) controller.abort();
    url = data.url;
    lastId = null;
    state = "connecting";
    dirty = true;
    follow(generation);
  } else if (data.cmd === "watch") {
    watched = data.id;
    hit = false;
  }
};

setInterval(() => {
  if (!pending && !dirty) return;
  self.postMessage({ events: pending, total, lastId, watched: hit, resumed, resync, state });
  pending = 0;
  hit = false;
  resumed = false;
  resync = false;
  dirty = false;
}, FLUSH_MS);
