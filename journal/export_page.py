# ruff: noqa: E501  (the page is HTML, CSS and JS: its lines are not Python)
"""The page `journal export --format html` fills in: inline CSS and JS, no request at view time.

Three markers are replaced by `journal.exporting.to_html`: the title (escaped), the metadata (one
JSON object) and the session as JSONL, both made safe to sit in a <script> element. The page
parses the JSONL, builds the tree, and renders the selected branch in chunks as it scrolls;
every piece of session text is set with `textContent`.
"""

PAGE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
      content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{TITLE}}</title>
<style>
body{margin:0;font:14px/1.45 system-ui,sans-serif;color:#1d2330;background:#f6f7f9;display:flex;height:100vh}
#side{width:300px;min-width:220px;overflow:auto;border-right:1px solid #d5d9e0;background:#fff;padding:8px}
#side h2{font-size:13px;text-transform:uppercase;color:#667;margin:12px 0 4px}
#tree .node{padding:3px 6px;border-radius:4px;cursor:pointer;white-space:nowrap;overflow:hidden;text-overflow:ellipsis;font-size:12px}
#tree .node:hover{background:#eef2f8}
#tree .node.on-live{font-weight:600}
#tree .node.selected{background:#dde7f7}
#tree .live-mark{color:#0a7d32}
.label{background:#fff3c4;border:1px solid #e5cf6b;border-radius:3px;padding:0 4px;margin-left:4px;font-size:11px}
#wrap{flex:1;overflow:auto}
header{padding:12px 20px;background:#fff;border-bottom:1px solid #d5d9e0}
header h1{font-size:18px;margin:0 0 6px}
header dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:0;font-size:12px}
header dt{color:#667}
header dd{margin:0}
.warn{color:#9a3b00}
#controls{position:sticky;top:0;background:#f6f7f9;padding:8px 20px;border-bottom:1px solid #e0e3e8;z-index:1}
#controls input[type=search]{width:280px}
#messages{padding:10px 20px 60px}
.entry{background:#fff;border:1px solid #e0e3e8;border-radius:6px;margin:8px 0;padding:8px 12px}
.entry:target,.entry.target{outline:2px solid #3a78d6}
.entry .meta{font-size:11px;color:#778;margin-bottom:4px}
.entry .meta a{color:#778}
.role-user{border-left:4px solid #3a78d6}
.role-assistant{border-left:4px solid #0a7d32}
.role-toolResult,.paired-result{border-left:4px solid #999;font-size:12px}
.compacted{opacity:.55}
.badge{display:inline-block;font-size:11px;border-radius:3px;padding:0 5px;margin-left:6px;color:#fff;background:#778}
.badge.synthetic{background:#b35c00}.badge.repair{background:#a3134a}.badge.compacted-tag{background:#999}
pre{white-space:pre-wrap;word-break:break-word;background:#f3f4f6;padding:6px 8px;border-radius:4px;margin:4px 0;font-size:12px}
.tool-pair{border:1px dashed #b9c0cc;border-radius:4px;padding:4px 8px;margin:6px 0}
.tool-call .name{font-family:monospace;font-weight:600}
details.compaction{background:#fff8e6;border:1px solid #e8c96a}
details summary{cursor:pointer}
#more{margin:10px 0}
</style>
</head>
<body>
<nav id="side"><h2>Tree</h2><div id="tree"></div><h2>Labels</h2><div id="labels"></div></nav>
<div id="wrap">
<header id="head"></header>
<div id="controls">
<input type="search" id="q" placeholder="Search this branch">
<label><input type="radio" name="f" value="all" checked> all</label>
<label><input type="radio" name="f" value="user"> user only</label>
<label><input type="radio" name="f" value="notools"> no tools</label>
<span id="count"></span>
</div>
<main id="messages"></main>
<div id="more"><button type="button" id="more-btn">Show more</button></div>
</div>
<script type="application/json" id="meta">{{META}}</script>
<script type="application/json" id="jsonl">{{JSONL}}</script>
<script>
"use strict";
(function () {
const CHUNK = 150, LONG_CHARS = 2000, LONG_LINES = 30;
const meta = JSON.parse(document.getElementById("meta").textContent);
const rawText = document.getElementById("jsonl").textContent;
let header = null;
const entries = [];
for (const line of rawText.split("\n")) {
  if (!line) continue;
  let v;
  try { v = JSON.parse(line); } catch (e) { continue; }
  if (!header && !entries.length && v && v.type === "session") { header = v; continue; }
  if (v && typeof v.id === "string") entries.push(v);
}
const byId = new Map(), parent = [], children = entries.map(() => []);
entries.forEach((e, i) => {
  const p = e.parentId == null ? undefined : byId.get(e.parentId);
  parent.push(p === undefined ? -1 : p);
  if (p !== undefined) children[p].push(i);
  byId.set(e.id, i);
});
const liveLeaf = byId.has(meta.liveLeaf) ? byId.get(meta.liveLeaf) : entries.length - 1;

function el(tag, cls, text) {
  const n = document.createElement(tag);
  if (cls) n.className = cls;
  if (text !== undefined && text !== null) n.textContent = String(text);
  return n;
}
function pathTo(i) { const out = []; while (i >= 0) { out.push(i); i = parent[i]; } return out.reverse(); }
function downToLeaf(i) { const out = []; while (children[i] && children[i].length) { i = children[i][children[i].length - 1]; out.push(i); } return out; }
function textOf(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.filter(b => b && b.type === "text" && typeof b.text === "string").map(b => b.text).join("\n");
}
function firstLine(t, w) { t = String(t || "").trim().split("\n")[0]; return t.length > w ? t.slice(0, w - 1) + "\u2026" : t; }
function describe(e) {
  const m = e.message;
  if (e.type === "message" && m && typeof m === "object") {
    if (m.role === "assistant") {
      const t = textOf(m.content); if (t.trim()) return "assistant: " + firstLine(t, 60);
      const c = Array.isArray(m.content) ? m.content.find(b => b && b.type === "toolCall") : null;
      return "assistant: " + (c ? "\u2192 " + c.name : "(no text)");
    }
    if (m.role === "toolResult") return "result " + m.toolName;
    if (m.role === "bashExecution") return "$ " + firstLine(m.command, 50);
    return m.role + ": " + firstLine(textOf(m.content), 60);
  }
  if (e.type === "compaction") return "compaction (" + e.tokensBefore + " tokens before)";
  if (e.type === "branch_summary") return "branch summary: " + firstLine(e.summary, 50);
  if (e.type === "model_change") return "model " + e.provider + "/" + e.modelId;
  if (e.type === "custom") return "custom " + e.customType;
  if (e.type === "session_info") return "name: " + firstLine(e.name, 50);
  if (e.type === "thinking_level_change") return "thinking " + e.thinkingLevel;
  if (e.type === "label") return "label " + e.targetId + (e.label ? " = " + e.label : " cleared");
  return e.type;
}

// header
const head = document.getElementById("head");
head.appendChild(el("h1", null, meta.name || meta.id || "session"));
const dl = el("dl");
function row(k, v) { dl.appendChild(el("dt", null, k)); const d = el("dd"); if (v instanceof Node) d.appendChild(v); else d.textContent = String(v); dl.appendChild(d); return d; }
row("session", meta.id || "?");
row("cwd", meta.cwd || "?");
row("created", meta.created || "?");
row("models", (meta.models || []).join(", ") || "none recorded");
const tk = meta.tokens || {};
row("tokens", "input " + (tk.input || 0).toLocaleString() + ", output " + (tk.output || 0).toLocaleString() + ", cache read " + (tk.cacheRead || 0).toLocaleString() + ", cache write " + (tk.cacheWrite || 0).toLocaleString());
row("cost", meta.cost == null ? "not recorded" : "$" + Number(meta.cost).toFixed(4) + " (as recorded)");
row("entries", entries.length.toLocaleString());
const lin = el("ol", "lineage");
(meta.lineage || []).forEach((f, n) => lin.appendChild(el("li", null, f + (n === meta.lineage.length - 1 ? " (live)" : " (archive)"))));
row("files", lin);
(meta.warnings || []).forEach(w => row("warning", w).className = "warn");
const dlBtn = el("button", null, "Download JSONL");
dlBtn.type = "button";
dlBtn.addEventListener("click", () => {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([rawText + "\n"], {type: "application/x-ndjson"}));
  a.download = (meta.id || "session") + ".jsonl";
  document.body.appendChild(a); a.click(); a.remove();
});
row("raw", dlBtn);
head.appendChild(dl);

// sidebar: the tree as segments (a chain is one node; a fork starts new ones)
const livePath = pathTo(liveLeaf), onLive = new Set(livePath);
const treeBox = document.getElementById("tree");
const segNodes = [];
const stack = [];
for (let i = entries.length - 1; i >= 0; i--) if (parent[i] < 0) stack.push([i, 0]);
while (stack.length) {
  const [start, depth] = stack.pop();
  let end = start, count = 1; const labels = [];
  if (meta.labels && meta.labels[entries[start].id]) labels.push(meta.labels[entries[start].id]);
  while (children[end].length === 1) { end = children[end][0]; count++; if (meta.labels && meta.labels[entries[end].id]) labels.push(meta.labels[entries[end].id]); }
  const n = el("div", "node");
  n.style.paddingLeft = (6 + depth * 12) + "px";
  n.dataset.start = String(start); n.dataset.end = String(end);
  if (onLive.has(start)) n.classList.add("on-live");
  if (end === liveLeaf) n.appendChild(el("span", "live-mark", "\u25cf live leaf \u00b7 "));
  n.appendChild(el("span", null, describe(entries[start]) + " (" + count + ")"));
  labels.forEach(l => n.appendChild(el("span", "label", l)));
  n.addEventListener("click", () => { select(pathTo(end).concat(downToLeaf(end))); location.hash = ""; });
  treeBox.appendChild(n); segNodes.push(n);
  const kids = children[end];
  for (let k = kids.length - 1; k >= 0; k--) stack.push([kids[k], depth + 1]);
}
const labelBox = document.getElementById("labels");
Object.entries(meta.labels || {}).forEach(([id, l]) => {
  const a = el("a", null, l + " \u2192 " + id); a.href = "#" + encodeURIComponent(id);
  labelBox.appendChild(a); labelBox.appendChild(el("br"));
});

// the branch shown
let branch = [], visible = [], shown = 0, compacted = new Map(), results = new Map(), replaced = new Map();
const box = document.getElementById("messages"), moreBtn = document.getElementById("more-btn");
const qBox = document.getElementById("q");
let filter = "all", query = "";
const lowered = new Map();
function haystack(i) { let s = lowered.get(i); if (s === undefined) { s = JSON.stringify(entries[i]).toLowerCase(); lowered.set(i, s); } return s; }
function role(i) { const m = entries[i].message; return entries[i].type === "message" && m && typeof m === "object" ? m.role : null; }
function select(path) {
  branch = path; compacted = new Map(); results = new Map(); replaced = new Map();
  let start = 0;
  branch.forEach((idx, n) => {
    const e = entries[idx];
    if (e.type === "compaction") {
      let stop = n;
      for (let m = start; m < n; m++) if (entries[branch[m]].id === e.firstKeptEntryId) { stop = m; break; }
      const gone = [];
      for (let m = start; m < stop; m++) if (entries[branch[m]].type !== "compaction") { compacted.set(branch[m], idx); gone.push(branch[m]); }
      replaced.set(idx, gone); start = stop;
    }
    if (role(idx) === "toolResult" && typeof e.message.toolCallId === "string" && !results.has(e.message.toolCallId)) results.set(e.message.toolCallId, idx);
  });
  const inBranch = new Set(branch);
  segNodes.forEach(n => n.classList.toggle("selected", inBranch.has(Number(n.dataset.end))));
  refilter();
}
function keep(i) {
  const r = role(i);
  if (filter === "user" && r !== "user") return false;
  if (filter === "notools" && (r === "toolResult" || r === "bashExecution")) return false;
  return !query || haystack(i).indexOf(query) >= 0;
}
function refilter() {
  visible = branch.filter(keep); shown = 0; box.textContent = "";
  document.getElementById("count").textContent = visible.length.toLocaleString() + " of " + branch.length.toLocaleString() + " entries on this branch";
  renderMore();
}
function renderMore() {
  const stop = Math.min(visible.length, shown + CHUNK);
  const frag = document.createDocumentFragment();
  for (; shown < stop; shown++) frag.appendChild(renderEntry(visible[shown]));
  box.appendChild(frag);
  moreBtn.parentNode.style.display = shown < visible.length ? "" : "none";
}
moreBtn.addEventListener("click", renderMore);
if ("IntersectionObserver" in window) {
  new IntersectionObserver(es => { if (es.some(e => e.isIntersecting) && shown < visible.length) renderMore(); },
    {root: document.getElementById("wrap"), rootMargin: "800px"}).observe(moreBtn.parentNode);
}
function longBlock(text, title) {
  text = String(text);
  if (text.length <= LONG_CHARS && text.split("\n").length <= LONG_LINES) return el("pre", null, text);
  const d = el("details", "long"); d.appendChild(el("summary", null, title + " (" + text.length.toLocaleString() + " chars)"));
  d.appendChild(el("pre", null, text)); return d;
}
function resultBody(m, into) {
  into.appendChild(longBlock(textOf(m.content), "output"));
  if (m.details && m.details.synthetic === true) into.appendChild(el("span", "badge synthetic", "synthetic result: no result was recorded"));
  if (m.isError) into.appendChild(el("span", "badge", "error"));
}
function renderEntry(i) {
  const e = entries[i], m = e.message, r = role(i);
  const box = el("div", "entry" + (r ? " role-" + r : " type-" + e.type));
  box.id = e.id; box.dataset.id = e.id;
  const metaLine = el("div", "meta");
  const link = el("a", null, "#" + e.id); link.href = "#" + encodeURIComponent(e.id);
  metaLine.appendChild(link); metaLine.appendChild(document.createTextNode(" " + (r || e.type) + " \u00b7 " + (e.timestamp || "")));
  if (meta.labels && meta.labels[e.id]) metaLine.appendChild(el("span", "label", meta.labels[e.id]));
  if (compacted.has(i)) { box.classList.add("compacted"); metaLine.appendChild(el("span", "badge compacted-tag", "replaced by compaction " + entries[compacted.get(i)].id)); }
  box.appendChild(metaLine);
  if (e.type === "compaction") {
    const d = el("details", "compaction");
    const gone = replaced.get(i) || [];
    d.appendChild(el("summary", null, "Compaction \u00b7 " + (e.tokensBefore == null ? "?" : Number(e.tokensBefore).toLocaleString()) + " tokens before \u00b7 replaced " + gone.length + " entries \u00b7 keeps from " + e.firstKeptEntryId));
    d.appendChild(longBlock(e.summary || "", "summary"));
    const list = el("div", "replaced"); list.appendChild(document.createTextNode("Replaced: "));
    gone.slice(0, 40).forEach(g => { const a = el("a", null, entries[g].id); a.href = "#" + encodeURIComponent(entries[g].id); list.appendChild(a); list.appendChild(document.createTextNode(" ")); });
    if (gone.length > 40) list.appendChild(document.createTextNode("\u2026 and " + (gone.length - 40) + " more"));
    d.appendChild(list); box.appendChild(d); return box;
  }
  if (e.type === "branch_summary") { box.appendChild(el("strong", null, "Branch summary (from " + e.fromId + ")")); box.appendChild(longBlock(e.summary || "", "summary")); return box; }
  if (e.type === "custom" && e.customType === "journal.repair") { box.appendChild(el("span", "badge repair", "repair marker")); box.appendChild(el("pre", null, JSON.stringify(e.data))); return box; }
  if (e.type !== "message" || !m || typeof m !== "object") { box.appendChild(el("div", null, describe(e))); return box; }
  if (r === "toolResult") {
    const paired = typeof m.toolCallId === "string" && results.get(m.toolCallId) === i && callOnBranch(m.toolCallId);
    if (paired) { box.className = "entry paired-result"; box.appendChild(el("span", null, "\u21b3 result of " + m.toolName + " (" + m.toolCallId + "), shown with its call above")); if (m.details && m.details.synthetic === true) box.appendChild(el("span", "badge synthetic", "synthetic result")); return box; }
    box.appendChild(el("strong", null, "Result of " + m.toolName + " (" + m.toolCallId + "), no call on this branch")); resultBody(m, box); return box;
  }
  if (r === "bashExecution") { box.appendChild(longBlock("$ " + m.command + "\n" + (m.output || ""), "bash output")); return box; }
  if (r === "compactionSummary" || r === "branchSummary") { box.appendChild(longBlock(m.summary || "", "summary")); return box; }
  if (r === "assistant" && m.model) metaLine.appendChild(document.createTextNode(" \u00b7 " + m.model));
  const blocks = Array.isArray(m.content) ? m.content : [{type: "text", text: m.content}];
  for (const b of blocks) {
    if (!b || typeof b !== "object") continue;
    if (b.type === "text" && b.text) box.appendChild(longBlock(b.text, "text"));
    else if (b.type === "thinking") { const d = el("details", "thinking"); d.appendChild(el("summary", null, "Thinking (" + String(b.thinking || "").length.toLocaleString() + " chars)")); d.appendChild(el("pre", null, b.thinking || "")); box.appendChild(d); }
    else if (b.type === "toolCall" && filter !== "notools") {
      const pair = el("div", "tool-pair"); pair.dataset.call = String(b.id);
      const call = el("div", "tool-call"); call.appendChild(el("span", "name", b.name)); call.appendChild(document.createTextNode(" (" + b.id + ")"));
      call.appendChild(longBlock(JSON.stringify(b.arguments, null, 2), "arguments")); pair.appendChild(call);
      const res = results.get(b.id);
      const out = el("div", "tool-result");
      if (res !== undefined) { out.appendChild(el("div", "meta", "result " + entries[res].id)); resultBody(entries[res].message, out); }
      else out.appendChild(el("span", "badge", "no result recorded"));
      pair.appendChild(out); box.appendChild(pair);
    }
    else if (b.type === "image") box.appendChild(el("em", null, "(image " + (b.mimeType || "") + ")"));
  }
  return box;
}
const callIds = new Map();
function callOnBranch(id) {
  if (!callIds.has(branch)) { const s = new Set(); branch.forEach(i => { const m = entries[i].message; if (role(i) === "assistant" && Array.isArray(m.content)) m.content.forEach(b => { if (b && b.type === "toolCall") s.add(b.id); }); }); callIds.clear(); callIds.set(branch, s); }
  return callIds.get(branch).has(id);
}
qBox.addEventListener("input", () => { query = qBox.value.toLowerCase(); refilter(); });
document.querySelectorAll("input[name=f]").forEach(r => r.addEventListener("change", () => { filter = r.value; refilter(); }));
function goToHash() {
  const id = decodeURIComponent(location.hash.slice(1));
  if (!id || !byId.has(id)) return;
  const i = byId.get(id);
  if (branch.indexOf(i) < 0) select(pathTo(i).concat(downToLeaf(i)));
  if (visible.indexOf(i) < 0) { filter = "all"; query = ""; qBox.value = ""; document.querySelector("input[value=all]").checked = true; refilter(); }
  const pos = visible.indexOf(i);
  while (shown <= pos) renderMore();
  const node = document.getElementById(id);
  if (node) { document.querySelectorAll(".entry.target").forEach(n => n.classList.remove("target")); node.classList.add("target"); node.scrollIntoView(); }
}
window.addEventListener("hashchange", goToHash);
select(livePath);
goToHash();
document.body.dataset.renderMs = String(Math.round(performance.now()));
document.body.dataset.ready = "1";
})();
</script>
</body>
</html>
"""
