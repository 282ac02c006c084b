// The dashboard of one queue: counts by status, throughput and queue-wait charts, the oldest ready age,
// live workers and the activity types that have ready work but no live worker.

import { getJSON, queuePath } from "./api.js";
import { lines, stackedBars } from "./charts.js";
import { fill, fmtAgo, fmtDuration, fmtNum, fmtTime, h } from "./dom.js";
import { Refresher, follow } from "./live.js";

const REFRESH_MS = 1000; // at most one dashboard query a second, however many events arrive
const TICK_MS = 5000; // and one every 5 s without events (the series move, heartbeats age)

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
  const done = dash.series.reduce((s, p) => s + p.completed, 0);
  const failed = dash.series.reduce((s, p) => s + p.failed, 0);
  fill(box,
      h("figure.chart-box", null,
        h("figcaption", null, `Throughput per ${b} s — ${fmtNum(done)} completed, ${fmtNum(failed)} failed`),
        stackedBars(dash.series, [["completed", "c-completed", "completed"], ["failed", "c-failed", "failed"]],
          "throughput")),
      h("figure.chart-box", null,
        h("figcaption", null, "Queue wait ", h("span.key.l-p50", null, "p50"), " / ", h("span.key.l-p95", null, "p95"),
          ` — peak p95 ${fmtDuration(peak(dash.series, "wait_p95"))}, last ${fmtDuration(b * dash.series.length)}`),
        lines(dash.series, [["wait_p50", "l-p50"], ["wait_p95", "l-p95"]], "queue wait")));
}

function renderWorkers(reg, box) {
    fill(box, h("h2", null, `Workers (${reg.workers.length})`),
      reg.workers.length === 0
        ? h("p.muted", null, "No live worker.")
        : h("table.grid", null,
          h("thead", null, h("tr", null, ["id", "host", "pid", "types", "in flight", "started", "last seen"]
            .map((t) => h("th", null, t)))),
          h("tbody", null, reg.workers.map((w) => h("tr.worker", { dataset: { id: w.id } },
            h("td.mono", null, w.id), h("td", null, w.host), h("td", null, w.pid),
            h("td", null, w.types.join(", ") || "*"), h("td", null, `${w.in_flight} / ${w.concurrency}`),
            h("td", null, fmtTime(w.started_at)), h("td", null, fmtAgo(w.last_seen)))))));
}

function peak(series, key) {
  const values = series.map((p) => p[key]).filter((v) => v !== null && v !== undefined);
  return values.length ? Math.max(...values) : null;
}

function fact(label, value, key) {
  return h("div.fact", { dataset: { fact: key } }, h("span.label", null, label), h("span.value", null, value));
}
