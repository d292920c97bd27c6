// Drawing shared by the live page (app.js) and the report (report.js): SVG charts,
// Python highlighting, a trajectory as a conversation.  No libraries, no build step.
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";
const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"];

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"})[c]);
}

function fmt(v) {
  if (v === null || v === undefined || v === "") return "";
  if (typeof v !== "number") return esc(v);
  const a = Math.abs(v);
  // Tiny and huge values (a mismatch of 2e-6 nats) in exponent form: fixed digits overflow the axis.
  if (a >= 1e6 || (a > 0 && a < 1e-3)) return v.toExponential(1).replace("e+", "e");
  if (Number.isInteger(v)) return String(v);
  return a >= 100 ? v.toFixed(1) : v.toPrecision(3);
}

function el(tag, attrs = {}, parent = null) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVGNS, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

// Exponential moving average with TensorBoard's debiasing; weight 0 is the raw series.
function smooth(ys, weight) {
  if (!weight) return ys;
  let last = 0, n = 0;
  return ys.map((y) => { last = last * weight + (1 - weight) * y; n++; return last / (1 - Math.pow(weight, n)); });
}

function niceTicks(lo, hi, count) {
  if (lo === hi) { lo -= 1; hi += 1; }
  const step = Math.pow(10, Math.floor(Math.log10((hi - lo) / count)));
  const err = (hi - lo) / count / step;
  const mult = err >= 7.5 ? 10 : err >= 3.5 ? 5 : err >= 1.5 ? 2 : 1;
  const s = step * mult, ticks = [];
  for (let t = Math.ceil(lo / s) * s; t <= hi + 1e-12; t += s) ticks.push(+t.toPrecision(12));
  return ticks;
}

// series: [{name, xs, ys}]; stacked: bars summed per x (phase times).
function lineChart(parent, title, series, opts = {}) {
  const W = opts.width || 560, H = opts.height || 260, L = 52, R = 12, T = 26, B = 34;
  const box = el("div", {class: "chart-box"}, parent);
  const svg = el("svg:svg", {class: "chart", width: W, height: H, viewBox: `0 0 ${W} ${H}`, "data-title": title}, box);
  el("svg:text", {x: L, y: 16, class: "chart-title"}, svg).textContent = title;
  series = series.filter((s) => s.xs.length);
  if (!series.length) { el("svg:text", {x: W / 2, y: H / 2, class: "empty"}, svg).textContent = "no data yet"; return svg; }
  const xs = series.flatMap((s) => s.xs);
  let ys = series.flatMap((s) => s.ys);
  if (opts.stacked) {
    const totals = {};
    series.forEach((s) => s.xs.forEach((x, i) => { totals[x] = (totals[x] || 0) + s.ys[i]; }));
    ys = Object.values(totals).concat([0]);
  }
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  let xt = niceTicks(x0, x1, 6);
  const yt = niceTicks(y0, y1, 5);
  if (xs.every(Number.isInteger) && xt.filter(Number.isInteger).length >= 2) xt = xt.filter(Number.isInteger);  // steps
  const xl = Math.min(x0, xt[0]), xh = Math.max(x1, xt[xt.length - 1]);
  const yl = Math.min(y0, yt[0]), yh = Math.max(y1, yt[yt.length - 1]);
  const sx = (x) => L + (W - L - R) * (xh === xl ? 0.5 : (x - xl) / (xh - xl));
  const sy = (y) => H - B - (H - T - B) * (yh === yl ? 0.5 : (y - yl) / (yh - yl));
  for (const t of yt) {
    el("svg:line", {x1: L, x2: W - R, y1: sy(t), y2: sy(t), class: "grid"}, svg);
    el("svg:text", {x: L - 4, y: sy(t) + 4, class: "tick", "text-anchor": "end"}, svg).textContent = fmt(t);
  }
  for (const t of xt) el("svg:text", {x: sx(t), y: H - B + 14, class: "tick", "text-anchor": "middle"}, svg).textContent = fmt(t);
  el("svg:text", {x: (L + W - R) / 2, y: H - 4, class: "tick", "text-anchor": "middle"}, svg).textContent = opts.xlabel || "step";
  if (opts.stacked) {
    const base = {};
    const bw = Math.max(2, (W - L - R) / Math.max(1, new Set(xs).size) * 0.7);
    series.forEach((s, k) => s.xs.forEach((x, i) => {
      const b = base[x] || 0, top = b + s.ys[i];
      el("svg:rect", {x: sx(x) - bw / 2, y: sy(top), width: bw, height: Math.max(0, sy(b) - sy(top)),
        fill: PALETTE[k % PALETTE.length], class: "series"}, svg);
      base[x] = top;
    }));
  } else {
    series.forEach((s, k) => {
      const d = s.xs.map((x, i) => `${i ? "L" : "M"}${sx(x).toFixed(1)},${sy(s.ys[i]).toFixed(1)}`).join("");
      el("svg:path", {d, class: "series", stroke: PALETTE[k % PALETTE.length], "data-points": s.xs.length}, svg);
      if (s.xs.length < 30) s.xs.forEach((x, i) => el("svg:circle", {cx: sx(x), cy: sy(s.ys[i]), r: 2.5, fill: PALETTE[k % PALETTE.length]}, svg));
    });
  }
  const legend = el("div", {class: "legend"}, box);
  series.forEach((s, k) => { legend.insertAdjacentHTML("beforeend", `<span><i style="background:${PALETTE[k % PALETTE.length]}"></i>${esc(s.name)}</span>`); });
  return svg;
}

