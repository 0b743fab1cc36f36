// The dynaq web console: plain JS over the node's own API (same origin, so it
// works behind HAProxy). A token, when the node needs one, is kept in this
// tab's sessionStorage and sent as "Authorization: Bearer".
"use strict";

const $ = (sel) => document.querySelector(sel);
const view = $("#view");
let timer = null;      // the next refresh of the page shown (a setTimeout)
let routeGen = 0;      // bumped by every route(): work of a page left behind stops
let taskTimer = null;  // polls a purge or redrive task while its queue's page is open
const REFRESH_MS = 2000;   // between the end of one refresh and the start of the next
const FANOUT = 6;          // most detail requests one page has in flight at once
const QUEUES_PAGE = 50;    // queues shown (and asked about) per page of the table
let queuesFrom = 0;        // the first queue shown, by position in the listing

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}

function authHeaders(headers) {
  const token = sessionStorage.getItem("dynaq-token");
  if (token) headers["Authorization"] = "Bearer " + token;
  return headers;
}

async function api(method, path, body) {
  const headers = authHeaders({"Accept": "application/json"});
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, {method, headers, body: body === undefined ? undefined : JSON.stringify(body)});
  const text = await r.text();
  const data = text ? JSON.parse(text) : null;
  if (r.status === 401) {
    $("#login").hidden = false;
    const e = new Error("a token is needed");
    e.status = 401;
    throw e;
  }
  if (!r.ok) {
    const e = new Error((data && data.code ? data.code + ": " + data.error : "HTTP " + r.status));
    e.status = r.status;
    throw e;
  }
  return data;
}

function showError(e) { $("#error").textContent = e ? String(e.message || e) : ""; }

function refreshEvery(gen, ms, fn) {
  // The next refresh is scheduled only once the previous one ended, so refreshes
  // never overlap however slow the node is, and none runs after its page (route
  // number gen) is left.
  if (gen !== routeGen) return;
  const tick = async () => {
    try { await fn(); } catch (e) { if (gen === routeGen) showError(e); }
    if (gen === routeGen) timer = setTimeout(tick, ms);
  };
  timer = setTimeout(tick, ms);
}

async function settleAll(items, fn) {
  // Promise.allSettled over items, with at most FANOUT calls of fn in flight.
  const out = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      try { out[i] = {status: "fulfilled", value: await fn(items[i])}; }
      catch (e) { out[i] = {status: "rejected", reason: e}; }
    }
  };
  await Promise.all(Array.from({length: Math.min(FANOUT, items.length)}, worker));
  return out;
}

async function readable(items, fn) {
  // The details of each item the token may read: listings are open to any token,
  // details are not, so a 403 leaves an item out quietly (as does a 404: deleted
  // since the listing). Any other failure is the page's error.
  const settled = await settleAll(items, fn);
  const failed = settled.find((r) => r.status === "rejected" && r.reason.status !== 404 && r.reason.status !== 403);
  if (failed) throw failed.reason;
  return settled.map((r, i) => [items[i], r]).filter(([, r]) => r.status === "fulfilled").map(([item, r]) => [item, r.value]);
}

function table(headers, rows, id) {
  const head = headers.map((h) => `<th>${esc(h)}</th>`).join("");
  const body = rows.map((r) => "<tr>" + r.map((c) =>
    typeof c === "number" ? `<td class="num">${c}</td>` : (c && c.html !== undefined ? `<td>${c.html}</td>` : `<td>${esc(c)}</td>`)
  ).join("") + "</tr>").join("");
  return `<table id="${id}"><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>`;
}

function b64bytes(s) { return Uint8Array.from(atob(s), (c) => c.charCodeAt(0)); }

