// The self-contained report of `rstar2 report`: the data is in <script id="data">.
"use strict";

window.addEventListener("DOMContentLoaded", () => {
  const data = JSON.parse(document.getElementById("data").textContent);
  const charts = document.getElementById("charts");
  const keys = numericKeys(data.metrics);
  for (const [title, group] of Object.entries(data.plots)) {
    lineChart(charts, title, group.filter((k) => keys.includes(k)).map((k) => seriesOf(data.metrics, k, "step", 0.6)));
  }
  lineChart(charts, "held-out accuracy", keys.filter((k) => k.startsWith("eval/")).map((k) => seriesOf(data.metrics, k, "step", 0)));
  lineChart(charts, "phase times per step (s)", keys.filter((k) => k.startsWith("time/") && k.endsWith("_s")).map((k) => seriesOf(data.metrics, k, "step", 0)), {stacked: true});
  const samples = document.getElementById("samples");
  for (const step of data.samples) {
    const section = el("section", {class: "step"}, samples);
    section.innerHTML = `<h3>step ${step.step}</h3>` + step.picks.map(([label, rec]) => `<details><summary><b>${label}</b> · ${esc(rec.problem_id)} #${rec.sample_index} ·
      reward ${fmt(rec.reward)} · ${esc(rec.finish_reason)} · ${rec.turns.length} turns · RoC ${esc(rec.roc || "n/a")}</summary>${renderConversation(rec, false)}</details>`).join("");
  }
});
