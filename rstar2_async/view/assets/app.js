// The live page of `rstar2 view`: curves, the trajectory table, a trajectory, a group.
// State lives in the URL hash (#/page?key=value...), so every view is a link; the
// page polls the server and redraws what changed.
"use strict";

const POLL_MS = 2500;
const state = {records: [], run: null, timer: null};

async function getJSON(url) {
  const r = await fetch(url);
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

function route() {
  const [path, qs] = (location.hash.slice(1) || "/curves").split("?");
  return {page: path.replace(/^\//, "") || "curves", params: new URLSearchParams(qs || "")};
}

function go(page, params) {
  const qs = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== "" && v !== null && v !== undefined)).toString();
  location.hash = `#/${page}${qs ? "?" + qs : ""}`;
}

async function refreshMetrics() {
  const got = await getJSON(`/api/metrics?since=${state.records.length}`);
  state.records.push(...got.records);
  return got.records.length > 0;
}

function drawCurves(main, params) {
  const keys = numericKeys(state.records);
  const chosen = (params.get("m") || "rollout/reward_mean").split(",").filter((k) => keys.includes(k));
  const weight = parseFloat(params.get("smooth") ?? "0.6");
  const xaxis = params.get("x") || "step";
  main.innerHTML = `<div class="controls">x: <select id="xaxis"><option value="step">RL step</option><option value="wall">wall time (min)</option></select>
    smoothing <input id="smooth" type="range" min="0" max="0.95" step="0.05" value="${weight}"> <span>${weight}</span></div>
    <div class="curves"><div class="metric-list" id="metric-list"></div><div id="charts" class="charts"></div></div>`;
  main.querySelector("#xaxis").value = xaxis;
  const update = (patch) => go("curves", {m: chosen.join(","), smooth: weight, x: xaxis, ...patch});
  main.querySelector("#xaxis").onchange = (e) => update({x: e.target.value});
  main.querySelector("#smooth").onchange = (e) => update({smooth: e.target.value});
  const list = main.querySelector("#metric-list");
  for (const k of keys) {
    const lab = el("label", {}, list);
    const box = el("input", {type: "checkbox", value: k}, lab);
    box.checked = chosen.includes(k);
    lab.append(" " + k);
    box.onchange = () => update({m: box.checked ? [...chosen, k].join(",") : chosen.filter((c) => c !== k).join(",")});
  }
  const charts = main.querySelector("#charts");
  const xlabel = xaxis === "wall" ? "wall time (min)" : "RL step";
  lineChart(charts, "selected metrics", chosen.map((k) => seriesOf(state.records, k, xaxis, weight)), {xlabel});
  const evals = keys.filter((k) => k.startsWith("eval/"));
  lineChart(charts, "held-out accuracy", evals.map((k) => seriesOf(state.records, k, xaxis, 0)), {xlabel});
  const phases = keys.filter((k) => k.startsWith("time/") && k.endsWith("_s"));
  lineChart(charts, "phase times per step (s)", phases.map((k) => seriesOf(state.records, k, xaxis, 0)), {xlabel, stacked: true});
}

const FILTERS = ["source", "step", "reward_min", "reward_max", "finish", "roc", "problem", "q", "sort", "desc", "page"];
const COLUMNS = [["step", "step"], ["problem_id", "problem"], ["sample_index", "#"], ["reward", "reward"], ["turns", "turns"],
  ["tool_calls", "tools"], ["tool_errors", "errors"], ["response_tokens", "tokens"], ["finish_reason", "finish"],
  ["weight_version", "weights"], ["roc", "RoC"], ["penalty", "penalty"]];

async function drawTable(main, params) {
  const p = Object.fromEntries(FILTERS.map((k) => [k, params.get(k) || ""]));
  p.source = p.source || (state.run.sources[0] || "train");
  const page = await getJSON("/api/table?" + new URLSearchParams(p));
  const opt = (vals, cur) => vals.map(([v, l]) => `<option value="${esc(v)}"${v === cur ? " selected" : ""}>${esc(l)}</option>`).join("");
  const steps = [["", "all steps"], ...state.run.steps.map((s) => [String(s), `step ${s}`])];
  main.innerHTML = `<form id="filters" class="controls">
    <select name="source">${opt(state.run.sources.map((s) => [s, s]), p.source)}</select>
    <select name="step">${opt(steps, p.step)}</select>
    reward <input name="reward_min" size="4" placeholder="min" value="${esc(p.reward_min)}"> – <input name="reward_max" size="4" placeholder="max" value="${esc(p.reward_max)}">
    <select name="finish">${opt([["", "any finish"], ["answer", "answer"], ["turn_limit", "turn limit"], ["token_budget", "token budget"], ["timeout", "timeout"], ["error", "error"]], p.finish)}</select>
    <select name="roc">${opt([["", "kept or dropped"], ["kept", "kept"], ["dropped", "dropped"], ["all_equal_rewards", "dropped: all equal"], ["negative_downsampled", "dropped: negative"], ["positive_penalty", "dropped: penalty"], ["positive_sampled_out", "dropped: sampled out"], ["infra_failed", "dropped: infrastructure failed"], ["infra_group", "dropped: its group's infrastructure failed"]], p.roc)}</select>
    <input name="problem" placeholder="problem id" size="10" value="${esc(p.problem)}">
    <input name="q" placeholder="search text" size="16" value="${esc(p.q)}">
    <button type="submit">filter</button></form>
    <p><span id="total" data-total="${page.total}">${page.total}</span> trajectories · page ${page.page + 1} of ${Math.max(1, Math.ceil(page.total / page.size))}
    <button id="prev"${page.page ? "" : " disabled"}>‹ prev</button> <button id="next"${(page.page + 1) * page.size < page.total ? "" : " disabled"}>next ›</button></p>
    <table class="traj"><thead><tr>${COLUMNS.map(([k, l]) => `<th data-sort="${k}">${l}${p.sort === k ? (p.desc ? " ▼" : " ▲") : ""}</th>`).join("")}</tr></thead>
    <tbody>${page.rows.map((r) => `<tr class="traj-row" data-i="${r.i}">` + COLUMNS.map(([k]) => k === "problem_id"
      ? `<td><a href="#/group?source=${encodeURIComponent(p.source)}&step=${r.step}&problem=${encodeURIComponent(r.problem_id)}">${esc(r.problem_id)}</a></td>`
      : `<td class="c-${k} ${k === "roc" ? (r.roc === "kept" ? "kept" : "dropped") : ""}">${fmt(r[k])}</td>`).join("") + "</tr>").join("")}</tbody></table>`;
  const form = main.querySelector("#filters");
  form.onsubmit = (e) => { e.preventDefault(); go("trajectories", {...p, ...Object.fromEntries(new FormData(form)), page: ""}); };
  form.querySelectorAll("select").forEach((s) => { s.onchange = () => form.requestSubmit(); });
  main.querySelector("#prev").onclick = () => go("trajectories", {...p, page: page.page - 1});
  main.querySelector("#next").onclick = () => go("trajectories", {...p, page: page.page + 1});
  main.querySelectorAll("th").forEach((th) => { th.onclick = () => go("trajectories", {...p, sort: th.dataset.sort, desc: p.sort === th.dataset.sort && !p.desc ? "1" : "", page: ""}); });
  main.querySelectorAll("tr.traj-row").forEach((tr) => { tr.onclick = (e) => { if (e.target.tagName !== "A") go("trajectory", {source: p.source, i: tr.dataset.i}); }; });
}

async function drawTrajectory(main, params) {
  const source = params.get("source") || "train", mask = params.get("mask") === "1";
  const rec = await getJSON(`/api/trajectory?source=${encodeURIComponent(source)}&i=${params.get("i")}`);
  main.innerHTML = `<div class="controls"><b>${esc(rec.problem_id)}</b> sample ${rec.sample_index} · step ${rec.step} · reward ${fmt(rec.reward)} ·
    ${esc(rec.finish_reason)} · ${rec.response_tokens} tokens · RoC <span class="${rec.roc === "kept" ? "kept" : "dropped"}">${esc(rec.roc || "n/a")}</span> (penalty ${fmt(rec.penalty)})
    <label><input type="checkbox" id="mask"${mask ? " checked" : ""}> show the loss mask</label>
    <a href="#/group?source=${encodeURIComponent(source)}&step=${rec.step}&problem=${encodeURIComponent(rec.problem_id)}">its group</a></div>
    <div class="conversation">${renderConversation(rec, mask)}</div>`;
  main.querySelector("#mask").onchange = (e) => go("trajectory", {source, i: params.get("i"), mask: e.target.checked ? "1" : ""});
}

async function drawGroup(main, params) {
  const source = params.get("source") || "train";
  const rows = await getJSON(`/api/group?source=${encodeURIComponent(source)}&step=${params.get("step")}&problem=${encodeURIComponent(params.get("problem"))}`);
  const first = rows[0] || {};
  main.innerHTML = `<h3>${esc(params.get("problem"))} · step ${esc(params.get("step"))} · ${rows.length} samples · gold ${esc(first.gold)}</h3>
    ${first.problem ? `<pre class="problem">${esc(first.problem)}</pre>` : ""}
    <div class="group">${rows.map((r) => `<a class="sample ${r.reward > 0.5 ? "pos" : "neg"} ${r.roc === "kept" ? "kept" : "dropped"}" href="#/trajectory?source=${encodeURIComponent(source)}&i=${r.i}">
      <b>#${r.sample_index}</b> reward ${fmt(r.reward)}<br>${esc(r.roc || "n/a")}<br>penalty ${fmt(r.penalty)}<br>${r.turns} turns · ${esc(r.finish_reason)}<br><span class="ans">${esc(r.answer) || "—"}</span></a>`).join("")}</div>`;
}

async function render() {
  const {page, params} = route();
  const main = document.getElementById("main");
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.dataset.page === page || (page !== "curves" && a.dataset.page === "trajectories" && page !== "curves")));
  try {
    if (page === "curves") { await refreshMetrics(); drawCurves(main, params); }
    else if (page === "trajectories") await drawTable(main, params);
    else if (page === "trajectory") await drawTrajectory(main, params);
    else if (page === "group") await drawGroup(main, params);
    else main.textContent = "no such page";
    main.dataset.ready = "1";
  } catch (err) {
    main.innerHTML = `<p class="error">${esc(err.message)}</p>`;
  }
}

// Live: new metrics redraw the curves; a grown run redraws the table (not a record page: it does not change).
async function poll() {
  try {
    const run = await getJSON("/api/run");
    const grew = JSON.stringify(run) !== JSON.stringify(state.run);
    state.run = run;
    const {page} = route();
    if (page === "curves" && (await refreshMetrics())) drawCurves(document.getElementById("main"), route().params);
    else if (page === "trajectories" && grew) await render();
  } finally {
    state.timer = setTimeout(poll, POLL_MS);
  }
}

window.addEventListener("hashchange", render);
window.addEventListener("DOMContentLoaded", async () => {
  try {
    state.run = await getJSON("/api/run");
    document.getElementById("run-name").textContent = state.run.name;
  } catch (err) {
    document.getElementById("main").innerHTML = `<p class="error">${esc(err.message)}</p>`;
    return;
  }
  await render();
  state.timer = setTimeout(poll, POLL_MS);
});