function decodePage(page) {
  // The snapshot page's columns: little-endian int64 ids and times, int32 offsets.
  const n = page.count, ids = new DataView(b64bytes(page.ids).buffer), times = new DataView(b64bytes(page.enqueued_ms).buffer);
  const offs = new DataView(b64bytes(page.body_offsets).buffer), bodies = b64bytes(page.bodies);
  const out = [], dec = new TextDecoder("utf-8", {fatal: false});
  for (let i = 0; i < n; i++) {
    const a = offs.getInt32(4 * i, true), b = offs.getInt32(4 * (i + 1), true);
    out.push({id: ids.getBigInt64(8 * i, true).toString(), at: Number(times.getBigInt64(8 * i, true)),
      body: dec.decode(bodies.subarray(a, b)), attributes: (page.attributes || [])[i] || {}});
  }
  return out;
}

async function clusterView() {
  const [health, ring] = await Promise.all([api("GET", "/health").catch(() => ({status: "unavailable"})), api("GET", "/v2/status/ring")]);
  view.innerHTML = `<h2>Cluster</h2><p id="health">This node: <b>${esc(health.node || "?")}</b> is ${esc(health.status)}; ${ring.members.length} member(s).</p>` +
    table(["member", "HTTP", "from id", "to id"], ring.members.map((m) => [m.name, m.http, m.from_id, m.to_id]), "members");
}

const last = {};  // queue -> {t, sent} for rates from successive polls

async function queuesView() {
  const gen = routeGen;
  const {queues} = await api("GET", "/v1/queues");
  // Only the page of queues shown is asked about, a few at a time: a node with
  // thousands of queues gets QUEUES_PAGE requests a refresh, not one per queue.
  queuesFrom = Math.max(0, Math.min(queuesFrom, Math.floor(Math.max(queues.length - 1, 0) / QUEUES_PAGE) * QUEUES_PAGE));
  const shown = queues.slice(queuesFrom, queuesFrom + QUEUES_PAGE);
  const infos = (await readable(shown, (q) => api("GET", "/v2/queues/" + encodeURIComponent(q)))).map(([, i]) => i);
  if (gen !== routeGen) return;  // the page was left while this refresh waited
  const now = Date.now();
  const rows = infos.map((i) => {
    const prev = last[i.name];
    const rate = prev ? ((prev.depth - i.depth) / ((now - prev.t) / 1000)).toFixed(1) : "-";
    last[i.name] = {t: now, depth: i.depth};
    return [{html: `<a href="#/queue/${encodeURIComponent(i.name)}">${esc(i.name)}</a>`}, i.depth, i.in_flight, i.partitions, i.visibility_timeout_s, rate];
  });
  if (!$("#queues-page")) {
    view.innerHTML = `<div id="queues-page"><h2>Queues</h2><div id="queues-table"></div>
      <form id="create"><label>New queue<input id="new-queue" required></label>
      <label>Visibility timeout (s)<input id="new-vt" type="number" value="30" min="0"></label>
      <button>Create</button></form>
      <p id="queues-pager"><button type="button" id="queues-prev">Previous</button>
      <span id="queues-range"></span> <button type="button" id="queues-next">Next</button></p></div>`;
    // Routed again, so the page's refreshes stay one at a time.
    const move = (by) => { queuesFrom = Math.max(0, queuesFrom + by); route(); };
    $("#queues-prev").onclick = () => move(-QUEUES_PAGE);
    $("#queues-next").onclick = () => move(QUEUES_PAGE);
    $("#create").onsubmit = async (ev) => {
      ev.preventDefault();
      try {
        const name = $("#new-queue").value;
        // The settings ride in the PUT: the queue is created with them in one write.
        await api("PUT", "/v1/queues/" + encodeURIComponent(name), {visibility_timeout: Number($("#new-vt").value)});
        location.hash = "#/queue/" + encodeURIComponent(name);
      } catch (e) { showError(e); }
    };
  }
  $("#queues-table").innerHTML = table(["queue", "depth", "in flight", "partitions", "visibility (s)", "drain /s"], rows, "queues");
  $("#queues-range").textContent = queues.length
    ? `queues ${queuesFrom + 1}–${queuesFrom + shown.length} of ${queues.length}` : "no queue";
  $("#queues-prev").disabled = queuesFrom === 0;
  $("#queues-next").disabled = queuesFrom + QUEUES_PAGE >= queues.length;
}

