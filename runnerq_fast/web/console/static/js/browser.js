// The activity browser (filters, keyset pages with a total, selection and bulk actions) and, with the
// status fixed to dead_letter, the dead-letter page.

import { actOnMany, actOnOne, ACTION_LABELS } from "./actions.js";
import { getJSON, queuePath } from "./api.js";
import { PRIORITIES, badge, fill, fmtAttempt, fmtNum, fmtTime, h, shortId } from "./dom.js";
import { Refresher, follow } from "./live.js";

const PAGE = 50;
const REFRESH_MS = 2000; // a live listing re-queries at most every 2 s

/** The filter in the URL's hash query -> {status: [...], type: [...], priority: [...], ...}. */
export function filterFromParams(params) {
  const list = (k) => (params.get(k) ? params.get(k).split(",").map((s) => s.trim()).filter(Boolean) : []);
  return {
    status: list("status"),
    type: list("type"),
    priority: list("priority"),
    created_after: params.get("created_after") || "",
    created_before: params.get("created_before") || "",
    metadata: params.getAll("metadata").filter((m) => m.includes("=")),
    order: params.get("order") === "oldest" ? "oldest" : "newest",
  };
}

function queryOf(f) {
  const p = new URLSearchParams();
  if (f.status.length) p.set("status", f.status.join(","));
  if (f.type.length) p.set("type", f.type.join(","));
  if (f.priority.length) p.set("priority", f.priority.join(","));
  if (f.created_after) p.set("created_after", f.created_after);
  if (f.created_before) p.set("created_before", f.created_before);
  for (const m of f.metadata) p.append("metadata", m);
  return p;
}

/** The same filter as an action body's "filter" (FilterSpec). */
function filterSpec(f) {
  const spec = {};
  if (f.status.length) spec.status = f.status;
  if (f.type.length) spec.type = f.type;
  if (f.priority.length) spec.priority = f.priority.map(Number);
  if (f.created_after) spec.created_after = f.created_after;
  if (f.created_before) spec.created_before = f.created_before;
  if (f.metadata.length) spec.metadata = Object.fromEntries(f.metadata.map((m) => [m.slice(0, m.indexOf("=")), m.slice(m.indexOf("=") + 1)]));
  return spec;
}

const toLocalInput = (iso) => {
  if (!iso) return "";
  const d = new Date(iso);
  return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19);
};
const fromLocalInput = (v) => (v ? new Date(v).toISOString() : "");

