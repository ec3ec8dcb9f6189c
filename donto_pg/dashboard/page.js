"use strict";
const POLL_MS = __POLL_MS__;
const SVGNS = "http://www.w3.org/2000/svg";
const FATES = [
  ["healthy", "healthy", "facts extracted and anchored to the source"],
  ["degraded", "degraded", "extracted, anchored nothing"],
  ["broken", "broken", "extracted nothing"],
  ["injected", "injected", "answered the source instead (a kind of broken)"],
];
const COLOURS = {healthy: "#2e7d32", degraded: "#e69500", broken: "#c62828",
  injected: "#7b1fa2", bar: "#5c7a99"};
const ARM_COLOURS = {vector: "#0072B2", lexical: "#E69F00", hybrid: "#009E73",
  random: "#999999"};
const SPARE = ["#CC79A7", "#D55E00", "#56B4E9", "#000000"];
let polls = 0, failures = 0, chosenK = null, lastOk = null;

/* DOM helpers: text only ever goes through text nodes and setAttribute. */
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined && v !== false) el.setAttribute(k, String(v));
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}
function s(tag, attrs, ...kids) {
  const el = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}
const fmt = (x, d = 3) => (x === null || x === undefined || Number.isNaN(x)) ? "\u2013"
  : (typeof x === "number" ? (Number.isInteger(x) ? String(x) : x.toFixed(d)) : String(x));
const rate = (x, d = 3) => (x === null || x === undefined || Number.isNaN(Number(x)))
  ? "\u2013" : Number(x).toFixed(d);
const when = (iso) => iso ? new Date(iso).toLocaleString() : "\u2013";

function fateLegend() {
  return h("div", {class: "card legend", id: "legend"}, FATES.map(([f, label, what]) =>
    h("span", {class: "item"}, h("span", {class: "sw fate-" + f}),
      h("b", {}, label), " \u2014 " + what)));
}

function counts(c, attrs) {
  const chips = FATES.map(([f, label, what]) =>
    h("div", {class: "count fate-" + f, title: what},
      h("span", Object.assign({class: "n", "data-count": f}, attrs), fmt(c[f] || 0)),
      h("span", {class: "what"}, label + " \u00b7 " + what)));
  chips.push(h("div", {class: "count facts"},
    h("span", Object.assign({class: "n", "data-count": "facts"}, attrs), fmt(c.facts || 0)),
    h("span", {class: "what"}, "facts extracted")));
  return h("div", {class: "counts"}, chips);
}

function fateBar(c) {
  const total = (c.healthy || 0) + (c.degraded || 0) + (c.broken || 0);
  const bar = h("div", {class: "bar", title: "blocks by fate"});
  if (!total) return bar;
  const parts = [["healthy", c.healthy || 0], ["degraded", c.degraded || 0],
    ["broken", (c.broken || 0) - (c.injected || 0)], ["injected", c.injected || 0]];
  for (const [f, n] of parts) {
    if (n <= 0) continue;
    const span = h("span", {class: "fate-" + f, title: f + ": " + n});
    span.style.width = (100 * n / total) + "%";
    bar.append(span);
  }
  return bar;
}

