// The dashboard of one queue: counts by status, throughput and queue-wait charts, the oldest ready age,
// live workers and the activity types that have ready work but no live worker.

import { ApiError, getJSON, queuePath } from "./api.js";
import { lines, stackedBars } from "./charts.js";
import { fill, fmtAgo, fmtDuration, fmtNum, fmtTime, h } from "./dom.js";
import { Refresher } from "./live.js";

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

  let dashboardRoute = true;
  const refresher = new Refresher(async () => {
    try {
      const [dash, reg] = await Promise.all([loadDashboard(queue, dashboardRoute), loadWorkers(queue)]);
      dashboardRoute = dash.route;
      render(ctx, dash, reg, { counts, facts, flags, charts, workers });
      el.dataset.loaded = String(refresher.loads);
    } catch (err) {
      fill(facts, h("p.error", null, `Could not load the dashboard: ${err.message}`));
    }
  }, REFRESH_MS);
  refresher.poke();
  const unsubscribe = ctx.live.subscribe((batch) => {
    if (batch.events || batch.resumed || batch.resync) refresher.poke();
  });
  const tick = setInterval(() => refresher.poke(), TICK_MS);
  return {
    unmount() {
      unsubscribe();
      clearInterval(tick);
      refresher.stop();
    },
    refresher,
  };
}

async function loadDashboard(queue, useRoute) {
  if (useRoute) {
    try {
      return { route: true, ...(await getJSON(`${queuePath(queue)}/dashboard`)) };
    } catch (err) {
      if (!(err instanceof ApiError) || err.status !== 404) throw err; // an older server: no such route
    }
  }
  // a server without the dashboard route: counts only
  const q = await getJSON(queuePath(queue));
  const age = q.oldest_ready_at ? Math.max(0, (Date.now() - Date.parse(q.oldest_ready_at)) / 1000) : null;
  return { route: false, queue, counts: q.counts, total: q.total, oldest_ready_age: age, series: null,
    unhandled_types: null, workers: null, generated_at: new Date().toISOString() };
}

async function loadWorkers(queue) {
  try {
    return await getJSON("/api/v1/workers", { queue });
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return null;
    throw err;
  }
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

  const liveWorkers = reg ? reg.workers.length : dash.workers;
  fill(parts.facts,
    fact("oldest ready", dash.oldest_ready_age === null ? "none waiting" : fmtDuration(dash.oldest_ready_age),
      "oldest-ready"),
    fact("live workers", liveWorkers === null || liveWorkers === undefined ? "–" : fmtNum(liveWorkers), "workers"),
    fact("events", `${fmtNum(Math.round(ctx.live.rate))}/s`, "rate"),
    fact("updated", fmtTime(dash.generated_at), "updated"));

  const unhandled = dash.unhandled_types ?? [];
  parts.flags.className = unhandled.length ? "flags warn" : "flags";
  fill(parts.flags, unhandled.length
    ? [h("strong", null, "No live worker handles these types, which have ready work: "),
      h("ul", null, unhandled.map((u) => h("li.unhandled", { dataset: { type: u.type, ready: u.ready } },
        h("a", { href: `#/q/${encodeURIComponent(queue)}/activities?type=${encodeURIComponent(u.type)}` }, u.type),
        ` — ${fmtNum(u.ready)} ready`)))]
    : []);

  if (dash.series) {
    const b = dash.bucket_seconds;
    const done = dash.series.reduce((s, p) => s + p.completed, 0);
    const failed = dash.series.reduce((s, p) => s + p.failed, 0);
    fill(parts.charts,
      h("figure.chart-box", null,
        h("figcaption", null, `Throughput per ${b} s — ${fmtNum(done)} completed, ${fmtNum(failed)} failed`),
        stackedBars(dash.series, [["completed", "c-completed", "completed"], ["failed", "c-failed", "failed"]],
          "throughput")),
      h("figure.chart-box", null,
        h("figcaption", null, "Queue wait ", h("span.key.l-p50", null, "p50"), " / ", h("span.key.l-p95", null, "p95"),
          ` — peak p95 ${fmtDuration(peak(dash.series, "wait_p95"))}, last ${fmtDuration(b * dash.series.length)}`),
        lines(dash.series, [["wait_p50", "l-p50"], ["wait_p95", "l-p95"]], "queue wait")));
  } else {
    fill(parts.charts, h("p.muted", null, "This server has no dashboard route (charts need it)."));
  }

  if (reg) {
    fill(parts.workers, h("h2", null, `Workers (${reg.workers.length})`),
      reg.workers.length === 0
        ? h("p.muted", null, "No live worker.")
        : h("table.grid", null,
          h("thead", null, h("tr", null, ["id", "host", "pid", "types", "in flight", "started", "last seen"]
            .map((t) => h("th", null, t)))),
          h("tbody", null, reg.workers.map((w) => h("tr.worker", { dataset: { id: w.id } },
            h("td.mono", null, w.id), h("td", null, w.host), h("td", null, w.pid),
            h("td", null, w.types.join(", ") || "*"), h("td", null, `${w.in_flight} / ${w.concurrency}`),
            h("td", null, fmtTime(w.started_at)), h("td", null, fmtAgo(w.last_seen)))))));
  } else fill(parts.workers);
}

function peak(series, key) {
  const values = series.map((p) => p[key]).filter((v) => v !== null && v !== undefined);
  return values.length ? Math.max(...values) : null;
}

function fact(label, value, key) {
  return h("div.fact", { dataset: { fact: key } }, h("span.label", null, label), h("span.value", null, value));
}
