"""The CSS and JavaScript every toki page inlines (no file or network fetch: a page works
from file:// and offline).

Colours are the Okabe-Ito palette, safe for the common colour-vision deficiencies, and are
never the only signal: every verdict, step kind and mark also has a text label (and cycle
edges a dash pattern). Text is black on light tints (contrast above 7:1). The print
stylesheet drops the interactive parts and prints every step.
"""

from __future__ import annotations

__all__ = ["CSS", "JS", "PALETTE"]

#: Okabe & Ito (2008), "Color Universal Design".
PALETTE = {
    "orange": "#E69F00",
    "sky": "#56B4E9",
    "green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "purple": "#CC79A7",
    "grey": "#777777",
}

CSS = """
:root { --ink:#111; --muted:#444; --line:#bbb; --bg:#fff; --hl:#D55E00;
  --ww:#0072B2; --wr:#009E73; --rw:#D55E00; --other:#555; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink);
  background: var(--bg); margin: 0 1.2rem 2rem; }
h1 { font-size: 1.45rem; margin: 1rem 0 .2rem; }
h2 { font-size: 1.15rem; margin: 1.4rem 0 .4rem; border-bottom: 1px solid var(--line); }
a { color: #00508a; }
a:focus, [tabindex]:focus, summary:focus, label:focus-within { outline: 3px solid #0072B2;
  outline-offset: 1px; }
.sub { color: var(--muted); margin: 0; }
.verdict { font-weight: 600; margin: .3rem 0; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .15rem 1rem;
  margin: .5rem 0; }
dl.facts dt { font-weight: 600; } dl.facts dd { margin: 0; overflow-wrap: anywhere; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; font: 13px/1.4 ui-monospace, Menlo,
  Consolas, monospace; margin: .2rem 0; }
pre.explain { background: #f6f6f6; border-left: 4px solid var(--hl); padding: .5rem .8rem; }
.notes li { color: var(--muted); }
.legend { display: flex; flex-wrap: wrap; gap: .3rem .9rem; margin: .4rem 0; font-size: 13px; }
.legend span { white-space: nowrap; }
.layout { display: grid; grid-template-columns: minmax(0, 1fr) 22rem; gap: 1rem;
  align-items: start; }
aside#record { position: sticky; top: .5rem; border: 1px solid var(--line); padding: .5rem .7rem;
  max-height: 95vh; overflow: auto; background: #fcfcfc; }
aside#record h3 { margin: 0 0 .3rem; font-size: 1rem; }
table.timeline { border-collapse: collapse; width: 100%; table-layout: auto; }
table.timeline th, table.timeline td { border-bottom: 1px solid #e4e4e4; padding: 2px 6px;
  vertical-align: top; text-align: left; font-size: 13px; }
table.timeline thead th { position: sticky; top: 0; background: #fff; border-bottom: 2px solid #888;
  z-index: 1; }
table.timeline th.idx { color: var(--muted); font-weight: 400; width: 3.2em; text-align: right; }
td.lane { border-left: 5px solid transparent; min-width: 9rem; }
td.in-txn { border-left-color: #9ecae1; background: #f3f9fd; }
td.in-txn.t-aborted { border-left-color: #E69F00; background: #fff8ea; border-left-style: dashed; }
td.in-txn.t-committed { border-left-color: #0072B2; }
td.step summary { cursor: pointer; list-style: none; }
td.step summary::-webkit-details-marker { display: none; }
td.step.selected { outline: 2px solid #0072B2; }
.k { display: inline-block; font: 600 11px/1.3 ui-monospace, monospace; padding: 0 4px;
  border: 1px solid #888; border-radius: 3px; margin-right: 4px; background: #fff; }
.k-read .k { border-color: #009E73; } .k-write .k, .k-delete .k { border-color: #0072B2; }
.k-commit .k { border-color: #0072B2; background: #dceefa; }
.k-abort .k { border-color: #E69F00; background: #fdebc4; }
.k-crash .k, .k-fault .k { border-color: #000; background: #000; color: #fff; }
.k-llm .k { border-color: #CC79A7; background: #f7e4ef; }
.txn { font: 600 11px/1.3 ui-monospace, monospace; color: #00508a; margin-right: 4px; }
.span-label { display: block; font-size: 11px; color: var(--muted); }
.outcome { font-weight: 600; }
td.marked { background: #fde3d3 !important; box-shadow: inset 0 0 0 2px #D55E00; }
.mark { display: block; font-size: 12px; font-weight: 600; color: #8a3300; }
tr.gap td { text-align: center; color: var(--muted); font-style: italic; background: #fafafa; }
#expand { margin-right: .3rem; }
#expand:not(:checked) ~ .layout tr.far { display: none; }
#expand:checked ~ .layout tr.gap:not(.kept) { display: none; }
svg.cycle { max-width: 100%; height: auto; border: 1px solid #eee; background: #fff; }
svg.cycle .node circle { fill: #fff; stroke: #111; stroke-width: 2; }
svg.cycle .node text { font: 600 13px system-ui, sans-serif; text-anchor: middle; }
svg.cycle .edge path { fill: none; stroke-width: 2.2; }
svg.cycle .edge text { font: 12px ui-monospace, monospace; paint-order: stroke; stroke: #fff;
  stroke-width: 4px; }
svg.cycle .e-ww path { stroke: var(--ww); } svg.cycle .e-wr path { stroke: var(--wr);
  stroke-dasharray: 8 4; } svg.cycle .e-rw path { stroke: var(--rw); stroke-dasharray: 2 3; }
svg.cycle .e-process path, svg.cycle .e-realtime path { stroke: var(--other);
  stroke-dasharray: 10 3 2 3; }
ol.edges li { margin: .15rem 0; }
.ekind { font: 600 12px ui-monospace, monospace; padding: 0 3px; border: 1px solid #888; }
kbd { font: 12px ui-monospace, monospace; border: 1px solid #aaa; border-radius: 3px;
  padding: 0 3px; }
.help { color: var(--muted); font-size: 13px; }
/* the matrix page */
table.matrix { border-collapse: collapse; margin: .5rem 0 1rem; table-layout: fixed;
  width: 100%; }
table.matrix col.sys { width: 11rem; }
table.matrix th, table.matrix td { border: 1px solid #ccc; padding: 4px 6px; font-size: 13px;
  vertical-align: top; text-align: left; }
table.matrix thead th { background: #f0f0f0; }
table.matrix tr.real th { font-style: italic; }
td.cell { overflow-wrap: anywhere; }
td.cell a { display: block; color: inherit; text-decoration: none; }
td.cell a:hover .word, td.cell a:focus .word { text-decoration: underline; }
.word { font-weight: 700; }
.num, .method, .agree { display: block; font-size: 12px; }
.v-admits { background: #fbd9c5; border-left: 6px solid #D55E00 !important; }
.v-excludes { background: #d6ebf8; border-left: 6px solid #0072B2 !important; }
.v-not-found { background: #dcf1e8; border-left: 6px solid #009E73 !important; }
.v-undecided { background: #eeeeee; border-left: 6px dashed #777 !important; }
.v-abstains { background: #f5e1ec; border-left: 6px dotted #CC79A7 !important; }
.agree-no { font-weight: 700; color: #8a3300; }
@media (max-width: 60rem) {
  .layout { grid-template-columns: 1fr; } aside#record { position: static; }
}
@media print {
  body { margin: 0; font-size: 11px; }
  aside#record, .noprint, .help, #expand, label[for=expand] { display: none !important; }
  .layout { display: block; }
  #expand:not(:checked) ~ .layout tr.far { display: table-row; }
  tr.gap { display: none; }
  table.timeline thead th { position: static; }
  details > pre { display: none; }
  td.marked { box-shadow: none; border: 2px solid #000; }
  a { color: #000; text-decoration: none; }
}
"""

