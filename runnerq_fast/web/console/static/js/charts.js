// Small inline SVG charts for the dashboard (no library): stacked bars and lines over time buckets.

const NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs ?? {})) el.setAttribute(k, String(v));
  for (const c of children) if (c) el.append(c);
  return el;
}

function frame(width, height, label) {
  return svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img", "aria-label": label,
    preserveAspectRatio: "none" });
}

function title(text) {
  const t = document.createElementNS(NS, "title");
  t.textContent = text;
  return t;
}

/**
 * Stacked bars: one per point; keys: [[field, cssClass, label], ...]. Returns an <svg>.
 */
export function stackedBars(points, keys, label, { width = 320, height = 80 } = {}) {
  const el = frame(width, height, label);
  const max = Math.max(1, ...points.map((p) => keys.reduce((s, [k]) => s + (p[k] || 0), 0)));
  const w = width / Math.max(points.length, 1);
  points.forEach((p, i) => {
    let y = height;
    const g = svg("g", null, title(`${p.at}: ${keys.map(([k, , l]) => `${l} ${p[k] || 0}`).join(", ")}`));
    for (const [k, cls] of keys) {
      const v = p[k] || 0;
      if (!v) continue;
      const bh = (v / max) * (height - 4);
      y -= bh;
      g.append(svg("rect", { x: i * w + 0.5, y, width: Math.max(w - 1, 0.5), height: bh, class: cls }));
    }
    el.append(g);
  });
  el.append(svg("line", { x1: 0, y1: height - 0.5, x2: width, y2: height - 0.5, class: "axis" }));
  return el;
}

/**
 * Lines: one per key, gaps where a value is null. Returns an <svg>.
 */
export function lines(points, keys, label, { width = 320, height = 80 } = {}) {
  const el = frame(width, height, label);
  const values = points.flatMap((p) => keys.map(([k]) => p[k]).filter((v) => v !== null && v !== undefined));
  const max = Math.max(1e-9, ...values);
  const step = width / Math.max(points.length - 1, 1);
  for (const [k, cls] of keys) {
    let d = "";
    let pen = false;
    points.forEach((p, i) => {
      const v = p[k];
      if (v === null || v === undefined) {
        pen = false;
        return;
      }
      const x = points.length === 1 ? width / 2 : i * step;
      const y = height - 2 - (v / max) * (height - 6);
      d += `${pen ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`;
      pen = true;
    });
    if (d) el.append(svg("path", { d, class: cls, fill: "none" }));
  }
  el.append(svg("line", { x1: 0, y1: height - 0.5, x2: width, y2: height - 0.5, class: "axis" }));
  return el;
}
