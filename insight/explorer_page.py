"""The explorer page's HTML, CSS and JavaScript (insight/explorer_html.py fills in __TITLE__, __META__, __WEIGHTS__).

Plain JavaScript, no library, nothing fetched: the file works from disk with the network off.
Page state: layer, head (a number or 'mean'), the pinned query token (click; click again to unpin) and the hovered
one (shown while nothing is pinned). Each token span gets a background whose opacity is sqrt(weight) (small
weights stay visible, as in the PNG maps) and data-weight = the weight, 6 decimals.
"""

PAGE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>attention explorer: __TITLE__</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 16px; margin: 0 0 8px; }
#controls { margin: 8px 0; display: flex; gap: 12px; align-items: center; flex-wrap: wrap; }
#main { display: flex; gap: 24px; align-items: flex-start; }
#text { font: 15px/1.9 ui-monospace, monospace; white-space: pre-wrap; max-width: 70ch; flex: 1 1 60%; }
.tok { cursor: pointer; border-radius: 2px; outline-offset: 1px; }
.tok.query { outline: 2px solid #1f77b4; }
.tok.pinned { outline: 2px solid #0b3d91; background: #cfe3ff; }
#side { flex: 0 0 auto; max-width: 460px; }
#grid { border-collapse: collapse; font-size: 11px; }
#grid td, #grid th { padding: 2px; text-align: center; vertical-align: top; }
#grid canvas { width: 64px; height: 64px; image-rendering: pixelated; border: 2px solid transparent; cursor: pointer; }
#grid canvas.current { border-color: #d62728; }
#info { font-size: 12px; margin-top: 8px; max-width: 40ch; white-space: pre-wrap; }
.note { color: #666; font-size: 12px; }
</style></head>
<body>
<h1>attention explorer: __TITLE__</h1>
<div id="controls">
  <label>layer <select id="layer"></select></label>
  <label>head <select id="head"></select></label>
  <span class="note">hover a token to see what it attends to; click to pin (click again to unpin); arrows move</span>
</div>
<div id="main">
  <div id="text"></div>
  <div id="side">
    <table id="grid"></table>
    <div class="note">P: prefix-matching score, C: copying score (logits) of each head on a repeated random
sequence (insight/induction.py); an induction head has both high.</div>
    <div id="info"></div>
  </div>
</div>
<script type="application/json" id="meta">__META__</script>
<script type="text/plain" id="weights">__WEIGHTS__</script>
<script>
"use strict";
const META = JSON.parse(document.getElementById("meta").textContent);
const L = META.layers, H = META.heads, T = META.tokens.length, CAUSAL = META.causal;
const SCALE = 65535;
const W = (() => {  // the quantised weights, per head the rows one after another
  const bin = atob(document.getElementById("weights").textContent.trim());
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Uint16Array(bytes.buffer);  // little-endian: the byte order of every platform browsers run on
})();
const PER_HEAD = CAUSAL ? T * (T + 1) / 2 : T * T;
const rowStart = t => CAUSAL ? t * (t + 1) / 2 : t * T;
const state = { layer: 0, head: "mean", pinned: null, hover: null };

function row(layer, head, t) {  // the weights query t gives every key: Float64Array(T), zero past t in a decoder
  const out = new Float64Array(T);
  const heads = head === "mean" ? [...Array(H).keys()] : [head];
  const n = CAUSAL ? t + 1 : T;
  for (const h of heads) {
    const base = (layer * H + h) * PER_HEAD + rowStart(t);
    for (let s = 0; s < n; s++) out[s] += W[base + s] / SCALE;
  }
  if (heads.length > 1) for (let s = 0; s < n; s++) out[s] /= heads.length;
  return out;
}

const spans = [];
function buildText() {
  const box = document.getElementById("text");
  META.tokens.forEach((tok, i) => {
    const span = document.createElement("span");
    span.className = "tok"; span.textContent = tok; span.dataset.i = i; span.id = "tok-" + i;
    span.addEventListener("mouseenter", () => { state.hover = i; shade(); });
    span.addEventListener("click", () => { state.pinned = state.pinned === i ? null : i; shade(); });
    box.appendChild(span); spans.push(span);
    if (META.newline[i]) box.appendChild(document.createElement("br"));
  });
  box.addEventListener("mouseleave", () => { state.hover = null; shade(); });
  document.addEventListener("keydown", e => {
    if (e.key !== "ArrowLeft" && e.key !== "ArrowRight") return;
    const t = state.pinned === null ? 0 : state.pinned + (e.key === "ArrowRight" ? 1 : -1);
    state.pinned = Math.max(0, Math.min(T - 1, t)); shade();
  });
}

function shade() {
  const q = state.pinned !== null ? state.pinned : state.hover;
  const w = q === null ? null : row(state.layer, state.head, q);
  spans.forEach((span, s) => {
    span.classList.toggle("query", s === q);
    span.classList.toggle("pinned", s === state.pinned);
    if (w === null || s === q && s === state.pinned) {
      span.style.backgroundColor = ""; span.dataset.weight = w === null ? "" : w[s].toFixed(6);
    } else {
      span.style.backgroundColor = "rgba(214, 39, 40, " + Math.sqrt(w[s]).toFixed(4) + ")";
      span.dataset.weight = w[s].toFixed(6);
    }
  });
  document.querySelectorAll("#grid canvas").forEach(c =>
    c.classList.toggle("current", +c.dataset.layer === state.layer && c.dataset.head === String(state.head)));
  const info = document.getElementById("info");
  if (w === null) { info.textContent = ""; return; }
  const top = [...w.keys()].sort((a, b) => w[b] - w[a]).slice(0, 5);
  info.textContent = "query #" + q + " " + JSON.stringify(META.tokens[q]) + ", layer " + state.layer + ", " +
    (state.head === "mean" ? "mean of heads" : "head " + state.head) + "\ntop keys:\n" +
    top.map(s => "  #" + s + " " + JSON.stringify(META.tokens[s]) + "  " + w[s].toFixed(3)).join("\n");
}

function thumbnail(layer, head) {  // a canvas of at most 64 x 64 cells, each the largest weight it covers
  const n = Math.min(T, 64), bin = T / n;
  const canvas = document.createElement("canvas");
  canvas.width = n; canvas.height = n;
  const ctx = canvas.getContext("2d"), img = ctx.createImageData(n, n);
  const cells = new Float64Array(n * n);
  for (let t = 0; t < T; t++) {
    const w = row(layer, head, t), i = Math.floor(t / bin);
    for (let s = 0; s < T; s++) {
      const j = Math.floor(s / bin), k = i * n + j;
      if (w[s] > cells[k]) cells[k] = w[s];
    }
  }
  for (let k = 0; k < n * n; k++) {
    const v = Math.sqrt(cells[k]);
    img.data[4 * k] = 255 - Math.round(41 * v); img.data[4 * k + 1] = 255 - Math.round(216 * v);
    img.data[4 * k + 2] = 255 - Math.round(215 * v); img.data[4 * k + 3] = 255;
  }
  ctx.putImageData(img, 0, 0);
  canvas.dataset.layer = layer; canvas.dataset.head = String(head);
  canvas.title = "layer " + layer + ", " + (head === "mean" ? "mean of heads" : "head " + head);
  canvas.addEventListener("click", () => { select(layer, head); });
  return canvas;
}

function buildGrid() {
  const grid = document.getElementById("grid");
  const headRow = grid.insertRow();
  headRow.appendChild(document.createElement("th"));
  for (let h = 0; h <= H; h++) {
    const th = document.createElement("th"); th.textContent = h < H ? "head " + h : "mean"; headRow.appendChild(th);
  }
  for (let l = 0; l < L; l++) {
    const tr = grid.insertRow();
    const th = document.createElement("th"); th.textContent = "layer " + l; tr.appendChild(th);
    for (let h = 0; h <= H; h++) {
      const head = h < H ? h : "mean", td = tr.insertCell();
      td.appendChild(thumbnail(l, head));
      const cap = document.createElement("div");
      cap.className = "score"; cap.id = "score-" + l + "-" + head;
      cap.textContent = h < H ? "P " + META.prefix[l][h].toFixed(2) + " C " + META.copy[l][h].toFixed(2) : "";
      td.appendChild(cap);
    }
  }
}

function select(layer, head) {
  state.layer = layer; state.head = head;
  document.getElementById("layer").value = String(layer);
  document.getElementById("head").value = String(head);
  shade();
}

function buildControls() {
  const layer = document.getElementById("layer"), head = document.getElementById("head");
  for (let l = 0; l < L; l++) layer.add(new Option(String(l), String(l)));
  head.add(new Option("mean", "mean"));
  for (let h = 0; h < H; h++) head.add(new Option(String(h), String(h)));
  layer.value = "0"; head.value = "mean";
  layer.addEventListener("change", () => select(+layer.value, state.head));
  head.addEventListener("change", () => select(state.layer, head.value === "mean" ? "mean" : +head.value));
}

buildControls(); buildText(); buildGrid(); shade();
document.body.dataset.ready = "1";
</script>
</body></html>
"""
