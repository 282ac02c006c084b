// Live updates: one EventSource per queue (SSE, resumed by Last-Event-ID), counted cheaply per event and
// handed to the pages in debounced batches; Refresher re-queries a page at most once per interval.

import { apiUrl } from "./api.js";

const FLUSH_MS = 250; // events are handed to the pages at most 4 times a second
const RECONNECT_MS = [500, 1000, 2000, 5000]; // when the browser gave up reconnecting by itself

/**
 * The queue's event stream. Per event it only counts, remembers the event id and checks whether a watched
 * activity id occurs in the text (no JSON parsing), so 10,000 events/s cost the page next to nothing.
 * Listeners get {events, watched, resumed, resync} at most every FLUSH_MS.
 */
export class Live {
  constructor(onState) {
    this.queue = null;
    this.es = null;
    this.lastId = null;
    this.total = 0;
    this.pending = 0;
    this.watched = null;
    this.watchHit = false;
    this.resumed = false;
    this.resync = false;
    this.listeners = new Set();
    this.timer = null;
    this.retry = 0;
    this.retryTimer = null;
    this.onState = onState;
    this.state = "connecting";
    this.rateAt = performance.now();
    this.rateTotal = 0;
    this.rate = 0;
    setInterval(() => this.measure(), 1000);
  }

  /** Events per second since the last measurement (shown in the header). */
  measure() {
    const now = performance.now();
    this.rate = ((this.total - this.rateTotal) * 1000) / Math.max(now - this.rateAt, 1);
    this.rateAt = now;
    this.rateTotal = this.total;
    this.setState(this.state);
  }

  /** Follow this queue's stream (a no-op when it already does). */
  open(queue) {
    if (queue === this.queue && this.es) return;
    this.close();
    this.queue = queue;
    this.lastId = null;
    this.connect();
  }

  close() {
    if (this.es) this.es.close();
    this.es = null;
    clearTimeout(this.retryTimer);
  }

  /** Call fn(batch) with each debounced batch; returns the function that stops it. */
  subscribe(fn) {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** Flag batches in which an event names this activity id (null: none). */
  watch(id) {
    this.watched = id;
    this.watchHit = false;
  }

  connect() {
    const params = { queue: this.queue };
    if (this.lastId !== null) params.after = this.lastId; // the browser sends Last-Event-ID itself on its own retries
    const es = new EventSource(apiUrl("/api/observability/stream", params));
    this.es = es;
    let opened = false;
    es.onopen = () => {
      this.retry = 0;
      if (opened || this.total > 0 || this.lastId !== null) this.resumed = true; // re-fetch what may have moved
      opened = true;
      this.setState("live");
      this.schedule();
    };
    es.onmessage = (m) => {
      this.pending++;
      this.total++;
      if (m.lastEventId) this.lastId = m.lastEventId;
      if (this.watched !== null && !this.watchHit && m.data.indexOf(this.watched) !== -1) this.watchHit = true;
      if (this.timer === null) this.timer = setTimeout(() => this.flush(), FLUSH_MS);
    };
    es.addEventListener("resync", (m) => {
      // the server dropped our buffer: re-fetch the page; the browser reconnects from m.lastEventId
      if (m.lastEventId) this.lastId = m.lastEventId;
      this.resync = true;
      this.schedule();
    });
    es.onerror = () => {
      if (this.es !== es) return;
      this.setState("reconnecting");
      if (es.readyState === EventSource.CLOSED) {
        es.close();
        const wait = RECONNECT_MS[Math.min(this.retry++, RECONNECT_MS.length - 1)];
        this.retryTimer = setTimeout(() => {
          if (this.es === es) this.connect();
        }, wait);
      }
    };
  }

  schedule() {
    if (this.timer === null) this.timer = setTimeout(() => this.flush(), FLUSH_MS);
  }

  flush() {
    this.timer = null;
    const batch = { events: this.pending, watched: this.watchHit, resumed: this.resumed, resync: this.resync };
    this.pending = 0;
    this.watchHit = false;
    this.resumed = false;
    this.resync = false;
    for (const fn of this.listeners) fn(batch);
    this.setState(this.es && this.es.readyState === EventSource.OPEN ? "live" : this.state);
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
