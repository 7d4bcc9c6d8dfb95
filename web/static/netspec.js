// netspec's results browser: draws a page's panels with plotly.js from the server's JSON (or,
// in a report, from the JSON the page carries), and marks the page ready once every panel drew.
"use strict";
const netspec = (() => {
  const config = {responsive: true, displaylogo: false};
  const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  const json = (id) => { const el = document.getElementById(id); return el ? JSON.parse(el.textContent) : null; };
  const page = json("page") || {};
  // A report carries its panels' data and plotly.js packed (web/pages.py `packed`): gzip in
  // base 85, inflated here by the browser's DecompressionStream, with nothing fetched.
  let embedded = null;
  async function unpack(el, alphabet) {
    const text = el.textContent.trim(), pad = Number(text[0]), value = new Uint8Array(128);
    for (let i = 0; i < alphabet.length; i++) value[alphabet.charCodeAt(i)] = i;
    const groups = (text.length - 1) / 5, bytes = new Uint8Array(groups * 4);
    for (let g = 0, at = 1; g < groups; g++, at += 5) {
      let word = 0;
      for (let k = 0; k < 5; k++) word = word * 85 + value[text.charCodeAt(at + k)];
      bytes[g * 4] = word >>> 24; bytes[g * 4 + 1] = (word >>> 16) & 255; bytes[g * 4 + 2] = (word >>> 8) & 255; bytes[g * 4 + 3] = word & 255;
    }
    const stream = new Blob([bytes.subarray(0, bytes.length - pad)]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text();
  }
  async function loadReport() {
    const lib = document.getElementById("plotly-packed");
    if (!lib) return;
    const alphabet = lib.dataset.alphabet;
    const [code, data] = await Promise.all([unpack(lib, alphabet), unpack(document.getElementById("panels-packed"), alphabet)]);
    embedded = JSON.parse(data);
    // the page's parts that grow with its hosts, written back where they were packed (pages.py `packed_html`)
    for (const el of [...document.querySelectorAll("script.packed-html")]) {
      el.insertAdjacentHTML("beforebegin", await unpack(el, alphabet));
      el.remove();
    }
    if (!window.Plotly) (0, eval)(code);  // plotly.js, as a classic script would run it
  }

  async function panel(name, query = "") {
    if (embedded) {
      if (!(name in embedded)) throw new Error(`this report does not carry the ${name} panel`);
      return embedded[name];
    }
    const url = `/api/run/${page.ref}/${name}${query}`;
    // A GET the network cut is asked once more (it changes nothing on the server): a change of
    // the machine's interfaces aborts every request in flight, 127.0.0.1's too (Chromium's
    // ERR_NETWORK_CHANGED), as a laptop's new network or a container started beside does.
    const response = await fetch(url).catch(() => fetch(url));
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || response.statusText);
    return body;
  }

  function problem(id, error) {
    const el = document.getElementById(id);
    if (el) el.innerHTML = `<p class="problem">${esc(error.message || error)}</p>`;
  }

  function table(rows, columns, limit = Infinity) {
    // Past `limit` rows the rest are hidden until the user asks (a fleet's 300 rows are not the first screen's).
    if (!rows.length) return "<p class='empty'>none</p>";
    const head = columns.map(([, title]) => `<th>${esc(title)}</th>`).join("");
    const body = rows.map((r, i) => `<tr${i >= limit ? " hidden class='more'" : ""}>` + columns.map(([key]) => `<td>${esc(r[key])}</td>`).join("") + "</tr>").join("");
    const more = rows.length > limit ? `<button type="button" class="show-more" onclick="this.previousElementSibling.querySelectorAll('tr.more').forEach((r) => { r.hidden = false; }); this.remove()">show all ${rows.length} rows</button>` : "";
    return `<table><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>${more}`;
  }

  // The page's state in its URL (after '#'): the events' filters, the timeline's expanded
  // groups and the shared zoom; a reload or a shared link restores it.
  const state = new URLSearchParams(location.hash.slice(1));
  function saveState() { history.replaceState(null, "", "#" + state.toString()); }
  const TABLE_ROWS = 12;

  // Grafana's shared time range: the panels whose x axis is the global timeline (ms since the
  // first start) zoom together, and the range is kept in the URL.
  const SHARED = ["timeline", "busy", "clocks", "operations", "packets"];
  const fixed = (v) => (+v).toFixed(3);
  function shareZoom(id) {
    const el = document.getElementById(id);
    if (!el || !el.on || el.dataset.shared) return;
    el.dataset.shared = "yes";
    el.on("plotly_relayout", (e) => {
      const range = e["xaxis.range[0]"] !== undefined ? [e["xaxis.range[0]"], e["xaxis.range[1]"]]
        : e["xaxis.range"] ? e["xaxis.range"] : null;
      if (!range && !e["xaxis.autorange"]) return;
      // the others' own relayout, echoing the range this one set, changes nothing
      if (range ? state.get("x0") === fixed(range[0]) && state.get("x1") === fixed(range[1]) : !state.has("x0")) return;
      if (range) { state.set("x0", fixed(range[0])); state.set("x1", fixed(range[1])); }
      else { state.delete("x0"); state.delete("x1"); }
      saveState();
      zoomAll(id);
    });
  }
  function zoomAll(except) {
    const zoomed = state.has("x0");
    const range = zoomed ? [Number(state.get("x0")), Number(state.get("x1"))] : null;
    for (const id of SHARED) {
      const el = document.getElementById(id);
      if (id === except || !el || !el.data || !el.layout) continue;
      const now = el.layout.xaxis && el.layout.xaxis.range;
      if (zoomed && now && fixed(now[0]) === fixed(range[0]) && fixed(now[1]) === fixed(range[1])) continue;
      if (!zoomed && el.layout.xaxis && el.layout.xaxis.autorange) continue;
      Plotly.relayout(el, zoomed ? {"xaxis.range": range} : {"xaxis.autorange": true});
    }
  }

  function plot(id, figure) {
    const el = document.getElementById(id);
    if (!el) return;
    if (!figure) { el.innerHTML = "<p class='empty'>nothing to draw</p>"; return; }
    // The container holds the figure's height: a responsive plot takes its container's size,
    // and a container of no height of its own would shrink it to nothing on a resize.
    if (figure.layout && figure.layout.height) el.style.height = `${figure.layout.height}px`;
    fitted.observe(el);
    return Plotly.react(el, figure.data, figure.layout, config);
  }

  // A plot follows its container's width whatever changed it (the window, a scroll bar that
  // came with a taller page, a section opened), not only the window's resize plotly.js hears.
  const widths = new WeakMap();
  const fitted = new ResizeObserver((entries) => {
    for (const e of entries) {
      const width = Math.round(e.contentRect.width);
      if (widths.get(e.target) === width) continue;
      const first = !widths.has(e.target);
      widths.set(e.target, width);
      if (!first && e.target.layout && width > 0) Plotly.Plots.resize(e.target);
    }
  });

  async function unclutter(id) {
    // Every step's name over the timeline, each as drawn: a name that would run into one to
    // its left goes up a row, and the top margin grows to hold the rows.
    const el = document.getElementById(id);
    if (!el || !el.layout || !(el.layout.annotations || []).length) return;
    const names = el.layout.annotations;
    const base = el.dataset.marginTop ? Number(el.dataset.marginTop) : (el.layout.margin || {}).t || 40;
    el.dataset.marginTop = base;
    const height = el.dataset.baseHeight ? Number(el.dataset.baseHeight) : el.layout.height || el.clientHeight;
    el.dataset.baseHeight = height;
    // (a relayout of the height turns autosize off: it stays on, the width follows the window)
    const flat = {"margin.t": base, height, autosize: true};
    names.forEach((_, i) => { flat[`annotations[${i}].yshift`] = 0; });
    await Plotly.relayout(el, flat);
    const boxes = [...el.querySelectorAll(".annotation")].map((a) => a.getBoundingClientRect());
    if (boxes.length !== names.length) return;
    const rowPx = Math.ceil(Math.max(...boxes.map((b) => b.height))) + 2;
    const order = names.map((a, i) => i).sort((i, j) => boxes[i].left - boxes[j].left);
    const rowEnds = [];
    const shift = {};
    for (const i of order) {
      let row = rowEnds.findIndex((end) => boxes[i].left >= end + 4);
      if (row < 0) { row = rowEnds.length; rowEnds.push(0); }
      rowEnds[row] = boxes[i].right;
      shift[`annotations[${i}].yshift`] = row * rowPx;
    }
    // the rows of names take room of their own: the plot keeps its height below them
    const extra = (rowEnds.length - 1) * rowPx;
    shift["margin.t"] = base + extra;
    shift.height = height + extra;
    shift.autosize = true;
    el.style.height = `${height + extra}px`;
    if (rowEnds.length > 1) await Plotly.relayout(el, shift);
    else el.style.height = `${height}px`;
  }

  async function drawTimeline(figure) {
    await plot("timeline", figure);
    await unclutter("timeline");
  }

  const notMerged = page.merging ? "<p class='empty merging'>merging: the run's controller is writing its result set; this page reloads once it is there</p>"
    : `<p class='empty'>no result set: merge the run first (ns_control fetch ${esc(page.id || "")})</p>`;
  // A table the merge always writes, absent from the result set: named, with how to write it again.
  const missing = (data) => data && data.missing
    ? `<p class="problem missing">${esc(data.missing.replace("RUN", page.id || "RUN"))}</p>` : "";

  async function clocks() {
    const data = await panel("clocks");
    if (data.merged === false) { document.getElementById("clocks").innerHTML = notMerged; return; }
    if (data.missing) { document.getElementById("clocks").innerHTML = missing(data); return; }
    await plot("clocks", data.figure);
    document.getElementById("clocks-table").innerHTML = table(data.rows,
      [["host", "host"], ["reference", "reference"], ["knots", "fit knots"], ["worst_bound", "worst bound"], ["timestamps", "timestamps"]], TABLE_ROWS);
  }

  async function links() {
    const data = await panel("links");
    if (data.merged === false) { document.getElementById("links").innerHTML = notMerged; return; }
    await plot("links", data.figure);
    document.getElementById("links-table").innerHTML = table(data.rows,
      [["link", "link"], ["phase", "phase"], ["configured", "configured"], ["delay", "delay p50 / p99 ± bound"],
       ["jitter", "jitter"], ["loss", "loss [95 %]"], ["probes", "probes"], ["verdict", "verdict"]]);
  }

  async function operations() {
    const data = await panel("operations");
    if (data.merged === false) { document.getElementById("operations").innerHTML = notMerged; return; }
    if (data.figure) await plot("operations", data.figure);
    else document.getElementById("operations").innerHTML = "<p class='empty'>no operations logged</p>";
    document.getElementById("operations-sampled").textContent = data.sampled ? `drawn: ${data.sampled} (the table counts every one)` : "";
    document.getElementById("operations-table").innerHTML = table(data.rows,
      [["step", "#"], ["phase", "phase"], ["component", "component"], ["name", "operation"], ["count", "count"],
       ["rate", "rate"], ["ok", "ok"], ["failed", "failed"], ["causes", "failures by cause"],
       ["ok_latency", "latency of successes"], ["failed_latency", "latency of failures"],
       ["no_success", "longest without a success"], ["lag", "pacer lag"]], TABLE_ROWS);
  }

  async function packets() {
    const data = await panel("packets");
    if (data.merged === false) { document.getElementById("packets").innerHTML = notMerged; return; }
    if (data.figure) await plot("packets", data.figure);
    else document.getElementById("packets").innerHTML = "<p class='empty'>no packets captured</p>";
    document.getElementById("packets-sampled").textContent = data.sampled ? `drawn: ${data.sampled} (the table counts every one)` : "";
    document.getElementById("packets-table").innerHTML = data.rows.length ? table(data.rows,
      [["link", "link"], ["phase", "phase"], ["sent", "sent"], ["matched", "matched"], ["lost", "lost"],
       ["outside", "outside the receiver's capture"], ["unmatched", "received unmatched"],
       ["one_way", "one way, kernel to kernel"]], TABLE_ROWS) : "";
    document.getElementById("packets-splits").innerHTML = data.splits.length ? table(data.splits,
      [["pair", "pair"], ["link", "link"], ["phase", "phase"], ["carried", "carried by a packet"],
       ["user", "user level"], ["sender", "sender"], ["network", "network"], ["receiver", "receiver"]], TABLE_ROWS) : "";
  }

  async function resources() {
    const data = await panel("resources");
    if (data.merged === false) { document.getElementById("busy").innerHTML = notMerged; return; }
    document.getElementById("resource-caveats").innerHTML = missing(data) + (data.caveats || []).map((c) => `<p class="note caveat">${esc(c)}</p>`).join("");
    await plot("busy", data.busy);
    const box = document.getElementById("heatmaps");
    box.innerHTML = data.heatmaps.map((_, i) => `<div class="plot heatmap" id="heatmap-${i}"></div>`).join("");
    await Promise.all(data.heatmaps.map((f, i) => plot(`heatmap-${i}`, f)));
  }

  // Latency plots read on a log x axis on request (a shift of a median by a quarter shows
  // there where a linear axis squeezes it against the tail); kept in the URL as `logx`.
  function logToggle(box, ids) {
    box.insertAdjacentHTML("afterbegin", `<p class="controls"><label class="logx"><input type="checkbox" class="logx"${state.get("logx") ? " checked" : ""}> log x axis</label></p>`);
    const input = box.querySelector("input.logx");
    const apply = () => Promise.all(ids.map((id) => {
      const el = document.getElementById(id);
      return el && el.layout ? Plotly.relayout(el, {"xaxis.type": input.checked ? "log" : "linear", "xaxis.autorange": true}) : null;
    }));
    input.addEventListener("change", () => {
      if (input.checked) state.set("logx", "1"); else state.delete("logx");
      saveState();
      apply();
    });
    return input.checked ? apply() : null;
  }

  async function distributions() {
    const data = await panel("distributions");
    const box = document.getElementById("distributions");
    if (data.merged === false) { box.innerHTML = notMerged; return; }
    if (data.missing) { box.innerHTML = missing(data); return; }
    if (!data.length) { box.innerHTML = "<p class='empty'>no intervals or pairs in this run</p>"; return; }
    box.innerHTML = data.map((d, i) => `<h3>${esc(d.name)} <small>${d.count} values, p50 ${esc(d.p50_text)},
      p99 ${esc(d.p99_text)}, max ${esc(d.max_text)}; a colour per host (where each started)${d.hosts > d.hosts_shown.length ? `; ${d.hosts} hosts in ${d.hosts_shown.length} colours: the slowest apart, the others by group` : ""}</small></h3>
      <p class="help">The histogram's ${d.histogram.data.length ? d.histogram.data[0].x.length : 0} bars span p0.1 to p99.9${d.tail ? `: its end bars hold the rest (${esc(d.tail)})` : " (every value within them)"}; the ECDF runs from the min (${esc(d.min_text)}) to the max.</p>
      <div class="grid"><div class="plot histogram" id="hist-${i}"></div><div class="plot ecdf" id="ecdf-${i}"></div></div>`).join("");
    await Promise.all(data.flatMap((d, i) => [plot(`hist-${i}`, d.histogram), plot(`ecdf-${i}`, d.ecdf)]));
    await logToggle(box, data.flatMap((d, i) => [`hist-${i}`, `ecdf-${i}`]));
  }

  const EVENTS_PAGE = 25;
  let eventsOffset = Number(state.get("offset")) || 0;
  function eventQuery() {
    const form = new FormData(document.getElementById("event-filter"));
    const params = new URLSearchParams();
    for (const [k, v] of form) { if (v) params.set(k, v); if (v) state.set(k, v); else state.delete(k); }
    params.set("offset", eventsOffset);
    params.set("limit", EVENTS_PAGE);
    if (eventsOffset) state.set("offset", eventsOffset); else state.delete("offset");
    saveState();
    return params;
  }

  function glob(pattern) {
    // The server's match of an entity (panels.events): the whole name, case aside, `*` any run.
    const parts = pattern.split("*").map((p) => p.replace(/[.+?^${}()|[\]\\]/g, "\\$&"));
    return new RegExp(`^${parts.join(".*")}$`, "is");
  }

  function filterEmbedded(data, params) {
    // A report carries a sample of the events; it filters them here as the server filters
    // them all (panels.events): host and component whole, entity a whole name with `*`,
    // text within the entity or data or the value itself.
    const text = (params.get("text") || "").toLowerCase(), entity = params.get("entity") ? glob(params.get("entity")) : null;
    const number = text.trim() !== "" && !Number.isNaN(Number(text)) ? Number(text) : null;
    const rows = data.rows.filter((r) =>
      (!params.get("host") || r.host === params.get("host")) &&
      (!params.get("component") || r.component === params.get("component")) &&
      (!entity || entity.test(r.entity || "")) &&
      (!params.get("tag") || String(r.tag) === params.get("tag")) &&
      (!params.get("since") || r.ms >= Number(params.get("since"))) &&
      (!params.get("until") || r.ms <= Number(params.get("until"))) &&
      (!text || (r.entity || "").toLowerCase().includes(text) || (r.data || "").toLowerCase().includes(text) ||
       (number !== null && r.value === number)));
    const offset = Number(params.get("offset")) || 0;
    return {total: rows.length, offset, limit: EVENTS_PAGE, rows: rows.slice(offset, offset + EVENTS_PAGE),
            carried: data.rows.length, of: data.total, sample: data.sample};
  }

  async function events() {
    const params = eventQuery();
    let data = embedded ? filterEmbedded(await panel("events"), params) : await panel("events", "?" + params);
    const box = document.getElementById("events");
    if (data.merged === false) { box.innerHTML = notMerged; return; }
    if (data.missing) { box.innerHTML = missing(data); document.getElementById("events-page").textContent = ""; return; }
    box.innerHTML = table(data.rows, [["ms", "ms"], ["bound_us", "± us"], ["host", "host"], ["component", "component"],
      ["entity", "entity"], ["kind", "kind"], ["tag", "tag"], ["value_text", "value (an interval's: its duration)"], ["data", "data"]]);
    const last = Math.min(data.offset + data.rows.length, data.total);
    document.getElementById("events-page").textContent = data.total ?
      `${data.offset + 1}-${last} of ${data.total}` + (data.carried !== undefined ? ` (of the ${data.carried} this report carries of the run's ${data.of}: ${data.sample}; events.parquet has them all)` : "") :
      "no events match" + (data.carried !== undefined ? ` among the ${data.carried} this report carries of the run's ${data.of} (${data.sample}; events.parquet has them all)` : "");
    document.getElementById("events-prev").disabled = data.offset <= 0;
    document.getElementById("events-next").disabled = last >= data.total;
  }

  const expanded = () => (state.get("expand") || "").split(",").filter(Boolean);
  function timelineQuery() { return expanded().length ? "?expand=" + encodeURIComponent(expanded().join(",")) : ""; }

  async function timeline() {
    const figure = embedded ? await panel("timeline") : await panel("timeline", timelineQuery());
    await drawTimeline(figure);
    if (state.has("x0")) zoomAll(null);
  }

  async function phases() {
    const box = document.getElementById("phases");
    if (!box) return;
    const data = await panel("phases");
    if (data.merged === false) { box.innerHTML = notMerged; return; }
    if (data.missing) { box.innerHTML = missing(data); return; }
    box.innerHTML = (data.notes || []).map((c) => `<p class="note caveat">${esc(c)}</p>`).join("") +
      table(data.rows, [["step", "#"], ["phase", "phase"], ["took", "span (first entered to last ack)"], ["ok", "ok"],
      ["cpu", "CPUs a host: mean / max (busiest)"], ["net", "network, every machine (one hosts share counted once)"],
      ["latency", "latency of intervals ending in it"]]);
  }

  function afterDraw() {
    for (const id of SHARED) shareZoom(id);
    if (state.has("x0")) zoomAll(null);
  }

  async function triage() {
    const box = document.getElementById("triage");
    if (!box) return;
    const data = await panel("triage");
    if (!data.failures.length) { box.innerHTML = "<p class='empty'>no participant failed; the run's error above says why it ended</p>"; return; }
    box.innerHTML = data.failures.map((f, i) => {
      const around = (data.around || [])[i] || {};
      const hosts = Object.keys(around).sort();
      const rows = hosts.map((h, k) => {
        const a = around[h];
        const last = (a.events || []).map((e) => `${e.ms} ms ${esc(e.component)} ${esc(e.entity)} ${esc(e.data ?? "")}`).join("<br>");
        return `<tr${k >= TABLE_ROWS ? " hidden class='more'" : ""}><td>${esc(h)}</td><td>${esc(a.phase || "")}</td><td>${last || "-"}</td><td>${esc(a.cpu_busy || "-")}</td><td>${esc(a.net || "-")}</td></tr>`;
      }).join("");
      const who = `${esc(f.host)}${f.component ? "/" + esc(f.component) : ""}`;
      const h = f.hang;
      const lead = h ? `<div class="hang-lead"><h3>${who} ${esc(h.deadline)}</h3>
        <p class="life"><b>last sign of life</b>: ${h.last_event ? `its last event ${esc(h.last_event.entity)} tag ${esc(h.last_event.tag)}${h.last_event.data ? " " + esc(h.last_event.data) : ""}, ${esc(h.last_event.before_deadline)} before the deadline` : "no event of its own"};
        its last lines of output: stdout <code>${esc(h.last_output.stdout) || "(none)"}</code>, stderr <code>${esc(h.last_output.stderr) || "(none)"}</code></p>
        <p class="then">then: ${esc(f.message)}</p></div>`
        : `<h3>${who} ${esc(f.outcome)} in ${esc(f.phase)} (step ${f.step})</h3><p>${esc(f.message)}</p>`;
      return `<div class="failure ${h ? "hang" : "exception"}">${i ? `<details><summary>${who} ${esc(h ? "missed its deadline" : f.outcome)} in ${esc(f.phase)} (step ${f.step})</summary>` : ""}${lead}
        ${f.traceback ? `<pre class="traceback">${esc(f.traceback)}</pre>` : ""}
        <details class="output"${h ? "" : " open"}><summary>its last lines of output</summary>
        <h4>last lines of stdout</h4><pre class="stdout">${esc(f.output.stdout) || "(empty)"}</pre>
        <h4>last lines of stderr</h4><pre class="stderr">${esc(f.output.stderr) || "(empty)"}</pre></details>
        ${Object.keys(around).length ? `<details class="around"${hosts.length > TABLE_ROWS ? "" : " open"}><summary>every host within a second of the failure (its instant is 0 ms): ${hosts.length}</summary><table class="around"><thead><tr><th>host</th><th>phase</th><th>its last events before</th><th>CPU busy</th><th>network</th></tr></thead><tbody>${rows}</tbody></table>${hosts.length > TABLE_ROWS ? `<button type="button" class="show-more" onclick="this.previousElementSibling.querySelectorAll('tr.more').forEach((r) => { r.hidden = false; }); this.remove()">show all ${hosts.length} hosts</button>` : ""}</details>`
                       : ""}${data.merged ? "" : page.merging ? "<p class='empty'>merging: the hosts' events and counters come once the result set is written</p>" : "<p class='empty'>no result set: merge the run for the hosts' events and counters</p>"}${i ? "</details>" : ""}</div>`;
    }).join("");
  }

  function markReady() {
    performance.mark("netspec-ready");
    document.body.dataset.ready = "yes";
  }

  let drawing = 0;  // panels being fetched and drawn now (the page's `data-drawing`, for a bench or a test)
  async function settle(tasks) {
    const names = Object.keys(tasks);
    drawing += names.length;
    document.body.dataset.drawing = drawing;
    const results = await Promise.allSettled(names.map((n) => tasks[n]()));
    results.forEach((r, i) => { if (r.status === "rejected") { console.warn(names[i], r.reason); problem(names[i], r.reason); } });
    drawing -= names.length;
    document.body.dataset.drawing = drawing;
  }

  function stepRows(steps) {
    return steps.map((s) => `<tr class="step ${esc(s.status)}"><td>${s.step}</td><td>${esc(s.phase)}</td>
      <td><span class="status ${esc(s.status)}">${esc(s.status)}</span></td><td>${esc(s.took)}</td><td>${esc(s.release)}</td>
      <td>${esc(s.skew)}</td><td>${esc(s.skew_at_most)}</td><td>${esc(s.outcomes)}</td><td>${esc(s.slowest)}</td><td>${esc(s.troubles)}</td>
      <td class="messages">${(s.messages || []).map((m) => `<div>${esc(m)}</div>`).join("")}</td></tr>`).join("");
  }

  function follow() {
    // A run in progress, or one whose merge is under way: redraw its timeline and steps as
    // they complete, and reload once it ended and its result set is there (or will not be).
    let busy = false;
    const timer = setInterval(async () => {
      if (busy) return;
      busy = true;
      try {
        const live = await panel("live", timelineQuery());
        if (live.status !== page.status || live.merged !== page.merged || !live.follow) {
          clearInterval(timer); location.reload(); return;
        }
        document.querySelector("#steps tbody").innerHTML = stepRows(live.steps);
        await drawTimeline(live.timeline);
        document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
      } catch (error) { problem("live", error); } finally { busy = false; }
    }, 1000);
  }

  async function run() {
    await loadReport();
    document.getElementById("event-filter").addEventListener("submit", (e) => { e.preventDefault(); eventsOffset = 0; events().catch((x) => problem("events", x)); });
    document.getElementById("events-prev").addEventListener("click", () => { eventsOffset = Math.max(0, eventsOffset - EVENTS_PAGE); events(); });
    document.getElementById("events-next").addEventListener("click", () => { eventsOffset += EVENTS_PAGE; events(); });
    const form = document.getElementById("event-filter");
    for (const el of form.elements) if (el.name && state.get(el.name)) el.value = state.get(el.name);
    document.querySelectorAll("#fold .expand").forEach((b) => {
      b.classList.toggle("on", expanded().includes(b.dataset.group));
      b.addEventListener("click", () => {
        const now = expanded(), g = b.dataset.group;
        const next = now.includes(g) ? now.filter((x) => x !== g) : [...now, g];
        if (next.length) state.set("expand", next.join(",")); else state.delete("expand");
        saveState();
        b.classList.toggle("on", next.includes(g));
        timeline().catch((x) => problem("timeline", x));
      });
    });
    // A section the page folds (a fleet's: details closed) draws when the user opens it; the
    // open ones are kept in the URL.
    const opened = (state.get("open") || "").split(",").filter(Boolean);
    const tasks = {timeline, phases, operations, packets, triage, clocks, links, resources, distributions, events};
    const later = {};
    for (const d of document.querySelectorAll("details.panel")) {
      if (opened.includes(d.id)) d.open = true;
      const names = (d.dataset.panels || "").split(",").filter(Boolean);
      if (!d.open) for (const n of names) { later[n] = tasks[n]; delete tasks[n]; }
      d.addEventListener("toggle", async () => {
        const now = new Set((state.get("open") || "").split(",").filter(Boolean));
        if (d.open) now.add(d.id); else now.delete(d.id);
        if (now.size) state.set("open", [...now].join(",")); else state.delete("open");
        saveState();
        const due = Object.fromEntries(names.filter((n) => later[n]).map((n) => [n, later[n]]));
        names.forEach((n) => delete later[n]);
        if (d.open && Object.keys(due).length) { await settle(due); afterDraw(); }
      });
    }
    await settle(tasks);
    afterDraw();
    let resized = null;
    window.addEventListener("resize", () => { clearTimeout(resized); resized = setTimeout(() => unclutter("timeline"), 150); });
    markReady();
    if (page.follow && !embedded) follow();
  }

  function index() {
    const rows = [...document.querySelectorAll("#runs tbody tr")];
    document.getElementById("filter").addEventListener("input", (e) => {
      const words = e.target.value.toLowerCase().split(/\s+/).filter(Boolean);
      for (const r of rows) r.hidden = !words.every((w) => r.textContent.toLowerCase().includes(w));
    });
    document.querySelectorAll("#runs th[data-key]").forEach((th) => th.addEventListener("click", () => {
      const key = th.dataset.key, numeric = th.dataset.type === "number";
      const down = th.dataset.dir !== "down";
      th.dataset.dir = down ? "down" : "up";
      rows.sort((a, b) => {
        const x = a.dataset[key], y = b.dataset[key];
        const c = numeric ? Number(x) - Number(y) : x.localeCompare(y);
        return down ? -c : c;
      });
      const body = document.querySelector("#runs tbody");
      rows.forEach((r) => body.appendChild(r));
    }));
    const button = document.getElementById("compare");
    const picked = () => [...document.querySelectorAll(".pick:checked")].map((c) => c.value);
    document.querySelectorAll(".pick").forEach((c) => c.addEventListener("change", () => { button.disabled = picked().length !== 2; }));
    button.addEventListener("click", () => {
      const [a, b] = picked();
      location.href = `/compare?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`;
    });
    markReady();
  }

  async function campaign() {
    document.querySelectorAll(".open-runs").forEach((b) => b.addEventListener("click", () => {
      const row = document.getElementById(b.dataset.target);
      row.hidden = !row.hidden;
    }));
    await Promise.all((page.lines || []).map((l, i) => plot(`line-${i + 1}`, l.figure)));
    markReady();
  }

  async function compare() {
    await Promise.all((page.ecdfs || []).map((f, i) => plot(`ecdf-${i + 1}`, f)));
    const box = document.getElementById("compare-distributions");
    if (box) await logToggle(box.parentElement.insertBefore(document.createElement("div"), box), (page.ecdfs || []).map((f, i) => `ecdf-${i + 1}`));
    markReady();
  }

  return {run, index, campaign, compare, plain: markReady};
})();
