// The ASTRA report viewer: an index of entries (filter, sort) and a detail view per record kind.
// Record content is only ever inserted as text nodes (never as HTML), so it cannot inject markup.
(function () {
  "use strict";

  const DATA = JSON.parse(document.getElementById("astra-data").textContent);
  const LIMIT = 20000;  // characters of a string shown before its "show all" button
  const ROWS = 500;  // index rows shown before "show more"
  const PAGE = 2000;  // entries per request in --serve mode

  // ---------------------------------------------------------------- DOM helpers

  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value == null || value === false) continue;
      if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children.flat(Infinity)) {
      if (child == null || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }

  function show(value) {
    if (value == null) return "—";
    if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(4).replace(/0+$/, "");
    if (typeof value === "string") return value;
    return JSON.stringify(value);
  }

  function list(value) { return Array.isArray(value) ? value : []; }
  function obj(value) { return value && typeof value === "object" && !Array.isArray(value) ? value : {}; }

  function cssName(text) { return String(text).toLowerCase().replace(/[^a-z0-9_-]/g, "_"); }

  // A string, truncated past LIMIT characters with a button that shows all of it.
  function longText(value, tag, cls) {
    const text = typeof value === "string" ? value : show(value);
    const node = h(tag || "div", {class: cls || "text"});
    if (text.length <= LIMIT) { node.textContent = text; return node; }
    node.textContent = text.slice(0, LIMIT);
    const more = h("button", {class: "show-all", type: "button"}, `show all (${text.length.toLocaleString()} characters)`);
    const wrap = h("div", {class: "truncated"}, node, more);
    more.addEventListener("click", () => { node.textContent = text; more.remove(); });
    return wrap;
  }

  function jsonBlock(value) { return longText(JSON.stringify(value, null, 2), "pre", "json"); }

  function section(title, ...children) { return h("section", {class: "block"}, h("h3", null, title), ...children); }

  function badge(text, cls) { return h("span", {class: "badge " + (cls || "")}, text); }

  function table(headers, rows, cls) {
    return h("table", {class: cls || "grid"},
      h("thead", null, h("tr", null, headers.map((name) => h("th", null, name)))),
      h("tbody", null, rows.map((cells) => h("tr", null, cells.map((cell) => h("td", null, cell))))));
  }

  function fields(pairs) {
    return h("dl", {class: "fields"}, pairs.filter(([, value]) => value != null)
      .map(([name, value]) => [h("dt", null, name), h("dd", null, value instanceof Node ? value : show(value))]));
  }

  function verdictClass(verdict) {
    if (verdict == null) return "";
    return /^(pass|success|ok|true|accept)/i.test(verdict) ? "good" : /^(fail|not|false|reject|error)/i.test(verdict) ? "bad" : "";
  }

  // ---------------------------------------------------------------- entries

  const store = {
    summaries: [],  // every entry without its record, in input order
    byId: new Map(),  // id -> [entry index]
    cache: new Map(),  // index -> full entry (--serve mode)
    total: 0,
    add(summaries) {
      for (const entry of summaries) {
        this.summaries.push(entry);
        if (entry.id != null) {
          if (!this.byId.has(entry.id)) this.byId.set(entry.id, []);
          this.byId.get(entry.id).push(entry.i);
        }
      }
    },
    async entry(i) {
      if (DATA.mode === "embedded") return DATA.entries[i];
      if (!this.cache.has(i)) this.cache.set(i, await getJson(`api/entry?i=${i}`));
      return this.cache.get(i);
    },
    // Other entries with this id, optionally of some kinds.
    sameId(id, kinds, except) {
      return (this.byId.get(id) || []).map((i) => this.summaries[i])
        .filter((e) => e.i !== except && (!kinds || kinds.includes(e.kind)));
    },
    files(id) { return new Set((this.byId.get(id) || []).map((i) => this.summaries[i].file)); },
    comparable(id) { return id != null && this.files(id).size > 1; },
  };

  async function getJson(url) {
    const reply = await fetch(url);
    if (!reply.ok) throw new Error(`${url}: HTTP ${reply.status}`);
    return reply.json();
  }

  async function loadEntries() {
    if (DATA.mode === "embedded") {
      store.add(DATA.entries);
      store.total = DATA.entries.length;
      return;
    }
    store.total = DATA.total;
    for (let offset = 0; offset < DATA.total; offset += PAGE) {
      const page = await getJson(`api/entries?offset=${offset}&limit=${PAGE}`);
      store.add(page.entries);
      setStatus(`loaded ${store.summaries.length} of ${store.total}`);
      refreshIndex();
    }
  }

  // Everything the free-text search looks at; in --serve mode records stay on the server, so only the summary.
  const searchText = new Map();
  function haystack(summary) {
    if (!searchText.has(summary.i)) {
      const record = DATA.mode === "embedded" ? DATA.entries[summary.i].record : summary.title;
      const parts = [summary.id, summary.kind, summary.file, summary.verdict, summary.reasons.join(" "),
        summary.error, typeof record === "string" ? record : JSON.stringify(record)];
      searchText.set(summary.i, parts.filter((p) => p != null).join("\n").toLowerCase());
    }
    return searchText.get(summary.i);
  }

  function setStatus(text) { document.getElementById("status").textContent = text; }

  // ---------------------------------------------------------------- links between records

  function entryLink(i, label) { return h("a", {href: `#/entry/${i}`}, label); }

  // The id as a link to the record with that id (of one of `kinds`), or as plain text when none is here.
  function refLink(id, kinds) {
    if (id == null) return null;
    const found = store.sameId(String(id), kinds);
    return found.length ? entryLink(found[0].i, String(id)) : h("span", {class: "missing-ref", title: "not in these files"}, String(id));
  }

  function compareLink(id) { return h("a", {href: `#/compare/${encodeURIComponent(id)}`, class: "compare-link"}, "compare"); }

  // ---------------------------------------------------------------- index

  const filters = {kind: "", id: "", verdict: "", min: "", max: "", status: "", search: "", multi: false};
  let sort = {key: "i", dir: 1};
  let shown = ROWS;
  const COLUMNS = [
    ["i", "#"], ["file", "file:line"], ["kind", "kind"], ["id", "id"], ["verdict", "verdict"],
    ["reward", "reward"], ["rejected", "status"], ["title", "about"],
  ];

  function matches(e) {
    const f = filters;
    if (f.kind && e.kind !== f.kind) return false;
    if (f.id && !(e.id || "").toLowerCase().includes(f.id.toLowerCase())) return false;
    if (f.verdict && (f.verdict === "(none)" ? e.verdict != null : e.verdict !== f.verdict)) return false;
    if (f.status === "rejected" && !e.rejected) return false;
    if (f.status === "kept" && e.rejected) return false;
    if (f.min !== "" && !(e.reward != null && e.reward >= Number(f.min))) return false;
    if (f.max !== "" && !(e.reward != null && e.reward <= Number(f.max))) return false;
    if (f.multi && !store.comparable(e.id)) return false;
    if (f.search && !haystack(e).includes(f.search.toLowerCase())) return false;
    return true;
  }

  function compareBy(key) {
    return (a, b) => {
      const x = key === "file" ? `${a.file}\u0000${String(a.line).padStart(12)}` : a[key];
      const y = key === "file" ? `${b.file}\u0000${String(b.line).padStart(12)}` : b[key];
      if (x == null || y == null) return (x == null) - (y == null);  // missing values last
      return (x < y ? -1 : x > y ? 1 : 0) * sort.dir;
    };
  }

  function option(value, label, selected) { return h("option", {value, selected: value === selected}, label); }

  function choices(key) {
    const seen = new Map();
    for (const e of store.summaries) if (e[key] != null) seen.set(e[key], (seen.get(e[key]) || 0) + 1);
    return [...seen.entries()].sort();
  }

  function control(label, input) { return h("label", null, h("span", null, label), input); }

  function textInput(name, type, placeholder) {
    return h("input", {id: `f-${name}`, type, placeholder, value: filters[name], step: type === "number" ? "any" : null,
      oninput: (event) => { filters[name] = event.target.value; shown = ROWS; renderRows(); }});
  }

  function selectInput(name, options) {
    return h("select", {id: `f-${name}`, onchange: (event) => { filters[name] = event.target.value; shown = ROWS; renderRows(); }},
      options.map(([value, label]) => option(value, label, filters[name])));
  }

  function renderControls() {
    const kinds = choices("kind").map(([kind, n]) => [kind, `${kind} (${n})`]);
    const verdicts = choices("verdict").map(([v, n]) => [v, `${v} (${n})`]);
    const multi = h("input", {id: "f-multi", type: "checkbox", checked: filters.multi,
      onchange: (event) => { filters.multi = event.target.checked; shown = ROWS; renderRows(); }});
    return h("div", {class: "controls"},
      control("kind", selectInput("kind", [["", "all"], ...kinds])),
      control("id", textInput("id", "search", "part of an id")),
      control("verdict", selectInput("verdict", [["", "all"], ...verdicts, ["(none)", "(none)"]])),
      control("reward ≥", textInput("min", "number", "min")),
      control("reward ≤", textInput("max", "number", "max")),
      control("status", selectInput("status", [["", "all"], ["kept", "kept"], ["rejected", "rejected"]])),
      control("search", textInput("search", "search", "any text")),
      h("label", {class: "check"}, multi, h("span", null, "same id in several files")));
  }

  function renderIndex() {
    const root = clear(document.getElementById("index"));
    root.append(renderControls(), h("p", {id: "count", class: "count"}),
      h("table", {id: "entries", class: "grid index"},
        h("thead", null, h("tr", null, COLUMNS.map(([key, label]) =>
          h("th", {class: "sortable", "data-key": key, onclick: () => sortBy(key)}, label,
            sort.key === key ? (sort.dir > 0 ? " ▲" : " ▼") : "")))),
        h("tbody")),
      h("div", {id: "more"}));
    renderRows();
  }

  function sortBy(key) {
    sort = {key, dir: sort.key === key ? -sort.dir : 1};
    renderIndex();
  }

  let refreshPending = false;
  function refreshIndex() {
    if (refreshPending) return;
    refreshPending = true;
    requestAnimationFrame(() => { refreshPending = false; if (document.querySelector("#entries tbody")) renderRows(); });
  }

  function row(e) {
    const status = e.kind === "invalid" ? badge("invalid", "bad") : e.rejected ? badge("rejected", "bad") : badge("kept", "good");
    return h("tr", {class: `kind-${cssName(e.kind)}${e.rejected ? " rejected" : ""}`, "data-i": e.i,
      onclick: () => { location.hash = `#/entry/${e.i}`; }},
      h("td", null, e.i), h("td", {class: "where"}, `${e.file}:${e.line}`), h("td", null, badge(e.kind, "kind")),
      h("td", {class: "id"}, e.id == null ? "—" : e.id, store.comparable(e.id) ? [" ", compareLink(e.id)] : null),
      h("td", null, e.verdict == null ? "" : badge(e.verdict, verdictClass(e.verdict))),
      h("td", {class: "num"}, e.reward == null ? "" : show(e.reward)),
      h("td", null, status),
      h("td", {class: "about"}, e.rejected && e.reasons.length ? e.reasons.join("; ") : e.error || e.title));
  }

  function renderRows() {
    const rows = store.summaries.filter(matches).sort(compareBy(sort.key));
    const body = clear(document.querySelector("#entries tbody"));
    body.append(...rows.slice(0, shown).map(row));
    document.getElementById("count").textContent =
      `${rows.length} of ${store.summaries.length} records` + (store.summaries.length < store.total ? " (loading…)" : "");
    const more = clear(document.getElementById("more"));
    if (rows.length > shown) {
      more.append(h("button", {type: "button", onclick: () => { shown += ROWS; renderRows(); }},
        `show ${Math.min(ROWS, rows.length - shown)} more`));
    }
  }

  // ---------------------------------------------------------------- Python highlighting

  const PY_KEYWORDS = new Set(("False None True and as assert async await break class continue def del elif else except " +
    "finally for from global if import in is lambda nonlocal not or pass raise return try while with yield match case").split(" "));
  const PY_BUILTINS = new Set("print len range dict list set tuple str int float bool open isinstance sorted min max sum any all enumerate zip self".split(" "));
  // comment | string (optional prefix, triple or single quoted, unterminated runs to the end) | name | number
  const PY_TOKEN = /(#[^\n]*)|([rRbBuUfF]{0,2}(?:"""[\s\S]*?(?:"""|$)|'''[\s\S]*?(?:'''|$)|"(?:\\.|[^"\\\n])*"?|'(?:\\.|[^'\\\n])*'?))|([A-Za-z_]\w*)|(\d[\d_]*(?:\.\d*)?(?:[eE][+-]?\d+)?)/g;

  function highlightInto(node, code) {
    let last = 0;
    for (const m of code.matchAll(PY_TOKEN)) {
      if (m.index > last) node.append(code.slice(last, m.index));
      const cls = m[1] ? "tok-comment" : m[2] ? "tok-string" : m[4] ? "tok-number"
        : PY_KEYWORDS.has(m[3]) ? "tok-keyword" : PY_BUILTINS.has(m[3]) ? "tok-builtin" : null;
      node.append(cls ? h("span", {class: cls}, m[0]) : m[0]);
      last = m.index + m[0].length;
    }
    node.append(code.slice(last));
  }

  function pythonCode(code) {
    const text = typeof code === "string" ? code : show(code);
    const pre = h("pre", {class: "code python"});
    highlightInto(pre, text.slice(0, LIMIT));
    if (text.length <= LIMIT) return pre;
    const more = h("button", {class: "show-all", type: "button"}, `show all (${text.length.toLocaleString()} characters)`);
    more.addEventListener("click", () => { clear(pre); highlightInto(pre, text); more.remove(); });
    return h("div", {class: "truncated"}, pre, more);
  }

  // ---------------------------------------------------------------- transcripts

  function parseMaybe(text) {
    if (typeof text !== "string") return text;
    try { return JSON.parse(text); } catch (_) { return undefined; }
  }

  function hasError(value) {
    return value != null && typeof value === "object" && !Array.isArray(value) && value.error != null;
  }

  function reasoning(text) {
    return h("details", {class: "reasoning"}, h("summary", null, "reasoning"), longText(text));
  }

  // Text content, with <think>…</think> blocks folded away as reasoning.
  function contentNodes(content) {
    if (content == null || content === "") return [];
    if (Array.isArray(content)) {
      return content.map((part) => part && part.type === "text" ? longText(part.text) : jsonBlock(part));
    }
    if (typeof content !== "string") return [jsonBlock(content)];
    const nodes = [];
    const pattern = /<think>([\s\S]*?)(?:<\/think>|$)/g;
    let last = 0;
    for (const m of content.matchAll(pattern)) {
      if (m.index > last && content.slice(last, m.index).trim()) nodes.push(longText(content.slice(last, m.index).trim()));
      nodes.push(reasoning(m[1].trim()));
      last = m.index + m[0].length;
    }
    if (content.slice(last).trim()) nodes.push(longText(last ? content.slice(last).trim() : content));
    return nodes;
  }

  function toolCall(call) {
    call = obj(call);
    const fn = obj(call.function || call);
    const args = typeof fn.arguments === "string" ? fn.arguments : JSON.stringify(fn.arguments);
    const parsed = parseMaybe(fn.arguments);
    const brief = args == null ? "" : args.length > 80 ? args.slice(0, 80) + "…" : args;
    return h("details", {class: "tool-call"},
      h("summary", null, h("span", {class: "call-name"}, `${fn.name == null ? "?" : fn.name}`), h("code", null, `(${brief})`),
        call.id ? h("span", {class: "call-id"}, call.id) : null),
      parsed === undefined ? h("div", {class: "error"}, "arguments are not valid JSON:", longText(args, "pre")) : jsonBlock(parsed));
  }

  // A user's own tool traffic before it wrote (tau2 telecom: its phone): its calls and what they returned.
  function device(steps) {
    const calls = steps.flatMap((step) => list(obj(step).tool_calls));
    return h("details", {class: "device", open: true},
      h("summary", null, `on the user's own device: ${calls.length} call${calls.length === 1 ? "" : "s"}`),
      steps.map((step) => {
        step = obj(step);
        return step.role === "tool" ? h("div", {class: "device-result"}, contentNodes(step.content))
                                    : list(step.tool_calls).map(toolCall);
      }));
  }

  function message(m) {
    if (m == null || typeof m !== "object") return h("div", {class: "turn role-unknown"}, jsonBlock(m));
    const role = m.role || "unknown";
    const observation = role === "tool" ? parseMaybe(m.content) : undefined;
    const failed = m.error != null || hasError(observation);
    const extra = Object.keys(m).filter((k) => !["role", "content", "tool_calls", "tool_call_id", "name",
      "reasoning_content", "reasoning", "error", "device"].includes(k));
    return h("div", {class: `turn role-${cssName(role)}${failed ? " error" : ""}`},
      h("div", {class: "role"}, role, m.name ? ` · ${m.name}` : "", m.tool_call_id ? ` · ${m.tool_call_id}` : ""),
      m.reasoning_content ? reasoning(m.reasoning_content) : null,
      m.reasoning ? reasoning(m.reasoning) : null,
      Array.isArray(m.device) && m.device.length ? device(m.device) : null,
      role === "tool" && observation !== undefined && typeof observation === "object" ? jsonBlock(observation) : contentNodes(m.content),
      list(m.tool_calls).map(toolCall),
      m.error != null ? h("div", {class: "error"}, "error: ", longText(m.error, "span")) : null,
      extra.length ? h("details", {class: "extra"}, h("summary", null, "more fields"),
        jsonBlock(Object.fromEntries(extra.map((k) => [k, m[k]])))) : null);
  }

  function transcript(messages, title) {
    if (!Array.isArray(messages)) return null;
    return section(title || `transcript (${messages.length} messages)`, h("div", {class: "transcript"}, messages.map(message)));
  }

  // ---------------------------------------------------------------- shared panels

  function rationale(detail) {
    if (detail == null) return null;
    if (Array.isArray(detail)) {
      return h("ul", {class: "rationales"}, detail.map((item) => h("li", null, item && typeof item === "object"
        ? [item.id != null || item.index != null ? h("b", null, `${item.id != null ? item.id : item.index}: `) : null,
          item.score != null ? badge(show(item.score)) : null, " ", item.reason || item.rationale || ""]
        : show(item))));
    }
    if (typeof detail === "object") {
      if (detail.reason != null || detail.rationale != null) return longText(detail.reason || detail.rationale, "span");
      return jsonBlock(detail);
    }
    return longText(show(detail), "span");
  }

  // Judge scores: each dimension's value and why (details), what was not applicable, and judge errors.
  function scoresPanel(scores) {
    if (scores == null || typeof scores !== "object") return null;
    const special = ["details", "judge_errors", "not_applicable"];
    const details = scores.details || {};
    const notApplicable = scores.not_applicable || {};
    const errors = scores.judge_errors || {};
    const rows = Object.keys(scores).filter((k) => !special.includes(k)).map((k) => [
      h("b", null, k), h("span", {class: "num"}, show(scores[k])),
      errors[k] != null ? h("span", {class: "error"}, longText(show(errors[k]), "span"))
        : notApplicable[k] != null ? h("i", null, `not applicable: ${show(notApplicable[k])}`) : rationale(details[k])]);
    const unlisted = Object.keys(details).filter((k) => !(k in scores));
    return section("judge scores", table(["dimension", "score", "rationale"], rows, "grid scores"),
      unlisted.map((k) => h("div", null, h("b", null, k), rationale(details[k]))),
      Object.keys(errors).filter((k) => !(k in scores)).map((k) => h("div", {class: "error"}, `${k}: ${show(errors[k])}`)));
  }

  function verificationPanel(v) {
    if (v == null) return null;
    if (typeof v !== "object") return section("verification", show(v));
    const verdict = v.verdict != null ? v.verdict : typeof v.ok === "boolean" ? (v.ok ? "ok" : "not ok") : null;
    const rest = Object.fromEntries(Object.entries(v).filter(([k]) => !["verdict", "ok", "rationale", "reason", "attribution"].includes(k)));
    return section("verification",
      h("div", {class: "verdict"}, verdict != null ? badge(verdict, verdictClass(verdict)) : null,
        v.attribution != null ? badge(`attribution: ${v.attribution}`) : null),
      v.rationale != null || v.reason != null ? h("blockquote", null, longText(v.rationale != null ? v.rationale : v.reason)) : null,
      Object.keys(rest).length ? fields(Object.entries(rest).map(([k, value]) => [k, typeof value === "object" ? jsonBlock(value) : value])) : null);
  }

  function toolName(tool) {
    if (typeof tool === "string") return tool;
    const fn = (tool && tool.function) || tool || {};
    return fn.name;
  }

  function parametersCell(spec) {
    const props = (spec && spec.properties) || {};
    const required = new Set(list(spec && spec.required));
    const names = Object.keys(props);
    if (!names.length) return "—";
    return h("ul", {class: "params"}, names.map((name) => h("li", null, h("code", null, name + (required.has(name) ? "*" : "")),
      `: ${show(props[name] && props[name].type)}`, props[name] && props[name].description ? ` — ${props[name].description}` : "")));
  }

  function toolsTable(tools, distractors) {
    if (!Array.isArray(tools)) return null;
    return table(["tool", "description", "parameters (* required)"], tools.map((tool) => {
      const fn = (tool && tool.function) || tool || {};
      const name = toolName(tool);
      const nameCell = h("span", null, h("code", null, show(name)),
        distractors && distractors.includes(name) ? [" ", badge("distractor", "warn")] : null);
      if (typeof tool === "string") return [nameCell, "", ""];
      return [nameCell, longText(show(fn.description || ""), "span"), parametersCell(fn.parameters)];
    }), "grid tools");
  }

  function chainPath(names) {
    if (!Array.isArray(names)) return null;
    const nodes = [];
    names.forEach((name, index) => {
      if (index) nodes.push(h("span", {class: "arrow"}, " → "));
      nodes.push(h("code", {class: "step"}, show(name)));
    });
    return h("div", {class: "path"}, nodes);
  }

  function provenance(meta) {
    if (!meta || !Array.isArray(meta.provenance) || !meta.provenance.length) return null;
    return h("details", {class: "provenance"}, h("summary", null, `provenance (${meta.provenance.length} steps)` +
      (meta.parent_id != null ? ` · parent ${meta.parent_id}` : "")),
      table(["command", "version", "model", "seed", "time"], meta.provenance.map(obj).map((s) =>
        [show(s.command), show(s.version), show(s.model), show(s.seed), show(s.time)])));
  }

  // ---------------------------------------------------------------- one renderer per kind

  function decompositionTree(trace) {
    if (!Array.isArray(trace)) return null;
    trace = trace.map(obj);
    const key = (node) => node._uuid != null ? node._uuid : node.id;
    const deps = (node) => node.dependency == null ? [] : [].concat(node.dependency);
    const known = new Set(trace.map(key));
    const children = (parent) => trace.filter((node) => deps(node).includes(parent));
    const item = (node, path) => h("li", null,
      h("span", {class: "hop"}, `#${show(key(node))} · hop ${show(node.hop_level)}${node.is_parallel ? " · parallel" : ""}`), " ",
      h("span", {class: "sub-q"}, show(node.sub_question)), " ", h("span", {class: "arrow"}, "→"), " ",
      h("b", {class: "sub-a"}, show(node.sub_answer)), node.needs_tool ? [" ", badge("tool", "kind")] : null,
      path.has(key(node)) ? null : list(children(key(node)), new Set([...path, key(node)])));
    const list = (nodes, path) => nodes.length ? h("ul", {class: "tree"}, nodes.map((node) => item(node, path))) : null;
    return list(trace.filter((node) => !deps(node).some((d) => known.has(d))), new Set());
  }

  function verifiedCalls(calls) {
    if (!Array.isArray(calls)) return null;
    return table(["sub", "tool", "arguments", "expected", "observation", "check"], calls.map(obj).map((c) => {
      const ok = c.expected != null && typeof c.observation === "string" && c.observation.includes(String(c.expected));
      return [show(c.sub_id), h("code", null, show(c.tool)), h("code", null, JSON.stringify(c.arguments)),
        show(c.expected), longText(show(c.observation), "code"), badge(ok ? "✓ found" : "✗ not found", ok ? "good" : "bad")];
    }), "grid calls");
  }

  function subenvsTable(subenvs) {
    if (!Array.isArray(subenvs)) return jsonBlock(subenvs);
    return table(["tool", "implemented by", "answers sub-questions", "code"], subenvs.map(obj).map((part) => [
      h("code", null, show(toolName(part.tool))), h("code", null, show(part.impl)),
      list(part.calls).map((c) => show(obj(c).sub_id)).join(", "),
      h("details", null, h("summary", null, `${String(part.code || "").trimEnd().split("\n").length} lines`), pythonCode(part.code))]),
    "grid parts");
  }

  function planRevision(rev) {
    const outcome = rev.outcome && typeof rev.outcome === "object" ? rev.outcome : null;
    return h("details", {class: "revision", open: true},
      h("summary", null, `iteration ${show(rev.iteration)}`),
      fields([["synthesis plan", rev.synthesis_plan != null ? longText(rev.synthesis_plan) : null],
        ["evaluation rules", rev.evaluation_rules != null ? longText(rev.evaluation_rules) : null],
        ["outcome", outcome ? h("span", null, Object.entries(outcome).map(([k, v]) => badge(`${k}: ${show(v)}`))) : null],
        ["analysis", rev.analysis != null ? longText(rev.analysis) : null]]),
      Array.isArray(rev.failures) && rev.failures.length ? table(["stage", "id", "attribution", "rationale"],
        rev.failures.map(obj).map((f) => [show(f.stage), refLink(f.id), badge(show(f.attribution), "bad"), longText(show(f.rationale), "span")])) : null);
  }

  const RENDERERS = {
    trajectory: {keys: ["task_id", "messages", "tools", "scores", "verification"], render: (r) => [
      fields([["task", refLink(r.task_id, ["task"])]]),
      verificationPanel(r.verification), scoresPanel(r.scores), transcript(r.messages),
      section(`tools (${list(r.tools).length})`, h("details", null, h("summary", null, list(r.tools).map(toolName).join(", ")), toolsTable(r.tools)))]},
    rollout: {keys: ["sample_id", "group", "step", "messages", "reward", "reward_components", "num_turns", "num_tool_calls", "finish_reason"], render: (r) => [
      h("div", {class: "reward"}, "reward ", h("b", null, show(r.reward))),
      fields([["sample", refLink(r.sample_id, ["rl_sample"])], ["step", r.step], ["group", r.group], ["turns", r.num_turns],
        ["tool calls", r.num_tool_calls], ["finish reason", r.finish_reason == null ? null :
          badge(r.finish_reason, /error|fail|timeout|crash/i.test(r.finish_reason) ? "bad" : "")]]),
      r.reward_components ? section("reward components", table(["component", "value"],
        Object.entries(r.reward_components).map(([k, v]) => [k, h("span", {class: "num"}, show(v))]))) : null,
      transcript(r.messages)]},
    rl_sample: {keys: ["messages", "tools", "distractors", "environment", "job", "reward", "user"], render: (r) => [
      transcript(r.messages, "prompt"),
      section("tools", toolsTable(r.tools, list(r.distractors))),
      Array.isArray(r.job) ? section("job", table(["id", "question", "answer", "tool"], r.job.map(obj).map((j) =>
        [show(j.id), show(j.question), show(j.answer), j.needs_tool ? "yes" : "no"]))) : null,
      section("reward", jsonBlock(r.reward)),
      r.environment ? section("environment code", pythonCode(r.environment.code),
        r.environment.requirements && r.environment.requirements.length ? fields([["requirements", r.environment.requirements.join(", ")]]) : null) : null,
      r.user != null ? section("user simulator", jsonBlock(r.user)) : null]},
    task: {keys: ["server_id", "question", "chain", "origin", "parent_id", "language", "scores", "verification"], render: (r) => [
      h("blockquote", {class: "question"}, longText(r.question)),
      fields([["server", refLink(r.server_id, ["tool_server"])], ["origin", r.origin], ["language", r.language],
        ["parent", refLink(r.parent_id)]]),
      r.chain ? section("tool chain", chainPath(r.chain)) : null,
      verificationPanel(r.verification), scoresPanel(r.scores)]},
    tool_chain: {keys: ["server_id", "tools", "task", "origin", "verification"], render: (r) => [
      section("chain", chainPath(r.tools)),
      fields([["server", refLink(r.server_id, ["tool_server"])], ["origin", r.origin],
        ["task", r.task == null ? null : typeof r.task === "string" ? longText(r.task) : jsonBlock(r.task)]]),
      verificationPanel(r.verification)]},
    tool_graph: {keys: ["server_id", "nodes", "edges"], render: (r) => [
      fields([["server", refLink(r.server_id, ["tool_server"])], ["nodes", list(r.nodes).length]]),
      section("nodes", h("div", {class: "path"}, list(r.nodes).map((n) => [h("code", {class: "step"}, show(n)), " "]))),
      section("edges", table(["from", "", "to", "weight", "origin"], list(r.edges).map(obj).map((e) =>
        [h("code", null, show(e.src)), "→", h("code", null, show(e.dst)), show(e.weight), show(e.origin)])))]},
    tool_server: {keys: ["name", "description", "domain", "tools", "transport", "source"], render: (r) => [
      fields([["name", r.name], ["description", r.description], ["domain", r.domain]]),
      section(`tools (${list(r.tools).length})`, toolsTable(r.tools)),
      section("transport", jsonBlock(r.transport)), r.source != null ? section("source", jsonBlock(r.source)) : null]},
    qa_instance: {keys: ["domain", "scenario_type", "main_question", "final_answer", "decomposition_trace", "knowledge", "scores"], render: (r) => [
      h("blockquote", {class: "question"}, longText(r.main_question)),
      fields([["final answer", r.final_answer], ["domain", r.domain], ["scenario", r.scenario_type]]),
      section("decomposition", decompositionTree(r.decomposition_trace)),
      r.knowledge != null ? section("knowledge", typeof r.knowledge === "string" ? longText(r.knowledge) : jsonBlock(r.knowledge)) : null,
      scoresPanel(r.scores)]},
    environment: {keys: ["instance_id", "tools", "code", "requirements", "verified_calls", "instance", "subenvs"], render: (r) => {
      const instance = r.instance == null ? null : obj(r.instance);  // what build-env keeps of the Q–A instance
      return [
        instance ? h("blockquote", {class: "question"}, longText(instance.main_question)) : null,
        fields([["Q–A instance", refLink(r.instance_id, ["qa_instance"])], ["final answer", instance && instance.final_answer],
          ["requirements", Array.isArray(r.requirements) ? (r.requirements.join(", ") || "none") : r.requirements]]),
        instance ? section("decomposition", decompositionTree(instance.decomposition_trace)) : null,
        section("verification (tool calls replayed against the code)", verifiedCalls(r.verified_calls)),
        section("code", pythonCode(r.code)),
        section(`tools (${list(r.tools).length})`, toolsTable(r.tools)),
        r.subenvs != null ? section(`parts (${list(r.subenvs).length}: one per tool, what merge groups)`, subenvsTable(r.subenvs)) : null];
    }},
    eval_result: {keys: ["benchmark", "category", "item_id", "trial", "success", "score", "messages", "details", "error"], render: (r, e) => {
      const linked = store.sameId(e.id, ["trajectory", "rollout"], e.i);
      const trials = store.summaries.filter((s) => s.kind === "eval_result" && s.i !== e.i && s.title === e.title && s.title);
      return [
        h("div", {class: "reward"}, badge(r.success ? "success" : "failure", r.success ? "good" : "bad"), " score ", h("b", null, show(r.score))),
        fields([["benchmark", r.benchmark], ["category", r.category], ["item", r.item_id], ["trial", r.trial],
          ["trajectory", linked.length ? h("span", null, linked.map((t) => [entryLink(t.i, `${t.kind} ${t.id} (${t.file})`), " "])) : null],
          ["other trials", trials.length ? h("span", null, trials.map((t) => [entryLink(t.i, `${t.id}`), t.verdict ? [" ", badge(t.verdict, verdictClass(t.verdict))] : null, " "])) : null]]),
        r.error != null ? h("div", {class: "error"}, "error: ", longText(show(r.error), "span")) : null,
        r.details != null ? section("checker details", jsonBlock(r.details)) : null,
        transcript(r.messages)];
    }},
    plan: {keys: ["domain_id", "stream", "iteration", "focus", "synthesis_plan", "evaluation_rules", "history"], render: (r, e) => {
      const stream = store.summaries.filter((s) => s.kind === "plan" && s.i !== e.i && s.id !== e.id && streamOf(s) === r.stream);
      return [
        fields([["domain", refLink(r.domain_id)], ["stream", r.stream], ["iteration", r.iteration], ["focus", r.focus]]),
        section("synthesis plan", longText(show(r.synthesis_plan))),
        section("evaluation rules", longText(show(r.evaluation_rules))),
        Array.isArray(r.history) && r.history.length ? section(`earlier revisions (${r.history.length})`,
          r.history.slice().reverse().map(obj).map(planRevision)) : null,
        stream.length ? section("other plans of this stream", h("ul", null, stream.map((s) => h("li", null, entryLink(s.i, s.id))))) : null];
    }},
  };

  // A plan's stream is in its record, which --serve mode keeps on the server: the id prefix stands in there.
  function streamOf(summary) {
    if (DATA.mode === "embedded") return DATA.entries[summary.i].record.stream;
    return null;
  }

  function otherFields(record, keys) {
    if (record == null || typeof record !== "object" || Array.isArray(record)) return null;
    const rest = Object.keys(record).filter((k) => !keys.includes(k) && k !== "id" && k !== "meta");
    if (!rest.length) return null;
    return section("other fields", fields(rest.map((k) => [k, typeof record[k] === "object" && record[k] !== null ? jsonBlock(record[k]) : longText(show(record[k]), "span")])));
  }

  function body(entry) {
    const r = entry.record;
    const renderer = RENDERERS[entry.kind];
    const nodes = [];
    if (entry.rejected) {
      nodes.push(h("div", {class: "rejection"}, h("b", null, `Rejected${entry.stage ? ` by ${entry.stage}` : ""}`),
        entry.reasons.length ? h("ul", null, entry.reasons.map((reason) => h("li", null, longText(reason, "span")))) : " (no reason given)"));
    }
    if (entry.error) nodes.push(h("div", {class: "error"}, h("b", null, "Unreadable line: "), entry.error));
    if (entry.problems.length) {
      nodes.push(h("div", {class: "warning"}, h("b", null, `Does not fit the ${entry.kind} schema:`),
        h("ul", null, entry.problems.map((p) => h("li", null, p)))));
    }
    if (renderer && r && typeof r === "object") {
      try {
        nodes.push(...renderer.render(r, entry).filter(Boolean), otherFields(r, renderer.keys));
      } catch (error) {  // a record too broken for its kind's view is still shown raw below
        nodes.push(h("div", {class: "warning"}, `could not draw this ${entry.kind}: ${error.message}`));
      }
    } else if (entry.kind === "invalid") {
      nodes.push(section("line", longText(show(r), "pre", "json")));
    } else {
      nodes.push(otherFields(r, []));
    }
    nodes.push(r && typeof r === "object" ? provenance(r.meta) : null,
      h("details", {class: "raw"}, h("summary", null, "raw JSON"), jsonBlock(r)));
    return h("div", {class: `record kind-${cssName(entry.kind)}`}, nodes.filter(Boolean));
  }

  function heading(entry) {
    return h("div", {class: "heading"},
      badge(entry.kind, "kind"), " ", h("span", {class: "id"}, entry.id == null ? "(no id)" : entry.id), " ",
      entry.rejected ? badge("rejected", "bad") : null, " ",
      entry.verdict != null ? badge(entry.verdict, verdictClass(entry.verdict)) : null,
      h("div", {class: "where"}, `${entry.file}:${entry.line}`));
  }

  // ---------------------------------------------------------------- views and routing

  function showPane(name) {
    document.getElementById("index").hidden = name !== "index";
    document.getElementById("detail").hidden = name !== "detail";
    window.scrollTo(0, 0);
  }

  function nav(...extra) { return h("nav", null, h("a", {href: "#/"}, "← index"), ...extra); }

  async function showEntry(i) {
    const pane = clear(document.getElementById("detail"));
    showPane("detail");
    const entry = await store.entry(i);
    if (!entry) { pane.append(nav(), h("p", null, `no entry ${i}`)); return; }
    const prev = i > 0 ? h("a", {href: `#/entry/${i - 1}`}, "‹ previous") : null;
    const next = i + 1 < store.total ? h("a", {href: `#/entry/${i + 1}`}, "next ›") : null;
    pane.append(nav(prev, next, store.comparable(entry.id) ? compareLink(entry.id) : null), heading(entry), body(entry));
  }

  async function showCompare(id, left, right) {
    const pane = clear(document.getElementById("detail"));
    showPane("detail");
    const candidates = store.sameId(id);
    if (candidates.length < 2) { pane.append(nav(), h("p", null, `fewer than two records with id ${id}`)); return; }
    const a = left != null ? candidates.find((c) => c.i === left) : candidates[0];
    const b = right != null ? candidates.find((c) => c.i === right) : candidates.find((c) => c.file !== a.file) || candidates[1];
    const pick = (current, side) => h("select", {class: `pick-${side}`, onchange: (event) => {
      const chosen = Number(event.target.value);
      showCompare(id, side === "left" ? chosen : b.i, side === "right" ? chosen : a.i);
    }}, candidates.map((c) => option(String(c.i), `${c.file}:${c.line} (${c.kind})`, String(current.i))));
    const column = async (summary, side) => {
      const entry = await store.entry(summary.i);
      return h("div", {class: "column"}, pick(summary, side), heading(entry), body(entry));
    };
    pane.append(nav(), h("h2", null, `compare ${id}`),
      h("div", {class: "compare"}, await column(a, "left"), await column(b, "right")));
  }

  function showIndex() {
    showPane("index");
    renderIndex();
  }

  function route() {
    const [, view, arg] = (location.hash.slice(1) || "/").split("/");
    if (view === "entry") showEntry(Number(arg));
    else if (view === "compare") showCompare(decodeURIComponent(arg || ""));
    else showIndex();
  }

  window.addEventListener("hashchange", route);
  loadEntries().then(() => {
    const total = store.summaries;
    setStatus(`${total.length} records · ${total.filter((e) => e.rejected).length} rejected · ` +
      `${total.filter((e) => e.kind === "invalid").length} invalid`);
    route();
  }, (error) => setStatus(`could not load the records: ${error.message}`));
  if (DATA.mode !== "embedded") route();
})();
