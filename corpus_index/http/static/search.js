// The search page: one search bar over the namespace, results grouped by source type (the
// hit's section) with provenance and excerpts, deal filters, and the generation that answered.
// On a namespace of linked groups (messages) the results are group-first: a card per
// conversation, incident, day... with its members in order, and a participant's name opens
// everything about that person. Every read is the API's, as the key's principal.
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
  $("results").hidden = false;
  $("person").hidden = true;
  for (const id of ["person-roles", "person-partners", "person-contexts"]) $(id).replaceChildren();
  $("more").hidden = true;
  delete $("status").dataset.generation;
  last = null;
}

function showProblem(text) {
  $("problem").textContent = text;
  $("problem").hidden = false;
}

function apiKey() {
  const key = $("api-key").value.trim();
  sessionStorage.setItem("corpus-api-key", key);
  return key;
}

function namespacePath() {
  return `/v1/namespaces/${encodeURIComponent($("namespace").value.trim())}`;
}

// The API's answer to one request as the key's principal, or null once its problem is shown
async function ask(path, init, what) {
  $("problem").hidden = true;
  const headers = { Authorization: "Bearer " + apiKey(), ...(init.headers || {}) };
  $("status").textContent = what === "person" ? "Reading…" : "Searching…";
  let resp;
  try {
    resp = await fetch(path, { ...init, headers });
  } catch (e) {
    $("status").textContent = "";
    showProblem("The server could not be reached: " + e.message);
    return null;
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
      `The server's answer (${status}, ${type}) is not a ${what}: ` +
        "the server, or a proxy before it, may be down or restarting",
    );
    return null;
  }
  if (!resp.ok) {
    $("status").textContent = "";
    showProblem(`${doc.title || "Error"} (${resp.status}): ${doc.detail || ""}`);
    return null;
  }
  return doc;
}

