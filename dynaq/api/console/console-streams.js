// The console's stream pages: the node's streams (live sizes) and one stream with
// its schema, an append form and a live tail. Loaded before console.js, whose
// helpers (api, esc, table, view, showError, authHeaders) it uses when called.
"use strict";

const TAIL_ENTRIES = 20;   // replayed when the tail opens
const TAIL_KEEP = 500;     // rows kept on the page: the oldest go first
let tailAbort = null;      // the open tail's AbortController, if any

function stopTail() {
  // Aborting the fetch closes the connection: the node ends that listener.
  if (tailAbort) { tailAbort.abort(); tailAbort = null; }
}

async function streamsView() {
  const gen = routeGen;
  const {streams} = await api("GET", "/v2/streams");
  if (gen !== routeGen) return;  // the page was left while this refresh waited
  const rows = streams.map((s) => [{html: `<a href="#/stream/${encodeURIComponent(s.name)}">${esc(s.name)}</a>`},
    s.size, s.order_key === null ? "-" : s.order_key, s.segments, s.signature.slice(0, 12)]);
  if (!$("#streams-page")) {
    view.innerHTML = `<div id="streams-page"><h2>Streams</h2><p>Streams are kept by each node: these are this node's.</p>
      <div id="streams-table"></div></div>`;
  }
  $("#streams-table").innerHTML = streams.length
    ? table(["stream", "entries", "order key", "segments", "signature"], rows, "streams")
    : `<p id="streams">No stream on this node.</p>`;
}

async function streamView(name) {
  const s = encodeURIComponent(name);
  const [info, sized] = await Promise.all([api("GET", "/v2/streams/" + s + "/schema"), api("GET", "/v2/streams/" + s + "?sizeonly=true")]);
  view.innerHTML = `<h2>Stream <span id="stream-name">${esc(name)}</span></h2>
    <p id="stream-figures"><span id="stream-size">${sized.size}</span> entries, order key <b>${esc(info.order_key === null ? "none" : info.order_key)}</b>,
      signature <code>${esc(info.signature.slice(0, 16))}</code></p>
    <details><summary>Schema</summary><pre id="schema">${esc(JSON.stringify(info.schema, null, 2))}</pre></details>
    <form id="append"><label>Entry (a JSON object)<input id="entry" size="60" required></label><button>Append</button></form>
    <h2>Live tail <small id="tail-state">connecting…</small></h2>
    <table id="tail"><thead><tr><th>index</th><th>order</th><th>entry</th></tr></thead><tbody></tbody></table>`;
  $("#append").onsubmit = async (ev) => {
    ev.preventDefault();
    try {
      let entry;
      try { entry = JSON.parse($("#entry").value); } catch (e) { throw new Error("the entry is not JSON: " + e.message); }
      await api("POST", "/v2/streams/" + s + "/entries", {entries: [entry]});
      $("#entry").value = "";
      showError(null);
    } catch (e) { showError(e); }
  };
  followTail(s);  // runs until the route changes (stopTail) or the stream ends
}

async function followTail(s) {
  // One chunked GET replays the last entries, then stays open for new ones. When it
  // ends without the stream having been deleted (a proxy's idle timeout, a node
  // restart), it is opened again from the next index: no entry lost or repeated.
  stopTail();
  const ctrl = new AbortController();
  tailAbort = ctrl;
  const live = () => tailAbort === ctrl;
  const state = (text) => { const el = $("#tail-state"); if (el && live()) el.textContent = text; };
  const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  let next = null;  // the index after the last row shown
  let failures = 0;
  while (live()) {
    try {
      const from = next === null ? `tail=${TAIL_ENTRIES}` : `i=${next}`;
      const r = await fetch(`/v2/streams/${s}?${from}&format=jsonl`, {headers: authHeaders({}), signal: ctrl.signal});
      if (r.status === 404 || r.status === 401 || r.status === 403) {
        state("ended");
        throw new Error("tail: HTTP " + r.status);
      }
      if (r.ok) {
        state("live");
        failures = 0;
        const reader = r.body.getReader(), dec = new TextDecoder();
        let buf = "";
        for (;;) {
          const {value, done} = await reader.read();
          if (done) break;
          buf += dec.decode(value, {stream: true});
          let nl;
          while ((nl = buf.indexOf("\n")) >= 0) {
            next = tailRow(buf.slice(0, nl)) + 1;
            buf = buf.slice(nl + 1);
          }
        }
      }
    } catch (e) {
      if (e.name === "AbortError") return;
      if (String(e.message).startsWith("tail: HTTP 4")) { showError(e); return; }
      // A network error (the node restarting): try again below.
    }
    if (!live()) return;
    const gone = await api("GET", "/v2/streams/" + s + "/schema").then(() => false, (e) => String(e.message).startsWith("stream_not_found"));
    if (gone) { state("ended: the stream was deleted"); return; }
    failures += 1;
    state("reconnecting…");
    await pause(Math.min(500 * failures, 5000));
  }
}

function tailRow(line) {
  // jsonl: {"index": i, "order": k} TAB entry
  const tab = line.indexOf("\t");
  const head = JSON.parse(line.slice(0, tab));
  const body = $("#tail tbody");
  if (!body) return head.index;
  const tr = document.createElement("tr");
  tr.innerHTML = `<td class="num">${head.index}</td><td class="num">${head.order}</td><td class="body">${esc(line.slice(tab + 1))}</td>`;
  body.appendChild(tr);
  while (body.rows.length > TAIL_KEEP) body.deleteRow(0);
  $("#stream-size").textContent = String(head.index + 1);
  return head.index;
}
