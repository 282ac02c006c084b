// Live updates: the queue's SSE stream (resumed by Last-Event-ID), read in a worker and handed to the
// pages as debounced summaries; Refresher re-queries a page at most once per interval.

import { apiUrl } from "./api.js";

/**
 * The queue's event stream, read by a dedicated worker (live-worker.js) that counts the events and posts
 * a summary at most every 250 ms, so 10,000 events/s cost the page's main thread next to nothing.
 * Listeners get {events, watched, resumed, resync} per summary.
 */
export class Live {
  constructor(onState) {
    this.queue = null;
    this.total = 0;
    this.lastId = null;
    this.state = "connecting";
    this.rate = 0;
    this.rateAt = performance.now();
    this.rateTotal = 0;
    this.listeners = new Set();
    this.onState = onState;
    this.worker = new Worker(new URL("./live-worker.js", import.meta.url), { type: "module", name: "runnerq-live" });
    this.worker.onmessage = ({ data }) => this.receive(data);
    setInterval(() => this.measure(), 1000);
  }

  /** Follow this queue's stream (a no-op when it already does). */
  open(queue) {
    if (queue === this.queue) return;
    this.queue = queue;
    this.worker.postMessage({ cmd: "open", url: String(apiUrl("/api/observability/stream", { queue })) });
  }

  /** Call fn(batch) with each summary; returns the function that stops it. */
  subscribe(fn) {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** Flag summaries in which an event names this activity id (null: none). */
  watch(id) {
    this.worker.postMessage({ cmd: "watch", id });
  }

  receive(data) {
    this.total += data.events;
    this.lastId = data.lastId;
    const batch = { events: data.events, watched: data.watched, resumed: data.resumed, resync: data.resync };
    for (const fn of this.listeners) fn(batch);
    this.setState(data.state);
  }

  /** Events per second since the last measurement (shown in the header). */
  measure() {
    const now = performance.now();
    this.rate = ((this.total - this.rateTotal) * 1000) / Math.max(now - this.rateAt, 1);
    this.rateAt = now;
    this.rateTotal = this.total;
    this.setState(this.state);
  }

  setState(state) {
    this.state = state;
    if (this.onState) this.onState(state, this);
  }
}

/**
 * Runs load() when poked, never two at a time and at most once per minMs: pokes that arrive while a load
 * runs, or within minMs of the last start, coalesce into one more load.
 */
export class Refresher {
  constructor(load, minMs) {
    this.load = load;
    this.minMs = minMs;
    this.running = false;
    this.again = false;
    this.lastStart = -Infinity;
    this.timer = null;
    this.stopped = false;
    this.loads = 0;
  }

  poke() {
    if (this.stopped) return;
    if (this.running || this.timer !== null) {
      this.again = true;
      return;
    }
    const wait = this.lastStart + this.minMs - performance.now();
    if (wait > 0) this.timer = setTimeout(() => this.start(), wait);
    else this.start();
  }

  /** Load as soon as the running load (if any) ends, whatever the interval: for the operator's own clicks. */
  now() {
    if (this.stopped) return;
    clearTimeout(this.timer);
    this.timer = null;
    if (this.running) {
      this.again = true;
      this.lastStart = -Infinity;
    } else this.start();
  }

  async start() {
    this.timer = null;
    if (this.stopped) return;
    this.running = true;
    this.again = false;
    this.lastStart = performance.now();
    this.loads++;
    try {
      await this.load();
    } finally {
      this.running = false;
      if (this.again) this.poke();
    }
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}

/**
 * Keep a page fresh: load now, then again (through the Refresher) on each summary that names new events
 * (or, with onlyWatched, the watched activity), a resumed stream or a resync, and every tickMs if given.
 * Returns the page's {unmount, refresher}; unmount stops all of it and calls cleanup.
 */
export function follow(live, refresher, { onlyWatched = false, tickMs = 0, cleanup } = {}) {
  refresher.poke();
  const unsubscribe = live.subscribe((batch) => {
    if ((onlyWatched ? batch.watched : batch.events) || batch.resumed || batch.resync) refresher.poke();
  });
  const tick = tickMs ? setInterval(() => refresher.poke(), tickMs) : null;
  return {
    unmount() {
      unsubscribe();
      if (tick !== null) clearInterval(tick);
      refresher.stop();
      if (cleanup) cleanup();
    },
    refresher,
  };
}