function post(body) {
  return { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
}

async function run(body, append) {
  const doc = await ask(`${namespacePath()}/search`, post(body), "search result");
  if (!doc) return;
  last = { ...body, cursor: doc.next_cursor };
  render(doc, append);
}

// Whether the namespace holds linked groups, as the key's namespaces say; a key the API
// refuses is left to the search itself to report
async function groupFirst() {
  const view = $("view").value;
  if (view !== "auto") return view === "groups";
  try {
    const resp = await fetch("/v1/namespaces", { headers: { Authorization: "Bearer " + apiKey() } });
    if (!resp.ok) return false;
    const mine = await resp.json();
    const ns = $("namespace").value.trim();
    return mine.some((n) => n.name === ns && n.linked_groups);
  } catch {
    return false;
  }
}

async function runGroups(body) {
  const doc = await ask(`${namespacePath()}/groups/search`, post(body), "search result");
  if (!doc) return;
  const results = $("results");
  results.replaceChildren();
  const records = Object.values(doc.results).flat();
  const gen = doc.trace.generation;
  $("status").textContent =
    `${records.length} context${records.length === 1 ? "" : "s"} from generation ${gen} ` +
    `(group-first, ${doc.trace.mode || body.mode}, request ${doc.request_id})`;
  $("status").dataset.generation = gen;
  for (const [category, list] of Object.entries(doc.results)) {
    const section = document.createElement("section");
    section.dataset.type = category;
    const h = document.createElement("h2");
    h.textContent = category.replaceAll("_", " ");
    section.append(h, ...list.map(card));
    results.append(section);
  }
}

function text(tag, className, content) {
  const el = document.createElement(tag);
  if (className) el.className = className;
  el.textContent = content;
  return el;
}

// A person's name, opening everything about them: asked by their identity, so that of two
// people sharing a name the one shown is the one opened
function personButton(person, roles) {
  const b = text("button", "person", person.name);
  b.type = "button";
  b.dataset.name = person.name;
  b.dataset.identity = person.identity_id;
  b.title = `Everything about ${person.name}`;
  b.addEventListener("click", () => showPerson(person.identity_id));
  if (!roles || !roles.length) return [b];
  return [b, text("span", "roles", `(${roles.join(", ")})`)];
}

// One context record: a whole group (its members in order, each with its own provenance), or a
// unit standing alone in the same shape
function card(r) {
  const div = document.createElement("article");
  div.className = "card";
  div.dataset.id = r.id;
  const dates = r.date_end && r.date_end !== r.date ? `${r.date} – ${r.date_end}` : r.date;
  const meta = [r.type.replaceAll("_", " "), dates, r.location].filter(Boolean).join(" · ");
  div.append(text("h3", "", r.title), text("div", "meta", meta));
  if (r.participants.length) {
    const people = document.createElement("div");
    people.className = "people";
    people.append(text("span", "", "Participants:"));
    for (const p of r.participants) people.append(...personButton(p, p.roles));
    div.append(people);
  }
  const details = document.createElement("details");
  details.className = "members";
  const n = r.members.length;
  details.append(text("summary", "", `${n} member${n === 1 ? "" : "s"}`));
  const ol = document.createElement("ol");
  for (const m of r.members) {
    const li = document.createElement("li");
    li.className = "member";
    li.value = m.order;
    li.dataset.order = m.order;
    const head = document.createElement("div");
    head.append(text("span", "role", m.role), " ", text("strong", "", m.author || m.source));
    head.append(" ", text("time", "", m.timestamp));
    head.querySelector("time").dateTime = m.timestamp;
    const prov = [m.source, m.source_id, ...m.chunk_refs].filter(Boolean).join(" · ");
    li.append(head, text("div", "excerpt", m.text), text("div", "prov", prov));
    ol.append(li);
  }
  details.append(ol);
  const p = r.provenance;
  const prov = [p.chunk_ref || p.source_id, p.content_hash && `${p.content_hash.slice(0, 19)}…`,
    p.backend_spec, p.generation, p.run_id && `run ${p.run_id.slice(0, 8)}`];
  div.append(details, text("div", "prov", prov.filter(Boolean).join(" · ")));
  return div;
}

// Everything the key's principal may see about one person: roles, partners, contexts
async function showPerson(identity) {
  const path = `${namespacePath()}/people/${encodeURIComponent(identity)}`;
  const doc = await ask(path, { method: "GET" }, "person");
  if (!doc) return;
  $("results").hidden = true;
  $("more").hidden = true;
  $("person").hidden = false;
  if (!doc.person) {
    $("person-name").textContent = `${doc.candidates.length} people match “${doc.query}”`;
    $("person-aliases").replaceChildren(
      ...doc.candidates.flatMap((c) => personButton(c)),
    );
    for (const id of ["person-roles", "person-partners", "person-contexts"]) $(id).replaceChildren();
    $("status").textContent = "Choose one";
    return;
  }
  $("person-name").textContent = doc.person.name;
  $("person-aliases").textContent = doc.person.aliases.length
    ? `Also written ${doc.person.aliases.join(", ")}`
    : "";
  $("person-roles").replaceChildren(
    ...Object.entries(doc.roles).map(([role, n]) => text("li", "", `${role}: ${n}`)),
  );
  $("person-partners").replaceChildren(
    ...doc.partners.flatMap((p) => personButton(p, [`${p.contexts} contexts`])),
  );
  $("person-contexts").replaceChildren(...doc.records.map(card));
  // the API shows the first `limit` contexts: a person with more is said to have more
  const count =
    doc.total_hits < doc.total_contexts
      ? `showing ${doc.total_hits} of ${doc.total_contexts} contexts`
      : `${doc.total_hits} context${doc.total_hits === 1 ? "" : "s"}`;
  $("status").textContent = `${doc.person.name}: ${count} (request ${doc.request_id})`;
  $("person-name").focus();
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

$("search-form").addEventListener("submit", async (ev) => {
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
  if (await groupFirst()) runGroups(body);
  else run(body, false);
});

$("back").addEventListener("click", () => {
  $("person").hidden = true;
  $("results").hidden = false;
  $("more").hidden = !(last && last.cursor);
});

$("more").addEventListener("click", () => {
  if (last && last.cursor) run(last, true);
});