async function messagesTable(q) {
  const msgs = decodePage(await api("GET", "/v2/queues/" + q + "/snapshot?limit=50"));
  return table(["id", "enqueued", "body", "attributes"], msgs.map((m) => [m.id, new Date(m.at).toISOString(),
    {html: `<span class="body">${esc(m.body)}</span>`}, JSON.stringify(m.attributes)]), "messages");
}

async function queueView(name) {
  const gen = routeGen;
  const q = encodeURIComponent(name);
  const [info, topics, sources] = await Promise.all([api("GET", "/v2/queues/" + q), api("GET", "/v1/topics"),
    api("GET", "/v2/queues/" + q + "/dead_letter_sources")]);
  // The topics the token may read, a few at a time (a topic it may not read is left out).
  const got = await readable(topics.topics, (t) => api("GET", "/v1/topics/" + encodeURIComponent(t)));
  const subs = got.filter(([, t]) => t.Queues.includes(name)).map(([t]) => t);
  const messages = await messagesTable(q);
  if (gen !== routeGen) return;  // the page was left while it loaded
  view.innerHTML = `<h2>Queue <span id="queue-name">${esc(name)}</span></h2>
    <p id="figures">depth <b>${info.depth}</b>, in flight <b>${info.in_flight}</b>, partitions ${info.partitions}</p>
    <form id="settings">
      <label>Visibility timeout (s)<input id="set-vt" type="number" min="0" value="${info.visibility_timeout_s}"></label>
      <label>Min partitions<input id="set-min" type="number" min="1" value="${info.min_partitions}"></label>
      <label>Max partitions<input id="set-max" type="number" min="1" value="${info.max_partitions}"></label>
      <label>Compressed<input id="set-comp" type="checkbox" ${info.compressed_messages ? "checked" : ""}></label>
      <button id="save">Save settings</button> <span id="saved"></span></form>
    <p id="subscriptions">Subscribed to: ${subs.length ? subs.map(esc).join(", ") : "no topic"}</p>
    <form id="send"><label>Message body<input id="send-body" size="40" required></label><button>Send</button></form>
    ${deadLetterSection(info, sources.queues)}
    <h2>Messages (peek: no lock, first 50)</h2><div id="messages-box">${messages}</div>`;
  $("#settings").onsubmit = async (ev) => {
    ev.preventDefault();
    try {
      await api("PATCH", "/v1/queues/" + q, {visibility_timeout: Number($("#set-vt").value), min_partitions: Number($("#set-min").value),
        max_partitions: Number($("#set-max").value), compressed_messages: $("#set-comp").checked});
      $("#saved").textContent = "saved";
      showError(null);
    } catch (e) { showError(e); }
  };
  $("#redrive").onsubmit = async (ev) => {
    ev.preventDefault();
    const body = {};
    if ($("#redrive-to").value) body.to_queue = $("#redrive-to").value;
    if ($("#redrive-rate").value) body.max_per_s = Number($("#redrive-rate").value);
    await startTask(name, "redrive", body, info.depth);
  };
  $("#purge").onclick = async () => {
    if (confirm(`Delete every message of ${name}?`)) await startTask(name, "purge", undefined, info.depth);
  };
  $("#send").onsubmit = async (ev) => {
    ev.preventDefault();
    try {
      await api("POST", "/v2/queues/" + q + "/messages", {messages: [{body: $("#send-body").value}]});
      await queueView(name);
    } catch (e) { showError(e); }
  };
}

