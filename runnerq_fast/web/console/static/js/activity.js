// One activity: its fields, payload, metadata, result or error, event timeline, parent and children, actions.

import { ACTION_LABELS, actOnOne } from "./actions.js";
import { getJSON, queuePath } from "./api.js";
import { PRIORITIES, badge, fill, fmtAttempt, fmtDuration, fmtTime, h, pretty, shortId } from "./dom.js";
import { Refresher, follow } from "./live.js";

const REFRESH_MS = 500; // re-read when an event names this activity, at most twice a second

// ctx.set_progress's last value: a fraction as a bar and a percentage, an object as JSON.
function progressCell(p) {
  if (p === null || p === undefined) return "–";
  if (typeof p === "number") {
    return h("span#progress", null, h("progress", { max: 1, value: p }), ` ${(p * 100).toFixed(1).replace(/\.0$/, "")} %`);
  }
  return h("pre#progress", null, pretty(p));
}

export function mount(el, ctx) {
  const { queue, id, info } = ctx;
  const link = (aid) => `#/q/${encodeURIComponent(queue)}/activity/${aid}`;
  let gone = false;

  const refresher = new Refresher(async () => {
    if (gone) return;
    try {
      const detail = await getJSON(`${queuePath(queue)}/activities/${encodeURIComponent(id)}`);
      render(detail);
      el.dataset.loaded = String(refresher.loads);
    } catch (err) {
      fill(el, h("h1", null, `Activity ${id}`), h("p.error#load-error", null, err.message));
    }
  }, REFRESH_MS);

  // each failed attempt's traceback, folded under its event; which ones are open survives a refresh
  const opened = new Set();
  function attemptTraceback(e) {
    return h("details.event-traceback", {
      open: opened.has(e.id), dataset: { id: e.id },
      ontoggle(ev) { if (ev.target.open) opened.add(e.id); else opened.delete(e.id); },
    }, h("summary", null, "traceback"), h("pre.error.traceback", null, e.traceback));
  }

  function actions(a) {
    if (info.read_only) return null;
    return h("div.actions#actions", null, Object.entries(ACTION_LABELS).map(([action, label]) => {
      const applies = (info.actions[action] ?? []).includes(a.status);
      return h(`button.action${action === "delete" || action === "cancel" ? ".danger" : ""}`, {
        dataset: { action }, disabled: !applies, title: applies ? "" : `${label} applies to ${(info.actions[action] ?? []).join(", ")}`,
        async onclick() {
          const res = await actOnOne(queue, a, action);
          if (!res) return;
          if (action === "delete" && res.changed_count) {
            gone = true;
            ctx.navigate(`#/q/${encodeURIComponent(queue)}/activities`);
          } else refresher.now();
        },
      }, label);
    }));
  }

  function render(d) {
    const a = d.activity;
    const rows = [
      ["queue", a.queue], ["type", a.activity_type], ["priority", `${a.priority} ${PRIORITIES[a.priority] ?? ""}`],
      ["attempt", fmtAttempt(a)], ["timeout", a.timeout ? fmtDuration(a.timeout) : "none"],
      ["created", fmtTime(a.created_at)], ["ready at", fmtTime(a.ready_at)], ["started", fmtTime(a.started_at)],
      ["finished", fmtTime(a.finished_at)], ["lease expires", fmtTime(a.lease_expires_at)],
      ["progress", progressCell(a.progress)],
      ["idempotency key", a.idempotency_key ?? "–"],
      ["parent", a.parent_id ? h("a#parent", { href: link(a.parent_id) }, a.parent_id) : "–"],
    ];
    let outcome = null;
    if (d.result && d.result.error !== null) {
      outcome = h("section#outcome", null, h("h2", null, "Error"), h("pre.error#error", null, d.result.error));
    } else if (d.result) {
      outcome = h("section#outcome", null, h("h2", null, "Result"), h("pre#result", null, pretty(d.result.result)));
    } else if (a.last_error) {
      outcome = h("section#outcome", null, h("h2", null, "Last error"), h("pre.error#error", null, a.last_error));
    }
    // the traceback of the last attempt whose handler raised (kept after a later success or retry)
    const traceback = a.traceback ? h("section#traceback-box", null, h("h2", null, "Traceback (last failed attempt)"),
      h("pre.error.traceback#traceback", null, a.traceback)) : null;
    const t0 = d.events.length ? Date.parse(d.events[0].at) : 0;
    fill(el,
      h("h1", null, "Activity ", h("span.mono#activity-id", null, a.id), " ", badge(a.status)),
      actions(a),
      h("div.columns", null,
        h("section", null, h("h2", null, "Fields"),
          h("table.fields", null, h("tbody", null, rows.map(([k, v]) => h("tr", null, h("th", null, k), h("td", null, v)))))),
        h("section#timeline-box", null, h("h2", null, `Timeline (${d.events.length} events)`),
          h("ol.timeline#timeline", null, d.events.map((e) => h("li.event", { dataset: { type: e.event_type, id: e.id } },
            h("span.when", null, fmtTime(e.at)), h("span.delta", null, `+${fmtDuration((Date.parse(e.at) - t0) / 1000)}`),
            h(`span.kind.e-${e.event_type}`, null, e.event_type), e.detail ? h("span.detail", null, e.detail) : null,
            e.traceback ? attemptTraceback(e) : null))))),
      h("div.columns", null,
        h("section", null, h("h2", null, "Payload"), h("pre#payload", null, pretty(a.payload))),
        h("section", null, h("h2", null, "Metadata"), h("pre#metadata", null, pretty(a.metadata)))),
      outcome,
      traceback,
      h("section#children", null, h("h2", null, `Children${d.children.length ? ` (${d.children.length}${d.children_next_cursor ? "+" : ""})` : ""}`),
        d.children.length === 0 ? h("p.muted", null, "None.") : h("ul", null, d.children.map((c) =>
          h("li.child", { dataset: { id: c.id } }, h("a", { href: link(c.id) }, shortId(c.id)), ` ${c.activity_type} `, badge(c.status))))));
  }

  fill(el, h("p.muted", null, `Loading activity ${id}…`));
  ctx.live.watch(id);
  return follow(ctx.live, refresher, { onlyWatched: true, cleanup: () => ctx.live.watch(null) });
}
