// The search page: one search bar over the namespace, results grouped by source type (the
// hit's section) with provenance and excerpts, deal filters, and the generation that answered.
"use strict";

const $ = (id) => document.getElementById(id);
let last = null; // the request of the shown results, for "More results"

$("api-key").value = sessionStorage.getItem("corpus-api-key") || "";

function filters() {
  const f = {};
  const raw = $("f-json").value.trim();
  if (raw) {
    try {
      Object.assign(f, JSON.parse(raw));
    } catch (e) {
      throw new Error("More filters is not valid JSON: " + e.message);
    }
  }
  const v = (id) => $(id).value.trim();
  if (v("f-asset-class")) f.asset_class = v("f-asset-class");
  const geo = {};
  if (v("f-state")) geo.state = v("f-state");
  if (v("f-metro")) geo.metro = v("f-metro");
  if (Object.keys(geo).length) f.geo = geo;
  if (v("f-units-lo") || v("f-units-hi"))
    f.size_units_range = [Number(v("f-units-lo") || 0), Number(v("f-units-hi") || 1e9)];
  if (v("f-date-lo") || v("f-date-hi"))
    f.date_range = [v("f-date-lo") || "0001-01-01", v("f-date-hi") || "9999-12-31"];
  return Object.keys(f).length ? f : null;
}

// A new search's results replace the shown ones, so a search that fails leaves none of the
// earlier search's results (nor its "More results") beside its problem
function clearResults() {
  $("results").replaceChildren();
  $("more").hidden = true;
  delete $("status").dataset.generation;
  last = null;
}

function showProblem(text) {
  $("problem").textContent = text;
  $("problem").hidden = false;
}

async function run(body, append) {
  $("problem").hidden = true;
  const key = $("api-key").value.trim();
  sessionStorage.setItem("corpus-api-key", key);
  const ns = encodeURIComponent($("namespace").value.trim());
  $("status").textContent = "Searching…";
  let resp;
  try {
    resp = await fetch(`/v1/namespaces/${ns}/search`, {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: "Bearer " + key },
      body: JSON.stringify(body),
    });
  } catch (e) {
    $("status").textContent = "";
    showProblem("The server could not be reached: " + e.message);
    return;
  }
  let doc;
  try {
    doc = await resp.json();
  } catch {
    // not the API's answer: a proxy's or gateway's own page (a 502's HTML, say)
    $("status").textContent = "";
    const status = resp.statusText ? `${resp.status} ${resp.statusText}` : `${resp.status}`;
    const type = resp.headers.get("Content-Type") || "no content type";
    showProblem(
      `The server's answer (${status}, ${type}) is not a search result: ` +
        "the server, or a proxy before it, may be down or restarting",
    );
    return;
  }
  if (!resp.ok) {
    $("status").textContent = "";
    showProblem(`${doc.title || "Error"} (${resp.status}): ${doc.detail || ""}`);
    return;
  }
  last = { ...body, cursor: doc.next_cursor };
  render(doc, append);
}

function render(doc, append) {
  const results = $("results");
  if (!append) results.replaceChildren();
  const shown = results.querySelectorAll(".hit").length + doc.hits.length;
  $("status").textContent =
    `${shown} hit${shown === 1 ? "" : "s"} from generation ${doc.generation} ` +
    `(${doc.trace.mode}, ${Math.round(doc.trace.total_ms)} ms, request ${doc.request_id})`;
  $("status").dataset.generation = doc.generation;
  for (const hit of doc.hits) {
    const type = hit.section || "other";
    let group = results.querySelector(`section[data-type="${CSS.escape(type)}"]`);
    if (!group) {
      group = document.createElement("section");
      group.dataset.type = type;
      const h = document.createElement("h2");
      h.textContent = type.replaceAll("_", " ");
      group.append(h);
      results.append(group);
    }
    const div = document.createElement("div");
    div.className = "hit";
    const title = document.createElement("strong");
    title.textContent = `${hit.source_id}  (${hit.score.toFixed(3)})`;
    const ex = document.createElement("div");
    ex.className = "excerpt";
    ex.textContent = hit.excerpt;
    const p = hit.provenance;
    const prov = document.createElement("div");
    prov.className = "prov";
    prov.textContent = `${p.chunk_ref} · ${p.content_hash.slice(0, 19)}… · ${p.backend_spec} · ` +
      `${p.generation} · run ${p.run_id.slice(0, 8)}`;
    div.append(title, ex, prov);
    group.append(div);
  }
  $("more").hidden = !doc.next_cursor;
}

$("search-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  clearResults();
  let f;
  try {
    f = filters();
  } catch (e) {
    showProblem(e.message);
    return;
  }
  const body = { query: $("query").value, mode: $("mode").value, k: Number($("k").value) };
  if (f) body.filters = f;
  run(body, false);
});

$("more").addEventListener("click", () => {
  if (last && last.cursor) run(last, true);
});