JS = """
(function () {
  "use strict";
  var panel = document.getElementById("record");
  var expand = document.getElementById("expand");
  function visible(el) { return el.offsetParent !== null; }
  function steps(onlyMarked) {
    var sel = onlyMarked ? "td.step.marked" : "td.step";
    return Array.prototype.filter.call(document.querySelectorAll(sel), visible);
  }
  function show(cell) {
    if (!panel || !cell) { return; }
    var prev = document.querySelector("td.step.selected");
    if (prev) { prev.classList.remove("selected"); }
    cell.classList.add("selected");
    var pre = cell.querySelector("pre");
    var summary = cell.querySelector("summary");
    panel.querySelector("h3").textContent = "Step " + cell.getAttribute("data-step") +
      " \\u00b7 " + cell.getAttribute("data-lane");
    panel.querySelector(".what").textContent = cell.getAttribute("title") ||
      (summary ? summary.textContent : "");
    panel.querySelector("pre").textContent = pre ? pre.textContent : "";
  }
  function move(delta, onlyMarked) {
    var all = steps(onlyMarked);
    if (!all.length) { return; }
    var cur = document.activeElement;
    var at = all.indexOf(cur && cur.closest ? cur.closest("td.step") : null);
    if (at < 0) {
      var sel = document.querySelector("td.step.selected");
      at = all.indexOf(sel);
    }
    var next = all[Math.min(all.length - 1, Math.max(0, at < 0 ? 0 : at + delta))];
    (next.querySelector("summary") || next).focus();
    next.scrollIntoView({block: "nearest"});
    show(next);
  }
  document.addEventListener("click", function (ev) {
    var cell = ev.target.closest ? ev.target.closest("td.step") : null;
    if (cell) { show(cell); }
  });
  document.addEventListener("focusin", function (ev) {
    var cell = ev.target.closest ? ev.target.closest("td.step") : null;
    if (cell) { show(cell); }
  });
  document.addEventListener("keydown", function (ev) {
    if (ev.altKey || ev.ctrlKey || ev.metaKey) { return; }
    var k = ev.key;
    if (k === "j" || k === "ArrowDown") { move(1, false); ev.preventDefault(); }
    else if (k === "k" || k === "ArrowUp") { move(-1, false); ev.preventDefault(); }
    else if (k === "n") { move(1, true); ev.preventDefault(); }
    else if (k === "p") { move(-1, true); ev.preventDefault(); }
    else if (k === "e" && expand) { expand.checked = !expand.checked; }
  });
  var edges = document.querySelectorAll("[data-edge]");
  edges.forEach(function (el) {
    el.addEventListener("mouseenter", function () {
      document.querySelectorAll("[data-edge='" + el.getAttribute("data-edge") + "']")
        .forEach(function (x) { x.classList.add("hot"); });
    });
    el.addEventListener("mouseleave", function () {
      document.querySelectorAll(".hot").forEach(function (x) { x.classList.remove("hot"); });
    });
  });
  document.documentElement.classList.add("js");
})();
"""
