// The console's batches page: look a batch up by id (there is no route listing
// batches), then follow it live (one GET a second) until it completes or the page
// is left. Ids looked up are kept in this browser's localStorage, with their last
// known state. Loaded before console.js, whose helpers (api, esc, table, view,
// showError) it uses when called.
"use strict";

const BATCH_POLL_MS = 1000;
const RECENT_KEY = "dynaq-recent-batches";
const RECENT_KEEP = 20;
const MAX_BATCH_ID = 2n ** 63n - 1n;
let batchPolling = null;  // {timer} of the batch being followed, null when none

function stopBatchPoll() {
  if (batchPolling) { clearTimeout(batchPolling.timer); batchPolling = null; }
}

function batchIdProblem(text) {
  // The node's rule (decimal, [0, 2^63)); checked here because a malformed id
  // does not even match the route.
  if (!/^[0-9]{1,19}$/.test(text) || BigInt(text) > MAX_BATCH_ID) {
    return `malformed batch id "${text}": expected a decimal integer in [0, 2^63)`;
  }
  return null;
}

function recentBatches() {
  try {
    const got = JSON.parse(localStorage.getItem(RECENT_KEY) || "[]");
    return Array.isArray(got) ? got.filter((r) => r && typeof r.id === "string" && typeof r.mode === "string") : [];
  } catch (e) { return []; }
}

function remember(id, mode, state, onlyIfKnown) {
  const recent = recentBatches();
  const rest = recent.filter((r) => !(r.id === id && r.mode === mode));
  if (onlyIfKnown && rest.length === recent.length) return;  // a mistyped id is not kept
  rest.unshift({id, mode, state, seen: Date.now()});
  try { localStorage.setItem(RECENT_KEY, JSON.stringify(rest.slice(0, RECENT_KEEP))); } catch (e) { /* full or off: not kept */ }
  renderRecent();
}

function batchState(b) {
  const done = b.isComplete ? "complete" : "not complete";
  return `${b.isClosed ? "closed" : "open"}, ${done}`;
}

function renderRecent() {
  const box = $("#recent-batches");
  if (!box) return;
  const recent = recentBatches();
  box.innerHTML = recent.length ? table(["batch", "mode", "last known state", "seen"], recent.map((r) => [
    {html: `<a href="#/batches/${encodeURIComponent(r.mode)}/${encodeURIComponent(r.id)}">${esc(r.id)}</a>`},
    r.mode, r.state, new Date(r.seen).toISOString()]), "recent") + `<button type="button" id="forget-batches">Forget these</button>`
    : `<p id="recent">No batch looked up yet in this browser.</p>`;
  const forget = $("#forget-batches");
  if (forget) forget.onclick = () => { localStorage.removeItem(RECENT_KEY); renderRecent(); };
}

function batchesView(mode, id) {
  view.innerHTML = `<h2>Batches</h2>
    <p>Batches are not listed by the node: look one up by the id its producer got back.</p>
    <form id="lookup"><label>Batch id<input id="batch-id-input" size="22" required inputmode="numeric"></label>
      <label>Mode<select id="batch-mode-input"><option value="exact">exact</option><option value="estimated">estimated</option></select></label>
      <button>Look up</button></form>
    <div id="batch"></div>
    <h2>Recent batches <small>(this browser)</small></h2><div id="recent-batches"></div>`;
  renderRecent();
  $("#lookup").onsubmit = (ev) => {
    ev.preventDefault();
    const text = $("#batch-id-input").value.trim();
    const problem = batchIdProblem(text);
    if (problem) { stopBatchPoll(); $("#batch").innerHTML = ""; showError(problem); return; }
    const next = `#/batches/${$("#batch-mode-input").value}/${text}`;
    if (location.hash === next) route(); else location.hash = next;  // a hashchange routes
  };
  if (id === undefined) return;
  $("#batch-id-input").value = id;
  if (mode === "exact" || mode === "estimated") $("#batch-mode-input").value = mode;
  const problem = batchIdProblem(id);
  if (problem) { showError(problem); return; }
  if (mode !== "exact" && mode !== "estimated") { showError(`unknown batch mode "${mode}": exact or estimated`); return; }
  followBatch(mode, id);
}