/* A histogram as inline SVG. labels: one per bin; colourOf(i) gives the bar colour. */
function histogram(title, values, labels, colourOf, small) {
  const W = small ? 88 : 210, H = small ? 22 : 70, pad = small ? 0 : 14;
  const max = Math.max(1, ...values), bw = W / values.length;
  const svg = s("svg", {width: W, height: H + pad, viewBox: `0 0 ${W} ${H + pad}`,
    role: "img", "aria-label": title});
  svg.append(s("line", {x1: 0, y1: H, x2: W, y2: H, stroke: "#b0bac5", "stroke-width": 1}));
  values.forEach((v, i) => {
    const bh = v ? Math.max(1.5, (H - 2) * v / max) : 0;
    const r = s("rect", {x: i * bw + 0.5, y: H - bh, width: Math.max(1, bw - 1), height: bh,
      fill: colourOf(i)});
    r.append(s("title", {}, `${labels[i]}: ${v} block${v === 1 ? "" : "s"}`));
    svg.append(r);
  });
  if (!small) {
    svg.append(s("text", {x: 0, y: H + 11, "font-size": 9, fill: "#5f6b7a"}, labels[0]));
    svg.append(s("text", {x: W, y: H + 11, "font-size": 9, fill: "#5f6b7a",
      "text-anchor": "end"}, labels[labels.length - 1]));
    svg.append(s("text", {x: W, y: 9, "font-size": 9, fill: "#5f6b7a", "text-anchor": "end"},
      "max " + max));
  }
  if (small) return h("span", {title: title}, svg);
  return h("div", {class: "hist"}, h("div", {class: "t"}, title), svg);
}
const FACT_LABELS = [...Array(10).keys()].map(String).concat(["10+"]);
const RATE_LABELS = [...Array(10).keys()].map(
  i => `${(i / 10).toFixed(1)}\u2013${((i + 1) / 10).toFixed(1)}`);
function hists(hist, small) {
  return [
    histogram("facts per chunk (0 = broken)", hist.facts, FACT_LABELS,
      i => i === 0 ? COLOURS.broken : COLOURS.bar, small),
    histogram("anchor rate (blocks with facts; <0.1 = degraded)", hist.anchor, RATE_LABELS,
      i => i === 0 ? COLOURS.degraded : COLOURS.healthy, small),
    histogram("hypothesis rate (blocks with facts)", hist.hypothesis, RATE_LABELS,
      () => COLOURS.bar, small),
  ];
}

function alarmBox(run, thresholds) {
  const a = run.alarm, cls = "alarm alarm-" + a.state;
  const limits = `injection rate \u2264 ${thresholds.max_injection}, median dialogue anchor ` +
    `rate \u2265 ${thresholds.min_anchor}`;
  if (a.state === "stopped") {
    return h("div", {class: cls, "data-alarm": "stopped"}, h("b", {}, "ALARM \u2014 run stopped: "),
      (a.recorded && a.recorded.reason) || run.status_reason || "(no reason recorded)");
  }
  const past = a.recorded ? h("div", {class: "muted"}, "earlier alarm " +
    when(a.recorded.at) + ": ", a.recorded.reason || "") : null;
  if (a.state === "tripped") {
    return h("div", {class: cls, "data-alarm": "tripped"},
      h("b", {}, "ALARM would fire: "), a.live, past);
  }
  const st = run.stats || {};
  return h("div", {class: cls, "data-alarm": "ok"}, h("b", {}, "alarm: ok "),
    `(injection rate ${rate(st.injection_rate)}, median dialogue anchor rate ` +
    `${rate(st.median_dialogue_anchor_rate)}; limits: ${limits})`, past);
}

function statusOf(run) {
  const st = run.running ? "running" : (run.status || "none");
  return h("span", {class: "status st-" + st, "data-status": st,
    title: run.status_reason || ""}, st);
}

