"""The explorer page's HTML, CSS and JavaScript (insight/explorer_html.py fills in __TITLE__, __META__, __WEIGHTS__).

Plain JavaScript, no library, nothing fetched: the file works from disk with the network off.
Page state: layer, head (a number or 'mean'), the pinned query token (click; click again to unpin) and the hovered
one (shown while nothing is pinned). Each key token's span gets a background whose opacity is sqrt(weight) (small
weights stay visible, as in the PNG maps) and data-weight = the weight, 6 decimals.
The queries are META.tokens. Without META.source (self-attention) they are the keys too, one text (spans .tok);
with it (an encoder-decoder's cross-attention) the target's tokens (.tok) are the queries in one row and the
source's (.src) the keys in another, and the thumbnails are T x S.
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
#text .side { font: 12px system-ui, sans-serif; color: #666; margin: 10px 0 0; }
.tok { cursor: pointer; border-radius: 2px; outline-offset: 1px; }
.src { border-radius: 2px; }
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
  <span class="note" id="hint">hover a token to see what it attends to; click to pin (click again to unpin); arrows
move</span>
</div>
<div id="main">
  <div id="text"></div>
  <div id="side">
    <table id="grid"></table>
    <div class="note" id="scores-note">P: prefix-matching score, C: copying score (logits) of each head on a
repeated random sequence (insight/induction.py); an induction head has both high.</div>
    <div id="info"></div>
  </div>
</div>
<script type="application/json" id="meta">__META__</script>
<script type="text/plain" id="weights">__WEIGHTS__</script>
<script>
"use strict";
const META = JSON.parse(document.getElementById("meta").textContent);
const CROSS = "source" in META;  // queries: the target's tokens; keys: the source's
const L = META.layers, H = META.heads, T = META.tokens.length, CAUSAL = META.causal;
const KEYS = CROSS ? META.source : META.tokens, S = KEYS.length;
const SCALE = 65535;
const W = (() => {  // the quantised weights, per head the rows one after another
  const bin = atob(document.getElementById("weights").textContent.trim());
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Uint16Array(bytes.buffer);  // little-endian: the byte order of every platform browsers run on
})();
const PER_HEAD = CAUSAL ? T * (T + 1) / 2 : T * S;
const rowStart = t => CAUSAL ? t * (t + 1) / 2 : t * S;
const state = { layer: 0, head: "mean", pinned: null, hover: null };

function row(layer, head, t) {  // the weights query t gives every key: Float64Array(S), zero past t in a decoder
  const out = new Float64Array(S);
  const heads = head === "mean" ? [...Array(H).keys()] : [head];
  const n = CAUSAL ? t + 1 : S;
  for (const h of heads) {
    const base = (layer * H + h) * PER_HEAD + rowStart(t);
    for (let s = 0; s < n; s++) out[s] += W[base + s] / SCALE;
  }
  if (heads.length > 1) for (let s = 0; s < n; s++) out[s] /= heads.length;
  return out;
}

const spans = [], keySpans = [];  // the query tokens' spans; the keys' (the same spans without CROSS)
function tokenRow(box, tokens, newline, cls, prefix) {
  return tokens.map((tok, i) => {
    const span = document.createElement("span");
    span.className = cls; span.textContent = tok; span.dataset.i = i; span.id = prefix + i;
    box.appendChild(span);
    for (let k = 0; k < newline[i]; k++) box.appendChild(document.createElement("br"));  // "\n\n": a blank line
    return span;
  });
}

function heading(box, text) {
  const div = document.createElement("div"); div.className = "side"; div.textContent = text; box.appendChild(div);
  const line = document.createElement("div"); box.appendChild(line);
  return line;
}

function buildText() {
  const box = document.getElementById("text");
  const queries = CROSS ? heading(box, "target (each token: the decoder step that writes it)") : box;
  spans.push(...tokenRow(queries, META.tokens, META.newline, "tok", "tok-"));
  keySpans.push(...(CROSS ? tokenRow(heading(box, "source"), META.source, META.source_newline, "src", "src-")
                          : spans));
  spans.forEach((span, i) => {
    span.addEventListener("mouseenter", () => { state.hover = i; shade(); });
    span.addEventListener("click", () => { state.pinned = state.pinned === i ? null : i; shade(); });
  });
  queries.addEventListener("mouseleave", () => { state.hover = null; shade(); });
  document.addEventListener("keydown", e => {
    if (e.key !== "ArrowLeft" && e.key !== "ArrowRight") return;
    const t = state.pinned === null ? 0 : state.pinned + (e.key === "ArrowRight" ? 1 : -1);
    state.pinned = Math.max(0, Math.min(T - 1, t)); shade();
  });
}

function shade() {
  const q = state.pinned !== null ? state.pinned : state.hover;
  const w = q === null ? null : row(state.layer, state.head, q);
  spans.forEach((span, t) => {
    span.classList.toggle("query", t === q);
    span.classList.toggle("pinned", t === state.pinned);
  });
  keySpans.forEach((span, s) => {  // a self-attention page does not shade the pinned query itself
    if (w === null || !CROSS && s === q && s === state.pinned) {
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
  info.textContent = (CROSS ? "target #" : "query #") + q + " " + JSON.stringify(META.tokens[q]) + ", layer " +
    state.layer + ", " + (state.head === "mean" ? "mean of heads" : "head " + state.head) +
    (CROSS ? "\ntop source tokens:\n" : "\ntop keys:\n") +
    top.map(s => "  #" + s + " " + JSON.stringify(KEYS[s]) + "  " + w[s].toFixed(3)).join("\n");
}

function thumbnail(layer, head) {  // a canvas of at most 64 x 64 cells, each the largest weight it covers
  const n = Math.min(T, 64), m = Math.min(S, 64), bin = T / n, keyBin = S / m;
  const canvas = document.createElement("canvas");
  canvas.width = m; canvas.height = n;
  if (CROSS) canvas.style.height = Math.round(64 * Math.min(2, Math.max(0.25, n / m))) + "px";  // T x S's shape
  const ctx = canvas.getContext("2d"), img = ctx.createImageData(m, n);
  const cells = new Float64Array(n * m);
  for (let t = 0; t < T; t++) {
    const w = row(layer, head, t), i = Math.floor(t / bin);
    for (let s = 0; s < S; s++) {
      const j = Math.floor(s / keyBin), k = i * m + j;
      if (w[s] > cells[k]) cells[k] = w[s];
    }
  }
  for (let k = 0; k < n * m; k++) {
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
      cap.textContent = h < H && !CROSS && META.prefix  // null: a context too short for the probe
        ? "P " + META.prefix[l][h].toFixed(2) + " C " + META.copy[l][h].toFixed(2) : "";
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

if (CROSS || !META.prefix) {  // the induction scores belong to self-attention heads, and need room for the probe
  document.getElementById("scores-note").hidden = true;
}
if (CROSS) {
  document.getElementById("hint").textContent = "hover a target token to see which source tokens it reads; " +
    "click to pin (click again to unpin); arrows move";
}
buildControls(); buildText(); buildGrid(); shade();
document.body.dataset.ready = "1";
</script>
</body></html>
"""