function followBatch(mode, id) {
  stopBatchPoll();
  const me = {timer: null};
  batchPolling = me;
  const poll = async () => {
    let b;
    try {
      b = await api("GET", `/api/v1/batch/${mode}/${id}`);
    } catch (e) {
      if (batchPolling !== me) return;
      if (e.status === 404) {
        stopBatchPoll();
        $("#batch").innerHTML = "";
        remember(id, mode, "not found", true);
        showError(`no ${mode} batch ${id} (it was never opened, or was deleted or aged out): ${e.message}`);
        return;
      }
      showError(e);
      // No token, not allowed, the wrong mode: polling again would not help.
      if (e.status === 401 || e.status === 403 || e.status === 422) { stopBatchPoll(); return; }
      // Otherwise (a node restarting, a proxy's 503), it is tried again.
      me.timer = setTimeout(poll, BATCH_POLL_MS);
      return;
    }
    if (batchPolling !== me) return;  // the page was left while the GET ran
    showError(null);
    renderBatch(b, id);
    remember(id, mode, batchState(b));
    if (b.isComplete) {
      stopBatchPoll();
      $("#batch-poll").textContent = "complete: no longer polled";
    } else {
      me.timer = setTimeout(poll, BATCH_POLL_MS);
    }
  };
  poll();
}

function renderBatch(b, id) {
  const items = b.items, pending = b.pending;
  let bar, progress, pendingText;
  if (b.mode === "estimated") {
    // One counter: what was added minus what was acked (an item acked twice counts twice).
    const done = Math.min(Math.max(items - pending, 0), items);
    bar = `<progress id="batch-bar" max="${Math.max(items, 1)}" value="${items ? done : (b.isComplete ? 1 : 0)}"></progress>`;
    progress = `${done} of ${items} items done`;
    pendingText = `${pending} item(s) pending`;
  } else {
    // Exact mode counts unfinished blocks (up to 4096 items each), not items: the
    // items done are only known once no block is left.
    const all = pending <= 0;
    bar = all || b.isComplete
      ? `<progress id="batch-bar" max="${Math.max(items, 1)}" value="${Math.max(items, 1)}"></progress>`
      : `<progress id="batch-bar"></progress>`;
    progress = all ? `${items} of ${items} items done` : `${items} items, some still pending`;
    pendingText = `${pending} block(s) pending (exact mode counts unfinished blocks of up to 4096 items, not items)`;
  }
  const failed = b.failedItems || [];
  const failedHtml = b.mode !== "exact" ? `<p id="failed-items">Estimated batches do not record failed items.</p>`
    : failed.length ? table(["item", "queue", "message", "reason"], failed.map((f) => [f.item, f.queue || "-",
      f.messageId === undefined ? "-" : String(f.messageId), f.reason || "-"]), "failed-items") +
      (failed.length >= 1000 ? "<p>Only the first 1000 failed items are shown.</p>" : "")
    : `<p id="failed-items">No failed item.</p>`;
  const when = (ms) => (ms ? new Date(ms).toISOString() : "-");
  $("#batch").innerHTML = `<h2>Batch <span id="batch-id">${esc(id)}</span> <small id="batch-mode">${esc(b.mode)}</small></h2>
    <p id="batch-state" class="${b.isComplete ? "complete" : ""}">${batchState(b)}</p>
    <p>${bar} <span id="batch-progress">${esc(progress)}</span></p>
    <p id="batch-pending">${esc(pendingText)}</p>
    <p id="batch-user-key">User key: ${b.userKey === null || b.userKey === undefined ? "none" : `<code>${esc(b.userKey)}</code>`}</p>
    <p id="batch-times">Created ${when(b.createdAt)}, updated ${when(b.updatedAt)}, completed ${when(b.completedAt)}</p>
    <h3>Failed items <small>(dead-lettered or expired messages)</small></h3>${failedHtml}
    <p id="batch-poll"><small>live: polled every second</small></p>`;
}