function runCard(run, thresholds) {
  const st = run.stats || {};
  const c = {healthy: st.healthy, degraded: st.degraded, broken: st.broken,
    injected: st.injected, facts: st.facts};
  const attrs = {"data-run": run.run_id};
  const progress = run.total_blocks ? `${run.blocks_ingested} of ${run.total_blocks} blocks`
    : `${run.blocks_ingested} blocks`;
  const rows = run.conversations.map(g => {
    const ga = {"data-run": run.run_id, "data-document": g.document};
    const cell = (f, v) => h("td", Object.assign({class: "num" + (v ? "" : " zero"),
      "data-count": f}, ga), fmt(v));
    return h("tr", Object.assign({class: "conv"}, ga),
      h("td", {class: "doc"}, g.document, h("div", {class: "muted"}, "revision " + g.revision_id)),
      h("td", {class: "num", "data-count": "blocks"},
        g.total ? `${g.blocks} / ${g.total}` : String(g.blocks)),
      cell("healthy", g.healthy), cell("degraded", g.degraded), cell("broken", g.broken),
      cell("injected", g.injected), cell("facts", g.facts),
      h("td", {class: "num"}, rate(g.median_anchor_rate, 2)),
      h("td", {class: "num"}, rate(g.median_hypothesis_rate, 2)),
      h("td", {}, hists(g.hist, true)));
  });
  return h("div", Object.assign({class: "card run"}, attrs),
    h("div", {class: "runhead"}, h("h3", {class: "label"}, run.label),
      run.is_baseline ? h("span", {class: "tag"}, "offline baseline extractor") : null,
      statusOf(run),
      h("span", {class: "muted"}, `run ${run.run_id} \u00b7 model ${run.model} \u00b7 ` +
        `${progress} ingested \u00b7 started ${when(run.started_at)} \u00b7 last event ` +
        `${when(run.status_at)}`)),
    counts(c, attrs), fateBar(c), alarmBox(run, thresholds),
    h("div", {class: "hists"}, hists(run.hist, false)),
    run.conversations.length ? h("table", {class: "convs"},
      h("thead", {}, h("tr", {},
        h("th", {}, "conversation"), h("th", {class: "num"}, "blocks"),
        h("th", {class: "num"}, "healthy"), h("th", {class: "num"}, "degraded"),
        h("th", {class: "num"}, "broken"), h("th", {class: "num"}, "injected"),
        h("th", {class: "num"}, "facts"), h("th", {class: "num"}, "median anchor"),
        h("th", {class: "num"}, "median hyp."),
        h("th", {}, "facts/chunk \u00b7 anchor \u00b7 hypothesis"))),
      h("tbody", {}, rows)) : h("p", {class: "empty"}, "no block ingested yet"));
}

/* At most two lines of TEXT (whitespace collapsed); the whole excerpt on hover. */
function clamp(text) {
  const t = text === null || text === undefined ? "" : String(text);
  return h("div", {class: "clamp", title: t}, t.replace(/\s+/g, " "));
}

function problemsSection(problems) {
  if (!problems.length) return h("p", {class: "empty", id: "no-problems"},
    "no degraded or broken block");
  const pill = (p) => {
    const f = p.injection ? "injected" : p.fate;
    return h("span", {class: "pill fate-" + f, "data-fate": p.fate}, f);
  };
  return h("table", {id: "problems"},
    h("thead", {}, h("tr", {}, ["run", "conversation", "block", "kind", "fate", "parse",
      "facts", "anchor", "start of the block (text)", "start of the answer (text)"]
      .map(t => h("th", {}, t)))),
    h("tbody", {}, problems.map(p => h("tr", {"data-block": p.block_id},
      h("td", {}, p.run_id), h("td", {}, p.document),
      h("td", {class: "nowrap"}, `#${p.seq}`, h("div", {class: "muted"}, `${p.chars} chars`)),
      h("td", {}, p.kind), h("td", {}, pill(p)),
      h("td", {}, p.parse_status), h("td", {class: "num"}, fmt(p.facts_per_chunk)),
      h("td", {class: "num"}, rate(p.anchor_rate, 2)),
      h("td", {class: "text excerpt"}, clamp(p.excerpt)),
      h("td", {class: "text answer"}, clamp(p.answer))))));
}