// Series of metric `key` from metrics.jsonl records; x is the step or minutes since the first record.
function seriesOf(records, key, xaxis, weight) {
  const pts = records.filter((r) => typeof r[key] === "number" && isFinite(r[key]));
  const t0 = records.length && records[0].wall_time ? records[0].wall_time : 0;
  const xs = pts.map((r) => (xaxis === "wall" ? ((r.wall_time || t0) - t0) / 60 : r.step));
  // Evaluations are a few points each measured once: smoothing would draw values nobody measured.
  return {name: key, xs, ys: smooth(pts.map((r) => r[key]), key.startsWith("eval/") ? 0 : weight)};
}

function numericKeys(records) {
  const keys = new Set();
  for (const r of records) for (const [k, v] of Object.entries(r)) if (typeof v === "number" && k !== "step" && k !== "wall_time") keys.add(k);
  return [...keys].sort();
}

const PY_KEYWORDS = new Set(("False None True and as assert async await break class continue def del elif else except finally for " +
  "from global if import in is lambda nonlocal not or pass raise return try while with yield print range len").split(" "));

function highlightPython(code) {
  const re = /(#[^\n]*)|("""[\s\S]*?"""|'''[\s\S]*?'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')|\b(\d+(?:\.\d+)?)\b|\b([A-Za-z_]\w*)\b/g;
  let out = "", last = 0, m;
  while ((m = re.exec(code))) {
    out += esc(code.slice(last, m.index));
    if (m[1]) out += `<span class="tok-com">${esc(m[1])}</span>`;
    else if (m[2]) out += `<span class="tok-str">${esc(m[2])}</span>`;
    else if (m[3]) out += `<span class="tok-num">${esc(m[3])}</span>`;
    else out += PY_KEYWORDS.has(m[4]) ? `<span class="tok-kw">${m[4]}</span>` : esc(m[4]);
    last = re.lastIndex;
  }
  return out + esc(code.slice(last));
}

// A trajectory record as a conversation; showMask colours trained and masked text.
function renderConversation(rec, showMask) {
  let html = `<div class="answers"><div><h4>final answer</h4><div class="ans">${esc(rec.answer) || "<em>none</em>"}</div></div>` +
    `<div><h4>gold answer</h4><div class="ans">${esc(rec.gold) || "<em>unknown</em>"}</div></div></div>`;
  if (rec.problem) html += `<div class="msg user"><div class="who">problem ${esc(rec.problem_id)}</div><pre>${esc(rec.problem)}</pre></div>`;
  rec.turns.forEach((t, k) => {
    const trained = showMask ? `<span class="mask-note">${t.trained_tokens} of ${t.generated_tokens + t.appended_tokens} tokens trained</span>` : "";
    html += `<div class="msg assistant${showMask ? " trained" : ""}"><div class="who">turn ${k + 1} · model · weights v${t.weight_version} · ${t.generated_tokens} tokens ${trained}</div><pre>${esc(t.text)}</pre></div>`;
    for (const c of t.tools) {
      html += `<div class="msg tool"><div class="who">${esc(c.name)} · <span class="status-${esc(c.status)}">${esc(c.status)}</span> · ${c.duration_s.toFixed(2)} s</div>` +
        `<pre class="code"><code>${highlightPython(c.code)}</code></pre><pre class="output">${esc(c.output)}</pre></div>`;
    }
    if (showMask && t.tool_text) html += `<div class="msg masked"><div class="who">appended tool turn · ${t.appended_tokens} tokens · masked out of the loss</div><pre>${esc(t.tool_text)}</pre></div>`;
  });
  if (rec.error) html += `<div class="msg error"><div class="who">error</div><pre>${esc(rec.error)}</pre></div>`;
  return html;
}
