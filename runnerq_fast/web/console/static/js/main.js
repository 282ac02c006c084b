// The console's entry point: reads the service index, draws the header (queue, live state, token) and
// routes "#/q/QUEUE/PAGE..." hashes to the pages.

import { getJSON, token } from "./api.js";
import * as activity from "./activity.js";
import * as browser from "./browser.js";
import * as dashboard from "./dashboard.js";
import { fill, fmtNum, h } from "./dom.js";
import { Live } from "./live.js";

const QUEUE_KEY = "runnerq-fast.queue";
const view = document.getElementById("view");
const liveBadge = document.getElementById("live");
let info = null;
let current = null;
let knownQueues = [];

const live = new Live((state, l) => {
  liveBadge.dataset.state = state;
  liveBadge.textContent = state === "live" ? `live · ${fmtNum(Math.round(l.rate))} ev/s` : state;
});

/** "#/q/web/activity/ID?x=1" -> {queue, page, id, params}. */
function parseHash() {
  const raw = location.hash.replace(/^#/, "") || "/";
  const [path, query] = raw.split("?", 2);
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(query ?? "");
  if (parts[0] !== "q" || !parts[1]) return { queue: null, page: "dashboard", id: null, params };
  return { queue: parts[1], page: parts[2] || "dashboard", id: parts[3] ?? null, params };
}

function defaultQueue() {
  const remembered = sessionStorage.getItem(QUEUE_KEY);
  if (remembered && (!info.queues || info.queues.includes(remembered))) return remembered;
  if (info.queues && info.queues.length) return info.queues[0];
  return knownQueues[0] ?? "default";
}

function navigate(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

function drawNav(queue, page) {
  const q = encodeURIComponent(queue);
  fill(document.getElementById("nav"), [["dashboard", "Dashboard", ""], ["activities", "Activities", "/activities"],
    ["dead-letters", "Dead letters", "/dead-letters"]].map(([key, label, suffix]) =>
    h("a", { href: `#/q/${q}${suffix}`, "aria-current": key === page || (key === "activities" && page === "activity") ? "page" : null }, label)));
  const select = document.getElementById("queue");
  const names = [...new Set([...(info.queues ?? knownQueues), queue])].sort();
  fill(select, names.map((n) => h("option", { value: n, selected: n === queue }, n)));
}

function route() {
  const r = parseHash();
  if (!r.queue) {
    navigate(`#/q/${encodeURIComponent(defaultQueue())}`);
    return;
  }
  sessionStorage.setItem(QUEUE_KEY, r.queue);
  if (current) current.unmount();
  view.replaceChildren();
  view.dataset.page = r.page;
  delete view.dataset.loaded;
  drawNav(r.queue, r.page);
  live.open(r.queue);
  const ctx = { queue: r.queue, id: r.id, params: r.params, info, live, navigate };
  if (r.page === "activities") current = browser.mount(view, ctx);
  else if (r.page === "dead-letters") current = browser.mount(view, ctx, { deadLetters: true });
  else if (r.page === "activity" && r.id) current = activity.mount(view, ctx);
  else current = dashboard.mount(view, ctx);
  window.runnerqConsole.view = current;
}

async function start() {
  try {
    info = await getJSON("/");
  } catch (err) {
    fill(view, h("p.error", null, `Could not reach the service: ${err.message}`));
    setTimeout(start, 2000);
    return;
  }
  try {
    knownQueues = (await getJSON("/api/v1/queues")).queues.map((q) => q.queue);
  } catch {
    knownQueues = [];
  }
  const mode = document.getElementById("mode");
  if (info.read_only) {
    mode.textContent = "read-only";
    mode.dataset.mode = "read-only";
    document.getElementById("token-form").hidden = true;
  }
  const tokenInput = document.getElementById("token");
  tokenInput.value = token.get();
  tokenInput.addEventListener("change", () => token.set(tokenInput.value.trim()));
  document.getElementById("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    token.set(tokenInput.value.trim());
  });
  if (!info.token_required) tokenInput.placeholder = "token (none needed)";
  document.getElementById("queue").addEventListener("change", (ev) => {
    navigate(`#/q/${encodeURIComponent(ev.target.value)}`);
  });
  window.addEventListener("hashchange", route);
  route();
}

window.runnerqConsole = { live, view: null };
start();