function verdictClass(v) {
  const t = String(v).toLowerCase().replace(/[^a-z]/g, "");
  if (t.startsWith("commit")) return "v-commit";
  if (t.startsWith("reprompt")) return "v-reprompt";
  if (t.startsWith("rechunk")) return "v-rechunk";
  if (t.startsWith("reject")) return "v-reject";
  return "v-other";
}
function cellText(v) {
  if (v === null || v === undefined) return "\u2013";
  if (Array.isArray(v)) return v.map(x => typeof x === "object" ? JSON.stringify(x)
    : String(x)).join("; ");
  if (typeof v === "object") return JSON.stringify(v);
  return fmt(v);
}
function gateSection(gate) {
  const box = h("div", {class: "card", id: "gate"});
  if (gate.error) box.append(h("div", {class: "err"}, "A/B gate: " + gate.error));
  if (!gate.relation || !gate.rows.length) {
    box.append(h("p", {class: "empty", "data-empty": "gate"}, "no A/B runs yet"));
    return box;
  }
  box.append(h("div", {class: "muted"}, `from ${gate.relation}`));
  box.append(h("table", {},
    h("thead", {}, h("tr", {}, gate.columns.map(c => h("th", {}, c)))),
    h("tbody", {}, gate.rows.map(r => h("tr", {}, r.map((v, i) =>
      /verdict/i.test(gate.columns[i]) && v !== null
        ? h("td", {}, h("span", {class: "pill " + verdictClass(v), "data-verdict": v}, cellText(v)))
        : h("td", {}, cellText(v))))))));
  return box;
}

function recallChart(report, k) {
  const abilities = Object.keys(report.by_ability || {});
  const groups = abilities.map(a => [a, report.by_ability[a]]);
  for (const g of ["overall", "macro"]) if (report[g]) groups.push([g, report[g]]);
  const arms = report.arms || [];
  const key = "hit@" + k, gw = 104, top = 14, H = 220, left = 34, bottom = 52;
  const W = left + gw * groups.length + 10;
  const svg = s("svg", {width: W, height: top + H + bottom, role: "img", id: "recall-chart",
    "aria-label": `recall ${key} per ability`});
  for (const y of [0, 0.25, 0.5, 0.75, 1]) {
    const yy = top + H - H * y;
    svg.append(s("line", {x1: left, x2: W, y1: yy, y2: yy, stroke: "#e3e8ee"}));
    svg.append(s("text", {x: left - 4, y: yy + 3, "font-size": 9, "text-anchor": "end",
      fill: "#5f6b7a"}, y.toFixed(2)));
  }
  const bw = (gw - 14) / Math.max(1, arms.length);
  groups.forEach(([name, block], j) => {
    const x0 = left + j * gw + 7;
    if (name === "overall") svg.append(s("line", {x1: x0 - 7, x2: x0 - 7, y1: top,
      y2: top + H, stroke: "#8896a5", "stroke-dasharray": "3,3"}));
    arms.forEach((arm, i) => {
      const v = block && block[arm] ? block[arm][key] : null;
      if (v === null || v === undefined) return;
      const r = s("rect", {x: x0 + i * bw, y: top + H - H * v, width: Math.max(1, bw - 1),
        height: H * v, fill: ARM_COLOURS[arm] || SPARE[i % SPARE.length],
        "data-ability": name, "data-arm": arm, "data-value": v});
      r.append(s("title", {}, `${name} \u00b7 ${arm}: ${key} = ${fmt(v)} (n=${block.n})`));
      svg.append(r);
      if (bw >= 14) svg.append(s("text", {x: x0 + i * bw + (bw - 1) / 2, y: top + H - H * v - 3,
        "font-size": 8, "text-anchor": "middle", fill: "#37474f"}, v.toFixed(2)));
    });
    const label = s("text", {x: x0 + (gw - 14) / 2, y: top + H + 13, "font-size": 9,
      "text-anchor": "middle", fill: "#1d232b", class: "ability"});
    String(name).replace(/_/g, " ").split(" ").filter(w => w).reduce((lines, w) => {
      const last = lines[lines.length - 1];
      if (last && (last + " " + w).length <= 18) lines[lines.length - 1] = last + " " + w;
      else lines.push(w);
      return lines;
    }, []).slice(0, 3).forEach((line, n) =>
      label.append(s("tspan", {x: x0 + (gw - 14) / 2, dy: n ? 10 : 0}, line)));
    svg.append(label);
    if (block && block.n !== undefined) svg.append(s("text", {x: x0 + (gw - 14) / 2,
      y: top + H + 44, "font-size": 8, "text-anchor": "middle", fill: "#5f6b7a"},
      `n=${block.n}`));
  });
  return svg;
}
function recallSection(recall) {
  const box = h("div", {class: "card", id: "recall"});
  if (recall.error) box.append(h("div", {class: "err"}, recall.error));
  const r = recall.report;
  if (!r) {
    if (!recall.source) box.append(h("p", {class: "empty", "data-empty": "recall"},
      "no eval report: run `donto-pg eval recall --json > recall.json`, then start the " +
      "dashboard with --eval-json recall.json"));
    return box;
  }
  const ks = r.ks || [];
  if (chosenK === null || !ks.includes(chosenK)) chosenK = ks.includes(10) ? 10 : ks[ks.length - 1];
  const btns = h("div", {}, h("span", {class: "muted"}, "k: "), ks.map(k => {
    const b = h("button", {class: "kbtn" + (k === chosenK ? " on" : ""), type: "button"},
      String(k));
    b.addEventListener("click", () => { chosenK = k; poll(false); });
    return b;
  }));
  box.append(h("div", {class: "muted"}, `${recall.source} \u00b7 ${r.evaluated} questions` +
    ` (${r.excluded_abstention ?? 0} abstention, ${r.excluded_no_gold ?? 0} without gold ` +
    `left out) \u00b7 written ${when(recall.modified)}`), btns);
  box.append(h("div", {class: "legend"}, (r.arms || []).map((arm, i) =>
    h("span", {class: "item"}, (() => { const sw = h("span", {class: "sw"});
      sw.style.background = ARM_COLOURS[arm] || SPARE[i % SPARE.length]; return sw; })(),
      arm))));
  box.append(recallChart(r, chosenK));
  return box;
}

