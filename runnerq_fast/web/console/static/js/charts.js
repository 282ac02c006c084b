// Small inline SVG charts for the dashboard (no library): lines over a fixed time window, with a labelled
// y axis (a scale from 0 and its unit), a time axis (clock times) and the part of the window without data shaded.

const NS = "http://www.w3.org/2000/svg";
const W = 560; // viewBox units; the SVG scales to its box's width and keeps its proportions (text stays legible)
const H = 210;
const M = { left: 70, right: 14, top: 12, bottom: 40 }; // room for the tick labels and the axis titles

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs ?? {})) el.setAttribute(k, String(v));
  for (const c of children) {
    if (c === null || c === undefined) continue;
    el.append(typeof c === "string" ? document.createTextNode(c) : c);
  }
  return el;
}

/** The top of the y scale and its tick step: 1, 2, 2.5 or 5 times a power of ten, 4 steps or fewer. */
export function niceScale(max) {
  if (!(max > 0)) return { top: 1, step: 0.25 };
  const raw = max / 4;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((f) => f * mag).find((s) => s >= raw);
  return { top: step * Math.ceil(max / step - 1e-9), step };
}

const pad2 = (n) => String(n).padStart(2, "0");
const clock = (ms) => {
  const d = new Date(ms);
  return `${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
};

/** The span of the window as words: "15 min", "1 h", "90 s". */
export function fmtSpan(seconds) {
  if (seconds % 3600 === 0) return `${seconds / 3600} h`;
  if (seconds % 60 === 0) return `${seconds / 60} min`;
  return `${seconds} s`;
}

/**
 * A line chart over time.
 *
 * points: [{at: RFC 3339 bucket start, ...values}], oldest first; series: [{key, cls, label, value(p)}] where
 * value(p) gives the y value of a point (null: none, the line breaks); endMs / windowSeconds / bucketSeconds: the
 * window shown (it ends at endMs whatever the points cover); yTitle: the y axis title with its unit; fmt: a tick
 * label of a y value. Returns an <svg> with data-chart=name.
 */
export function timeChart(points, series, { name, label, endMs, windowSeconds, bucketSeconds, yTitle, fmt }) {
  const el = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": label,
    "data-chart": name });
  const startMs = endMs - windowSeconds * 1000;
  const pw = W - M.left - M.right;
  const ph = H - M.top - M.bottom;
  const x = (ms) => M.left + ((ms - startMs) / (endMs - startMs)) * pw;
  const mid = (p) => Math.min(Date.parse(p.at) + (bucketSeconds * 1000) / 2, endMs); // the last bucket runs to now
  const shown = points.filter((p) => Date.parse(p.at) + bucketSeconds * 1000 > startMs);
  const values = shown.flatMap((p) => series.map((s) => s.value(p))).filter((v) => v !== null && v !== undefined);
  const { top, step } = niceScale(values.length ? Math.max(...values) : 0);
  const y = (v) => M.top + ph - (v / top) * ph;

  // the part of the window before the first point: no data (the app was not watching the queue yet)
  const firstMs = shown.length ? Date.parse(shown[0].at) : endMs;
  if (firstMs > startMs) {
    const x1 = Math.min(x(firstMs), M.left + pw);
    el.append(svg("rect", { class: "nodata", x: M.left, y: M.top, width: Math.max(0, x1 - M.left), height: ph },
      svg("title", null, `no data before ${clock(firstMs)}: the console began watching this queue then`)));
    if (x1 - M.left > 70) {
      el.append(svg("text", { class: "nodata-label", x: (M.left + x1) / 2, y: M.top + ph / 2, "text-anchor": "middle" },
        "no data yet"));
    }
  }

  // y axis: grid lines and labelled ticks from 0 to the top of the scale, then its title
  const yAxis = svg("g", { class: "y-axis" });
  for (let v = 0; v <= top + step / 2; v += step) {
    yAxis.append(svg("line", { class: "grid", x1: M.left, x2: M.left + pw, y1: y(v), y2: y(v) }),
      svg("text", { class: "tick", x: M.left - 6, y: y(v) + 4, "text-anchor": "end", "data-value": v }, fmt(v)));
  }
  yAxis.append(svg("text", { class: "axis-title", transform: `translate(14 ${M.top + ph / 2}) rotate(-90)`,
    "text-anchor": "middle" }, yTitle));
  el.append(yAxis);

  // x axis: clock times at round minutes (a tick every fifth of the window, rounded), then its title
  const xAxis = svg("g", { class: "x-axis" },
    svg("line", { class: "axis", x1: M.left, x2: M.left + pw, y1: M.top + ph, y2: M.top + ph }));
  const tickMs = Math.max(60_000, Math.round(windowSeconds / 5 / 60) * 60_000);
  for (let t = Math.ceil(startMs / tickMs) * tickMs; t <= endMs; t += tickMs) {
    xAxis.append(svg("line", { class: "axis", x1: x(t), x2: x(t), y1: M.top + ph, y2: M.top + ph + 4 }),
      svg("text", { class: "tick", x: x(t), y: M.top + ph + 16, "text-anchor": "middle", "data-ms": t }, clock(t)));
  }
  xAxis.append(svg("text", { class: "axis-title", x: M.left + pw / 2, y: H - 4, "text-anchor": "middle" },
    `time (last ${fmtSpan(windowSeconds)}, ${bucketSeconds} s buckets)`));
  el.append(xAxis);

  // one line per series, broken where a value is missing; a lone point is drawn as a dot
  for (const s of series) {
    let d = "";
    let pen = false;
    const dots = [];
    shown.forEach((p, i) => {
      const v = s.value(p);
      if (v === null || v === undefined) {
        pen = false;
        return;
      }
      const px = x(mid(p)).toFixed(1);
      const py = y(v).toFixed(1);
      d += `${pen ? "L" : "M"}${px},${py}`;
      const next = shown[i + 1];
      if (!pen && (next === undefined || s.value(next) === null || s.value(next) === undefined)) dots.push([px, py]);
      pen = true;
    });
    const g = svg("g", { class: `series ${s.cls}`, "data-series": s.key }, svg("title", null, s.label));
    if (d) g.append(svg("path", { d, class: "line", fill: "none" }));
    for (const [cx, cy] of dots) g.append(svg("circle", { cx, cy, r: 2.5, class: "dot" }));
    el.append(g);
  }
  return el;
}
