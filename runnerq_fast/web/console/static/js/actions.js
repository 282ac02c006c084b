// Operator actions: confirm first, send with the token, say what happened (a bulk action: how many it touched).

import { queuePath, send } from "./api.js";
import { PRIORITIES, fill, h } from "./dom.js";

/** The actions' labels by URL name (the index lists which statuses each applies to). */
export const ACTION_LABELS = {
  retry: "Retry", cancel: "Cancel", "run-now": "Run now", "set-priority": "Change priority", delete: "Delete",
};

/** A message at the bottom of the page; kind: "ok" or "error". */
export function toast(text, kind = "ok") {
  const box = document.getElementById("toasts");
  const el = h(`div.toast.${kind}`, { role: kind === "error" ? "alert" : "status" }, text);
  box.append(el);
  setTimeout(() => el.remove(), kind === "error" ? 9000 : 5000);
}

/**
 * Ask before acting. extra: nodes shown under the question (a priority picker). Resolves to true on Confirm.
 */
export function confirmDialog(text, extra) {
  const dlg = document.getElementById("confirm");
  fill(document.getElementById("confirm-text"), text);
  fill(document.getElementById("confirm-extra"), extra ?? []);
  return new Promise((resolve) => {
    dlg.addEventListener("close", () => resolve(dlg.returnValue === "ok"), { once: true });
    dlg.returnValue = "";
    dlg.showModal();
    document.getElementById("confirm-no").focus();
  });
}

function priorityPicker() {
  return h("label", null, "New priority ",
    h("select#confirm-priority", null,
      Object.entries(PRIORITIES).map(([n, name]) => h("option", { value: n, selected: n === "2" }, `${n} ${name}`))));
}

/**
 * One action on one activity, after confirmation. Resolves to the ActionResponse, or null when cancelled
 * or refused (the refusal is shown).
 */
export async function actOnOne(queue, activity, action) {
  const extra = action === "set-priority" ? priorityPicker() : null;
  const ok = await confirmDialog(
    `${ACTION_LABELS[action]} activity ${activity.id} (${activity.activity_type}, ${activity.status})?`, extra);
  if (!ok) return null;
  const base = `${queuePath(queue)}/activities/${activity.id}`;
  try {
    let res;
    if (action === "delete") res = await send("DELETE", base);
    else if (action === "set-priority") {
      res = await send("POST", `${base}/priority`, { priority: Number(document.getElementById("confirm-priority").value) });
    } else res = await send("POST", `${base}/${action}`);
    toast(`${ACTION_LABELS[action]}: ${res.changed_count ? "done" : "nothing to change"}`);
    return res;
  } catch (err) {
    toast(`${ACTION_LABELS[action]} failed: ${err.message}`, "error");
    return null;
  }
}

/**
 * One action on many: by ids, by the listing's filter, or both. what: the words for the question
 * ("3 selected activities", "all activities matching the filter (about 1,234)"). Resolves to the
 * ActionResponse or null.
 */
export async function actOnMany(queue, action, what, { ids, filter }) {
  const extra = action === "set-priority" ? priorityPicker() : null;
  const ok = await confirmDialog(`${ACTION_LABELS[action]} ${what}?`, extra);
  if (!ok) return null;
  const body = {};
  if (ids) body.ids = ids;
  if (filter) body.filter = filter;
  if (action === "set-priority") body.priority = Number(document.getElementById("confirm-priority").value);
  try {
    const res = await send("POST", `${queuePath(queue)}/actions/${action}`, body);
    toast(`${ACTION_LABELS[action]}: ${res.changed_count} changed, ${res.skipped} skipped`);
    return res;
  } catch (err) {
    toast(`${ACTION_LABELS[action]} failed: ${err.message}`, "error");
    return null;
  }
}