let lastState = null;
function render(state) {
  const main = h("main", {id: "main"},
    fateLegend(),
    state.errors.length ? h("div", {class: "err", id: "errors"}, state.errors.join("\n")) : null,
    h("section", {id: "runs"}, h("h2", {}, "Extraction runs (arms)",
      state.runs_total > state.runs.length
        ? ` \u2014 latest ${state.runs.length} of ${state.runs_total}` : ""),
      state.runs.length ? state.runs.map(r => runCard(r, state.thresholds))
        : h("p", {class: "empty", "data-empty": "runs"}, "no extraction runs yet")),
    h("section", {}, h("h2", {}, "Blocks needing attention (latest degraded or broken)"),
      h("div", {class: "card"}, problemsSection(state.problems))),
    h("section", {}, h("h2", {}, "A/B gate verdicts"), gateSection(state.gate)),
    h("section", {}, h("h2", {}, "Recall hit@k per ability"), recallSection(state.recall)));
  document.getElementById("main").replaceWith(main);
  document.getElementById("db").textContent =
    `database ${state.database} as ${state.user} \u00b7 read ${when(state.generated_at)}`;
}

async function poll(again = true) {
  try {
    if (again || !lastState) {
      // the server's token, from this page's own address (no cookie: a cookie of
      // 127.0.0.1 would go to every local port, another user's server included)
      const token = new URLSearchParams(location.search).get("token") || "";
      const resp = await fetch("/api/state?token=" + encodeURIComponent(token),
                               {cache: "no-store"});
      if (!resp.ok) throw new Error("HTTP " + resp.status + ": " + (await resp.text()));
      lastState = await resp.json();
    }
    render(lastState);
    polls += again ? 1 : 0; failures = 0; lastOk = new Date();
    document.body.dataset.polls = String(polls);
    document.body.dataset.ready = "1";
    const live = document.getElementById("live");
    live.textContent =
      `live \u00b7 updated ${lastOk.toLocaleTimeString()} \u00b7 every ${POLL_MS / 1000} s`;
    live.className = "live";
  } catch (e) {
    failures += 1;
    const live = document.getElementById("live");
    live.textContent = `cannot reach the dashboard server (${e.message}); retrying` +
      (lastOk ? ` \u00b7 last update ${lastOk.toLocaleTimeString()}` : "");
    live.className = "live stale";
  }
  if (again) setTimeout(poll, POLL_MS);
}
poll();