function deadLetterSection(info, sources) {
  const policy = info.redrive_policy;
  const link = (n) => `<a href="#/queue/${encodeURIComponent(n)}">${esc(n)}</a>`;
  return `<h2>Dead letters</h2>
    <p id="dlq-policy">${policy ? `Messages received ${policy.max_receive_count} times go to ${link(policy.dead_letter_queue)}.`
      : "No dead-letter queue."}</p>
    <p id="dlq-sources">Dead-letter queue of: ${sources.length ? sources.map(link).join(", ") : "no queue"}</p>
    <form id="redrive"><label>Redrive to (empty: back where each came from)<input id="redrive-to" size="24"></label>
      <label>At most (msgs/s)<input id="redrive-rate" type="number" min="1"></label>
      <button id="redrive-button">Redrive</button> <button type="button" id="purge">Purge</button></form>
    <p id="task"><progress id="task-bar" hidden></progress> <span id="task-progress"></span>
      <button type="button" id="task-cancel" hidden>Cancel</button></p>`;
}

async function startTask(name, kind, body, depth) {
  // Starts the node's background task, then polls it until it ends.
  try {
    let t = await api("POST", `/v2/queues/${encodeURIComponent(name)}/${kind}`, body);
    const bar = $("#task-bar");
    bar.hidden = false;
    bar.max = Math.max(depth, 1);
    const cancel = $("#task-cancel");
    cancel.onclick = async () => {
      try { t = await api("POST", `/v2/queues/${encodeURIComponent(name)}/tasks/${t.id}/cancel`); show(); }
      catch (e) { showError(e); }
    };
    const show = () => {
      bar.value = Math.min(t.moved + t.skipped, bar.max);
      $("#task-progress").textContent = `${t.kind} ${t.state}: ${t.moved} moved, ${t.skipped} skipped` +
        (t.to_queue ? ` (to ${t.to_queue})` : "") + (t.error ? ` — ${t.error}` : "");
      // Only a running redrive can be stopped (a purge runs to its end).
      cancel.hidden = !(t.kind === "redrive" && t.state === "running");
    };
    show();
    const poll = async () => {
      try {
        t = await api("GET", "/v2/tasks/" + t.id);
        show();
        if (t.state === "running" || t.state === "cancelling") { taskTimer = setTimeout(poll, 500); return; }
        // What the task left: the depth and the stored messages.
        const q = encodeURIComponent(name);
        const [i, messages] = await Promise.all([api("GET", "/v2/queues/" + q), messagesTable(q)]);
        $("#figures b").textContent = String(i.depth);
        $("#messages-box").innerHTML = messages;
      } catch (e) { showError(e); }
    };
    if (t.state === "running") taskTimer = setTimeout(poll, 300); else await poll();
  } catch (e) { showError(e); }
}

async function route() {
  const gen = ++routeGen;
  clearTimeout(timer);
  clearTimeout(taskTimer);
  stopTail();
  stopBatchPoll();
  showError(null);
  const hash = location.hash || "#/queues";
  try {
    if (hash.startsWith("#/queue/")) {
      await queueView(decodeURIComponent(hash.slice(8)));
    } else if (hash.startsWith("#/stream/")) {
      await streamView(decodeURIComponent(hash.slice(9)));
    } else if (hash === "#/streams") {
      view.innerHTML = "";
      await streamsView();
      refreshEvery(gen, REFRESH_MS, streamsView);  // live sizes
    } else if (hash === "#/batches" || hash.startsWith("#/batches/")) {
      const [mode, id] = hash.slice(10).split("/").map(decodeURIComponent);
      batchesView(mode, id);  // polls the batch looked up, if any, until it completes
    } else if (hash === "#/cluster") {
      await clusterView();
    } else {
      view.innerHTML = "";
      await queuesView();
      refreshEvery(gen, REFRESH_MS, queuesView);  // live figures
    }
  } catch (e) {
    if (gen !== routeGen) return;  // a page already left
    // A page that failed shows its error alone, not under the page it replaced.
    view.innerHTML = "";
    showError(e);
  }
}

$("#login-button").onclick = () => {
  sessionStorage.setItem("dynaq-token", $("#token").value);
  $("#login").hidden = true;
  route();
};
window.addEventListener("hashchange", route);
route();
