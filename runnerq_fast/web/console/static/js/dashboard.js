// The dashboard of one queue: counts by status, throughput and queue-wait charts, the oldest ready age,
// live workers and the activity types that have ready work but no live worker.

import { getJSON, queuePath } from "./api.js";
import { fmtSpan, timeChart } from "./charts.js";
import { fill, fmtAgo, fmtDuration, fmtNum, fmtTime, h } from "./dom.js";
import { Refresher, follow } from "./live.js";

const REFRESH_MS = 1000; // at most one dashboard query a second, however many events arrive
const TICK_MS = 5000; // and one every 5 s without events (the series move, heartbeats age)
const HELD = "held: activities claimed and not yet acknowledged at the last heartbeat (running, or finished with " +
  "the ack not yet written), so it may exceed slots (the worker's concurrency) for a moment.";

export function mount(el, ctx) {
  const { queue } = ctx;
  const counts = h("section.cards#counts", { "aria-label": "Counts by status" });
  const facts = h("section.facts#facts");
  const flags = h("section#unhandled");
  const charts = h("section.charts#charts");
  const workers = h("section#workers");
  fill(el, h("h1", null, `Queue ${queue}`), flags, counts, facts, charts, workers);

  const refresher = new Refresher(async () => {
    try {
      const [dash, reg] = await Promise.all([
        getJSON(`${queuePath(queue)}/dashboard`), getJSON("/api/v1/workers", { queue }),
      ]);
      render(ctx, dash, reg, { counts, facts, flags, charts, workers });
      el.dataset.loaded = String(refresher.loads);
    } catch (err) {
      fill(facts, h("p.error", null, `Could not load the dashboard: ${err.message}`));
    }
  }, REFRESH_MS);
  return follow(ctx.live, refresher, { tickMs: TICK_MS });
}

function render(ctx, dash, reg, parts) {
  const { queue } = ctx;
  const statuses = ctx.info.statuses;
  fill(parts.counts, statuses.map((s) => {
    const n = dash.counts[s] ?? 0;
    return h(`a.card.s-${s}`, { href: `#/q/${encodeURIComponent(queue)}/activities?status=${s}`,
      dataset: { status: s, count: n } },
    h("span.label", null, s.replace("_", " ")), h("span.value", null, fmtNum(n)));
  }), h("div.card.total", { dataset: { status: "total", count: dash.total } },
    h("span.label", null, "total"), h("span.value", null, fmtNum(dash.total))));

  fill(parts.facts,
    fact("oldest ready", dash.oldest_ready_age === null ? "none waiting" : fmtDuration(dash.oldest_ready_age),
      "oldest-ready"),
    fact("live workers", fmtNum(reg.workers.length), "workers"),
    fact("events", `${fmtNum(Math.round(ctx.live.rate))}/s`, "rate"),
    fact("updated", fmtTime(dash.generated_at), "updated"));

  const unhandled = dash.unhandled_types;
  parts.flags.className = unhandled.length ? "flags warn" : "flags";
  fill(parts.flags, unhandled.length
    ? [h("strong", null, "No live worker handles these types, which have ready work: "),
      h("ul", null, unhandled.map((u) => h("li.unhandled", { dataset: { type: u.type, ready: u.ready } },
        h("a", { href: `#/q/${encodeURIComponent(queue)}/activities?type=${encodeURIComponent(u.type)}` }, u.type),
        ` — ${fmtNum(u.ready)} ready`)))]
    : []);
  renderCharts(dash, parts.charts);
  renderWorkers(reg, parts.workers);
}

function renderCharts(dash, box) {
  const b = dash.bucket_seconds;
  const endMs = Date.parse(dash.generated_at);
  const span = fmtSpan(dash.window_seconds);
  const done = dash.series.reduce((s, p) => s + p.completed, 0);
  const failed = dash.series.reduce((s, p) => s + p.failed, 0);
  // a bucket's count as a rate; the current bucket has only run since its start
  const rate = (n) => (p) => n(p) / Math.max(1, Math.min(b, (endMs - Date.parse(p.at)) / 1000));
  const frame = { endMs, windowSeconds: dash.window_seconds, bucketSeconds: b };
  fill(box,
    h("figure.chart-box#throughput-chart", null,
      h("figcaption", null, h("strong", null, "Throughput"), ` (activities/s, last ${span}) `,
        h("span.key.l-completed", null, "completed"), " / ", h("span.key.l-failed", null, "failed"),
        ` — ${fmtNum(done)} completed, ${fmtNum(failed)} failed`),
      timeChart(dash.series, [
        { key: "completed", cls: "l-completed", label: "completed per second", value: rate((p) => p.completed) },
        { key: "failed", cls: "l-failed", label: "failed or dead-lettered per second", value: rate((p) => p.failed) },
      ], { ...frame, name: "throughput", label: `throughput, activities per second, last ${span}`,
        yTitle: "activities/s", fmt: fmtRate })),
    h("figure.chart-box#wait-chart", null,
      h("figcaption", null, h("strong", null, "Queue wait"), ` (ready to claimed, last ${span}) `,
        h("span.key.l-p50", null, "p50"), " / ", h("span.key.l-p95", null, "p95"),
        ` — peak p95 ${fmtDuration(peak(dash.series, "wait_p95"))}`),
      timeChart(dash.series, [
        { key: "wait_p50", cls: "l-p50", label: "median wait", value: (p) => p.wait_p50 },
        { key: "wait_p95", cls: "l-p95", label: "95th percentile wait", value: (p) => p.wait_p95 },
      ], { ...frame, name: "wait", label: `queue wait p50 and p95, seconds, last ${span}`, yTitle: "wait (s)",
        fmt: fmtSeconds })));
}

/** A y tick of a rate: "0", "0.25", "12", "1.5k". */
function fmtRate(v) {
  if (v >= 1000) return `${+(v / 1000).toFixed(1)}k`;
  return String(+v.toFixed(v < 1 ? 2 : 1));
}

/** A y tick of a wait: "0", "250 ms", "1.5 s", "2 min". */
function fmtSeconds(v) {
  if (v === 0) return "0";
  if (v < 1) return `${+(v * 1000).toFixed(0)} ms`;
  if (v < 120) return `${+v.toFixed(1)} s`;
  return `${+(v / 60).toFixed(1)} min`;
}

function renderWorkers(reg, box) {
    fill(box, h("h2", null, `Workers (${reg.workers.length})`),
      reg.workers.length === 0
        ? h("p.muted", null, "No live worker.")
        : h("table.grid", null,
          h("thead", null, h("tr", null, ["id", "host", "pid", "types", "held", "slots", "started", "last seen"]
            .map((t) => h("th", t === "held" ? { title: HELD } : null, t)))),
          h("tbody", null, reg.workers.map((w) => h("tr.worker", { dataset: { id: w.id } },
            h("td.mono", null, w.id), h("td", null, w.host), h("td", null, w.pid),
            h("td", null, w.types.join(", ") || "*"), h("td.held", null, fmtNum(w.in_flight)),
            h("td.slots", null, fmtNum(w.concurrency)),
            h("td", null, fmtTime(w.started_at)), h("td", null, fmtAgo(w.last_seen)))))),
      reg.workers.length === 0 ? null : h("p.muted.note#held-note", null, HELD));
}

function peak(series, key) {
  const values = series.map((p) => p[key]).filter((v) => v !== null && v !== undefined);
  return values.length ? Math.max(...values) : null;
}

function fact(label, value, key) {
  return h("div.fact", { dataset: { fact: key } }, h("span.label", null, label), h("span.value", null, value));
}