export function mount(el, ctx, { deadLetters = false } = {}) {
  const { queue, info } = ctx;
  const f = filterFromParams(ctx.params);
  if (deadLetters) f.status = ["dead_letter"];
  const base = `#/q/${encodeURIComponent(queue)}/${deadLetters ? "dead-letters" : "activities"}`;
  const writable = !info.read_only;
  const selected = new Set();
  const cursors = [null]; // the cursor of each page seen, for "previous"
  let page = 0;
  let items = [];
  let total = null;

  const summary = h("p.summary#summary");
  const table = h("div#results");
  const pager = h("nav.pager");
  const bulk = h("div.bulk#bulk");
  fill(el, h("h1", null, deadLetters ? `Dead letters — ${queue}` : `Activities — ${queue}`),
    filterForm(), summary, writable ? bulk : null, table, pager);

  function filterForm() {
    const statusBoxes = deadLetters ? null : h("fieldset.statuses", null, h("legend", null, "status"),
      info.statuses.map((s) => h("label", null,
        h("input", { type: "checkbox", name: "status", value: s, checked: f.status.includes(s) }), ` ${s}`)));
    const form = h("form.filters#filters", {
      onsubmit(ev) {
        ev.preventDefault();
        const data = new FormData(form);
        const next = {
          status: deadLetters ? [] : data.getAll("status"),
          type: String(data.get("type") || "").split(",").map((s) => s.trim()).filter(Boolean),
          priority: data.get("priority") ? [String(data.get("priority"))] : [],
          created_after: fromLocalInput(data.get("created_after")),
          created_before: fromLocalInput(data.get("created_before")),
          metadata: String(data.get("metadata") || "").split(",").map((s) => s.trim()).filter((s) => s.includes("=")),
          order: data.get("order") === "oldest" ? "oldest" : "newest",
        };
        const p = queryOf(next);
        if (next.order === "oldest") p.set("order", "oldest");
        ctx.navigate(`${base}?${p}`);
      },
    },
    statusBoxes,
    h("label", null, "type ", h("input", { name: "type", value: f.type.join(","), placeholder: "send_email, charge" })),
    h("label", null, "priority ", h("select", { name: "priority" }, h("option", { value: "" }, "any"),
      Object.entries(PRIORITIES).map(([n, name]) =>
        h("option", { value: n, selected: f.priority.length === 1 && f.priority[0] === n }, `${n} ${name}`)))),
    h("label", null, "created after ", h("input", { type: "datetime-local", step: 1, name: "created_after",
      value: toLocalInput(f.created_after) })),
    h("label", null, "before ", h("input", { type: "datetime-local", step: 1, name: "created_before",
      value: toLocalInput(f.created_before) })),
    h("label", null, "metadata ", h("input", { name: "metadata", value: f.metadata.join(", "), placeholder: "tenant=t1" })),
    h("label", null, "order ", h("select", { name: "order" },
      h("option", { value: "newest", selected: f.order === "newest" }, "newest first"),
      h("option", { value: "oldest", selected: f.order === "oldest" }, "oldest first"))),
    h("button#apply", { type: "submit" }, "Apply"),
    h("a.button", { href: base }, "Clear"));
    return form;
  }

  async function load() {
    const p = queryOf(f);
    p.set("limit", String(PAGE));
    if (f.order === "oldest") p.set("order", "oldest");
    if (cursors[page]) p.set("cursor", cursors[page]);
    const countParams = queryOf(f);
    try {
      const [res, count] = await Promise.all([
        getJSON(`${queuePath(queue)}/activities`, p),
        getJSON(`${queuePath(queue)}/activities/count`, countParams),
      ]);
      items = res.items;
      total = count;
      cursors[page + 1] = res.next_cursor;
      cursors.length = page + 2;
      render();
      el.dataset.loaded = String(refresher.loads);
    } catch (err) {
      fill(summary, h("span.error", null, `Could not load: ${err.message}`));
    }
  }
  const refresher = new Refresher(load, REFRESH_MS);

  function totalText() {
    if (!total) return "";
    return total.exact ? fmtNum(total.count) : `at least ${fmtNum(total.count)}`;
  }

  function render() {
    fill(summary, h("span#total", { dataset: { count: total.count, exact: total.exact } },
      `${totalText()} matching`), ` · page ${page + 1} · ${items.length} shown`);
    const ids = new Set(items.map((a) => a.id));
    for (const id of [...selected]) if (!ids.has(id)) selected.delete(id);
    const allBox = h("input#select-all", { type: "checkbox", "aria-label": "Select the page",
      checked: items.length > 0 && selected.size === items.length,
      onchange(ev) {
        for (const a of items) ev.target.checked ? selected.add(a.id) : selected.delete(a.id);
        render();
      } });
    fill(table, items.length === 0 ? h("p.muted#empty", null, "No activity matches.") : h("table.grid.activities", null,
      h("thead", null, h("tr", null, writable ? h("th", null, allBox) : null,
        ["id", "type", "status", "priority", "created", "ready", "attempt", "last error"].map((t) => h("th", null, t)),
        writable && deadLetters ? h("th", null, "") : null)),
      h("tbody", null, items.map((a) => h("tr.activity", { dataset: { id: a.id, status: a.status } },
        writable ? h("td", null, h("input.pick", { type: "checkbox", "aria-label": `Select ${a.id}`,
          checked: selected.has(a.id),
          onchange(ev) {
            ev.target.checked ? selected.add(a.id) : selected.delete(a.id);
            renderBulk();
          } })) : null,
        h("td.mono", null, h("a", { href: `#/q/${encodeURIComponent(queue)}/activity/${a.id}`, title: a.id }, shortId(a.id))),
        h("td", null, a.activity_type), h("td", null, badge(a.status)),
        h("td", null, PRIORITIES[a.priority] ?? a.priority), h("td", null, fmtTime(a.created_at)),
        h("td", null, fmtTime(a.ready_at)), h("td.attempt-cell", null, fmtAttempt(a)),
        h("td.error-cell", { title: a.last_error ?? "" }, a.last_error ?? ""),
        writable && deadLetters ? h("td", null, h("button.row-retry", { async onclick() {
          if (await actOnOne(queue, a, "retry")) refresher.now();
        } }, "Retry")) : null)))));
    fill(pager,
      h("button#prev", { disabled: page === 0, onclick() { page--; refresher.now(); } }, "← Previous"),
      h("button#next", { disabled: !cursors[page + 1], onclick() { page++; refresher.now(); } }, "Next →"));
    renderBulk();
  }

  function renderBulk() {
    if (!writable) return;
    const actions = deadLetters ? ["retry", "delete"] : Object.keys(ACTION_LABELS);
    const ids = [...selected];
    const result = h("span.bulk-result#bulk-result");
    const run = async (action, what, target) => {
      const res = await actOnMany(queue, action, what, target);
      if (res) {
        selected.clear();
        refresher.now();
        lastResult = `${ACTION_LABELS[action]}: ${fmtNum(res.changed_count)} changed, ${fmtNum(res.skipped)} skipped`;
        fill(result, lastResult);
        result.dataset.changed = res.changed_count;
      }
    };
    if (lastResult) fill(result, lastResult);
    fill(bulk,
      h("span", null, `${ids.length} selected: `),
      actions.map((a) => h("button.bulk-selected", { dataset: { action: a }, disabled: ids.length === 0,
        onclick: () => run(a, `${ids.length} selected activit${ids.length === 1 ? "y" : "ies"}`, { ids }) },
      ACTION_LABELS[a])),
      h("span.sep", null, " | all matching: "),
      actions.map((a) => h("button.bulk-all", { dataset: { action: a }, disabled: !total || total.count === 0,
        onclick: () => run(a, `all ${totalText()} activities matching the filter`, { filter: filterSpec(f) }) },
      `${ACTION_LABELS[a]} all`)),
      result);
  }
  let lastResult = "";

  return follow(ctx.live, refresher);
}
