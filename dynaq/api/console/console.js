// The dynaq web console: plain JS over the node's own API (same origin, so it
// works behind HAProxy). A token, when the node needs one, is kept in this
// tab's sessionStorage and sent as "Authorization: Bearer".
"use strict";

const $ = (sel) => document.querySelector(sel);
const view = $("#view");
let timer = null;
let taskTimer = null;  // polls a purge or redrive task while its queue's page is open

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
  const {queues} = await api("GET", "/v1/queues");
  // A queue deleted between the list and its details drops out of this refresh, not the table.
  const settled = await Promise.allSettled(queues.map((q) => api("GET", "/v2/queues/" + encodeURIComponent(q))));
  const failed = settled.find((r) => r.status === "rejected" && r.reason.status !== 404);
  if (failed) throw failed.reason;
  const infos = settled.filter((r) => r.status === "fulfilled").map((r) => r.value);
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
      <button>Create</button></form></div>`;
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
}

async function messagesTable(q) {
  const msgs = decodePage(await api("GET", "/v2/queues/" + q + "/snapshot?limit=50"));
  return table(["id", "enqueued", "body", "attributes"], msgs.map((m) => [m.id, new Date(m.at).toISOString(),
    {html: `<span class="body">${esc(m.body)}</span>`}, JSON.stringify(m.attributes)]), "messages");
}

async function queueView(name) {
  const q = encodeURIComponent(name);
  const [info, topics, sources] = await Promise.all([api("GET", "/v2/queues/" + q), api("GET", "/v1/topics"),
    api("GET", "/v2/queues/" + q + "/dead_letter_sources")]);
  const subs = [];
  for (const t of topics.topics) {
    const got = await api("GET", "/v1/topics/" + encodeURIComponent(t));
    if (got.Queues.includes(name)) subs.push(t);
  }
  const messages = await messagesTable(q);
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
  clearInterval(timer);
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
      timer = setInterval(() => streamsView().catch(showError), 2000);  // live sizes
    } else if (hash === "#/batches" || hash.startsWith("#/batches/")) {
      const [mode, id] = hash.slice(10).split("/").map(decodeURIComponent);
      batchesView(mode, id);  // polls the batch looked up, if any, until it completes
    } else if (hash === "#/cluster") {
      await clusterView();
    } else {
      view.innerHTML = "";
      await queuesView();
      timer = setInterval(() => queuesView().catch(showError), 2000);  // live figures
    }
  } catch (e) { showError(e); }
}

$("#login-button").onclick = () => {
  sessionStorage.setItem("dynaq-token", $("#token").value);
  $("#login").hidden = true;
  route();
};
window.addEventListener("hashchange", route);
route();
