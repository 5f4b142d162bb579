/* marl-minari view: the page's own script. Charts are uPlot's; lanes (presence, actions,
   masks, turns), the state heatmap and the frames are drawn here. Everything the page needs
   is in the #mm-data element; episodes come from /api/episode/<id> when served, or from the
   sample the file holds. */
(function () {
  "use strict";

  const DATA = JSON.parse(document.getElementById("mm-data").textContent);
  const SUMMARY = DATA.summary;
  const AGENTS = SUMMARY.agents;
  const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
                   "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
  const GUTTER = 150;        // px left of every timeline: lane names and chart axes
  const LANE = 16;           // px of one lane
  const MAX_TABLE_AGENTS = 6; // agent return columns in the table (beyond: lowest/highest)
  const MAX_ROWS = 2000;      // table rows drawn at once (sorting picks which)
  const STEP_TICKS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000,
                      1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6]; // steps are whole numbers

  const state = { sortKey: "id", sortDir: 1, episode: null, charts: [], syncing: false,
                  step: 0 };

  /* Tableau's ten, then hues 47 degrees apart; always #rrggbb, so fills can add alpha. */
  function color(i) {
    if (i < PALETTE.length) return PALETTE[i];
    const h = (i * 47) % 360 / 60, s = 0.55, l = 0.48;
    const c = (1 - Math.abs(2 * l - 1)) * s, x = c * (1 - Math.abs(h % 2 - 1)), m = l - c / 2;
    const rgb = [[c, x, 0], [x, c, 0], [0, c, x], [0, x, c], [x, 0, c], [c, 0, x]][Math.floor(h)];
    return "#" + rgb.map((v) => Math.round((v + m) * 255).toString(16).padStart(2, "0")).join("");
  }

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "text") node.textContent = value;
      else if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value);
    }
    for (const child of children || []) if (child) node.appendChild(child);
    return node;
  }

  function num(value) {
    if (value === null || value === undefined || Number.isNaN(value)) return "-";
    if (typeof value !== "number") return String(value);
    if (Number.isInteger(value)) return value.toLocaleString("en-US");
    const abs = Math.abs(value);
    if (abs !== 0 && (abs < 1e-3 || abs >= 1e6)) return value.toExponential(3);
    return value.toFixed(abs < 10 ? 3 : 2);
  }

  function text(value) {
    if (value === null || value === undefined) return "-";
    if (typeof value === "object") return JSON.stringify(value);
    return String(value);
  }

  function section(title, id, children) {
    return el("section", { id: id }, [el("h2", { text: title })].concat(children));
  }

  /* ---------------------------------------------------------------- the dataset */

  function header() {
    const sub = [SUMMARY.kind.replace("_", "-"), "api " + SUMMARY.api,
                 AGENTS.length + (AGENTS.length === 1 ? " agent" : " agents"),
                 num(SUMMARY.counts.episodes) + " episodes",
                 num(SUMMARY.counts.steps) + " steps"].join(" · ");
    const parts = [el("h1", { text: SUMMARY.name }), el("p", { class: "sub", text: sub })];
    if (DATA.mode === "file") {
      parts.push(el("p", { class: "note", id: "sample-note", text: DATA.sample_note }));
    }
    return el("header", {}, parts);
  }

  function card() {
    const rows = [];
    for (const [key, value] of Object.entries(SUMMARY.card)) {
      rows.push(el("tr", {}, [el("th", { text: key }), el("td", { text: text(value) })]));
    }
    const counts = SUMMARY.counts;
    rows.push(el("tr", {}, [el("th", { text: "episode ends" }), el("td", {
      text: counts.terminated + " terminated, " + counts.truncated + " truncated, " +
            counts.unfinished + " unfinished" })]));
    rows.push(el("tr", {}, [el("th", { text: "inactive agent-steps" }),
                            el("td", { text: num(100 * counts.inactive_share) + " %" })]));
    if (SUMMARY.coverage) {
      rows.push(el("tr", {}, [el("th", { text: "coverage" }),
                              el("td", { text: text(SUMMARY.coverage) })]));
    }
    const rest = [];
    for (const [key, value] of Object.entries(SUMMARY.metadata)) {
      rest.push(el("tr", {}, [el("th", { text: key }), el("td", { text: text(value) })]));
    }
    return section("Dataset card", "card", [
      el("table", { class: "card" }, [el("tbody", {}, rows)]),
      rest.length ? el("details", {}, [el("summary", { text: "all metadata" }),
                                       el("table", { class: "card" },
                                          [el("tbody", {}, rest)])]) : null]);
  }

  function histogram(target, title, hist, labels, colors, width) {
    const edges = hist.edges;
    const centres = edges.slice(0, -1).map((e, i) => (e + edges[i + 1]) / 2);
    const series = [{ label: "value" }];
    hist.counts.forEach((counts, i) => series.push({
      label: labels[i], stroke: colors[i], fill: colors[i] + "99", width: 1,
      paths: uPlot.paths.bars({ size: [labels.length > 1 ? 0.45 : 0.9, Infinity],
                                align: labels.length > 1 ? (i === 0 ? -1 : 1) : 0 }),
      points: { show: false } }));
    const opts = {
      title: title || undefined, width: width, height: 170,
      legend: { show: labels.length > 1, live: false },
      scales: { x: { time: false, range: () => [edges[0], edges[edges.length - 1]] } },
      axes: [{ size: 30, font: "11px sans-serif" },
             { size: 44, font: "11px sans-serif", incrs: STEP_TICKS }], // counts: whole
      cursor: { show: false }, series: series,
    };
    return new uPlot(opts, [centres].concat(hist.counts), target);
  }

  function distributions() {
    const grid = el("div", { class: "grid" });
    const hists = SUMMARY.histograms;
    AGENTS.forEach((agent, i) => {
      const panel = el("div", { class: "panel agent-panel", "data-agent": agent },
                       [el("h3", { text: agent, style: "color:" + color(i) })]);
      grid.appendChild(panel);
      const single = (h, k) => ({ edges: h.edges, counts: [h.counts[k]] });
      histogram(panel, "return", single(hists.returns, i), [agent], [color(i)], 250);
      histogram(panel, "actions taken per episode", single(hists.agent_steps, i), [agent],
                [color(i)], 250);
    });
    const lengths = el("div", { class: "panel" }, [el("h3", { text: "episode length" })]);
    grid.appendChild(lengths);
    histogram(lengths, "steps", hists.lengths, ["episodes"], ["#555555"], 250);
    return section("Distributions", "distributions", [grid]);
  }

  function comparisonSection() {
    const cmp = DATA.comparison;
    const names = cmp.names;
    const grid = el("div", { class: "grid" });
    const colors = ["#4e79a7", "#e15759"];
    const team = el("div", { class: "panel" }, [el("h3", { text: "team return" })]);
    grid.appendChild(team);
    histogram(team, "", cmp.team_returns, names, colors, 330);
    for (const [agent, hist] of Object.entries(cmp.agent_returns)) {
      const panel = el("div", { class: "panel" }, [el("h3", { text: agent + " return" })]);
      grid.appendChild(panel);
      histogram(panel, "", hist, names, colors, 330);
    }
    const same = cmp.identical.length;
    const n = cmp.episodes[0];
    const verdict = same === 0 ? "No episode of " + names[0] + " is also in " + names[1] + "."
      : (same < n ? same + " of " + n : "All " + n) + " episodes of " + names[0] +
        " are identical to episodes of " + names[1] +
        (same < n ? "." : n === cmp.episodes[1] ? ": the same data."
          : ": " + names[0] + " is a subset of " + names[1] + ".");
    const list = cmp.identical.slice(0, 50).map(([a, b]) => a + " = " + b).join(", ");
    return section("Compared with " + names[1], "comparison", [
      el("p", { class: same ? "warn" : "", id: "identical", text: verdict }),
      same ? el("p", { class: "small", text: "episode pairs: " + list +
                                              (same > 50 ? ", ..." : "") }) : null,
      el("p", { text: "Team returns: Kolmogorov-Smirnov statistic " + num(cmp.ks.statistic) +
                      ", p-value " + num(cmp.ks.p_value) + "." }),
      grid]);
  }

  /* ---------------------------------------------------------------- the episode table */

  function tableColumns() {
    const eps = SUMMARY.episodes;
    const cols = [
      { key: "id", label: "episode", value: (i) => eps.id[i] },
      { key: "length", label: "length", value: (i) => eps.length[i] },
      { key: "team", label: "team return", value: (i) => eps.team_return[i] },
    ];
    if (AGENTS.length <= MAX_TABLE_AGENTS) {
      AGENTS.forEach((agent, a) => cols.push(
        { key: "r" + a, label: agent, value: (i) => eps.returns[a][i] }));
    } else {
      const over = (i, fn) => fn(...eps.returns.map((r) => r[i]));
      cols.push({ key: "rmin", label: "lowest agent return",
                  value: (i) => over(i, Math.min) });
      cols.push({ key: "rmax", label: "highest agent return",
                  value: (i) => over(i, Math.max) });
    }
    cols.push({ key: "end", label: "end", value: (i) => eps.end[i] });
    cols.push({ key: "deaths", label: "agent deaths", value: (i) => eps.deaths[i] });
    return cols;
  }

  function episodeTable() {
    const cols = tableColumns();
    const body = el("tbody");
    const head = el("tr", {}, cols.map((col) => el("th", {
      "data-key": col.key, class: "sortable", title: "sort by " + col.label,
      onclick: () => { state.sortDir = state.sortKey === col.key ? -state.sortDir : -1;
                       state.sortKey = col.key; fill(); } }, [el("span", { text: col.label })])));
    const table = el("table", { class: "episodes", id: "episode-table" },
                     [el("thead", {}, [head]), body]);
    const note = el("p", { class: "small", id: "table-note" });
    function fill() {
      const col = cols.find((c) => c.key === state.sortKey);
      const order = SUMMARY.episodes.id.map((_, i) => i);
      order.sort((a, b) => {
        const x = col.value(a), y = col.value(b);
        return (x < y ? -1 : x > y ? 1 : 0) * state.sortDir || a - b;
      });
      for (const th of head.children) {
        th.classList.toggle("asc", th.dataset.key === state.sortKey && state.sortDir > 0);
        th.classList.toggle("desc", th.dataset.key === state.sortKey && state.sortDir < 0);
      }
      note.textContent = order.length > MAX_ROWS ? "Showing the first " +
        num(MAX_ROWS) + " of " + num(order.length) + " episodes in this order." : "";
      const rows = order.slice(0, MAX_ROWS).map((i) => {
        const id = SUMMARY.episodes.id[i];
        const held = DATA.mode === "server" || (String(id) in DATA.sample);
        return el("tr", { "data-id": id, class: held ? "" : "absent",
                          title: held ? "open episode " + id : "not in this file's sample",
                          onclick: () => { if (held) openEpisode(id); } },
                  cols.map((c) => {
                    const v = c.value(i);
                    return el("td", { text: typeof v === "number" ? num(v) : v,
                                      class: typeof v === "number" ? "n" : "" });
                  }));
      });
      body.replaceChildren(...rows);
    }
    state.sortKey = "id"; state.sortDir = 1;
    fill();
    return section("Episodes", "episodes", [
      el("p", { class: "small", text: "Click a column to sort, a row to open the episode." +
                (DATA.mode === "file" ? " Greyed rows are not in this file." : "") }),
      note, el("div", { class: "scroll" }, [table])]);
  }

  /* ---------------------------------------------------------------- one episode */

  function openEpisode(id) {
    state.opened = performance.now();
    const target = document.getElementById("episode");
    target.replaceChildren(el("h2", { text: "Episode " + id }),
                           el("p", { class: "loading", text: "Loading episode " + id + "..." }));
    target.scrollIntoView({ block: "start" });
    const held = DATA.sample[String(id)];
    const load = held ? Promise.resolve(held)
      : fetch("api/episode/" + id).then((r) => r.json().then((body) => {
        if (!r.ok) throw new Error(body.error || ("HTTP " + r.status));
        return body;
      }));
    load.then((episode) => drawEpisode(target, episode)).catch((err) => {
      target.replaceChildren(el("h2", { text: "Episode " + id }),
                             el("p", { class: "warn", text: String(err.message || err) }));
    });
  }

  function stepSeries(values, steps) {
    const out = values.slice();
    while (out.length < steps + 1) out.push(null);
    return out;
  }

  function timelineChart(target, title, xs, series, width, height, stepped) {
    const opts = {
      title: title, width: width, height: height,
      scales: { x: { time: false, range: () => [0, Math.max(1, xs.length - 1)] } },
      axes: [{ size: 28, font: "11px sans-serif", incrs: STEP_TICKS },
             { size: GUTTER, font: "11px sans-serif", gap: 4 }],
      series: [{ label: "step" }].concat(series.map((s) => Object.assign({
        width: 1.5, points: { show: false }, spanGaps: false,
        paths: stepped ? uPlot.paths.stepped({ align: 1 }) : undefined }, s))),
      cursor: { sync: { key: "episode", setSeries: false }, drag: { x: false, y: false },
                y: false },
      legend: { show: series.length > 1 || series[0].label !== "value", live: true },
      hooks: { setCursor: [(u) => { if (!state.syncing && u.cursor.idx != null) {
        setStep(u.cursor.idx, u); } }] },
    };
    const u = new uPlot(opts, [xs].concat(series.map((s) => s.data)), target);
    state.charts.push(u);
    return u;
  }

  function drawEpisode(target, ep) {
    for (const u of state.charts) u.destroy();
    state.charts = [];
    state.episode = ep;
    const steps = ep.steps;
    const xs = Array.from({ length: steps + 1 }, (_, i) => i);
    const width = Math.max(640, Math.min(1400, target.clientWidth || 1000));
    const end = ep.terminated ? "terminated" : ep.truncated ? "truncated" : "unfinished";
    const scrub = el("input", { type: "range", id: "scrub", min: "0", max: String(steps),
                                value: "0", oninput: (e) => setStep(Number(e.target.value)) });
    const readout = el("div", { id: "readout", class: "readout" });
    target.replaceChildren(
      el("h2", { text: "Episode " + ep.id }),
      el("p", { class: "sub", text: steps + " steps · " + end +
                (ep.turns ? " · turn-based: one agent acts per step" : "") }),
      el("div", { class: "scrubber" }, [el("label", { for: "scrub", id: "step-label",
                                                      text: "step 0" }), scrub]),
      readout);
    const frames = el("div", { class: "frames", id: "frames" });
    target.appendChild(frames);
    drawFrames(frames, ep);
    const named = (f) => ep.agents.map((a, i) => ({ label: a.name, stroke: color(i),
                                                    data: stepSeries(f(a), steps) }));
    timelineChart(target, "reward per agent", xs, named((a) => a.reward), width, 180);
    timelineChart(target, "return so far per agent", xs, named((a) => a.return), width, 180);
    const lanes = el("div", { class: "lanes", id: "lanes-box" });
    target.appendChild(lanes);
    const continuous = ep.agents.filter((a) => a.action.kind === "continuous");
    if (continuous.length > 1 && continuous.every((a) => a.action.of === 1)) {
      // one number per agent: one chart, one line per agent
      timelineChart(target, "action per agent", xs, ep.agents.map((a, i) => ({
        label: a.name, stroke: color(i),
        data: stepSeries(a.action.kind === "continuous" ? a.action.values[0] : [], steps) })),
        width, 180, false);
    }
    else ep.agents.forEach((a, i) => {
      if (a.action.kind !== "continuous") return;
      const shown = a.action.columns.length < a.action.of
        ? " (" + a.action.columns.length + " of " + a.action.of + " columns)" : "";
      timelineChart(target, a.name + " action" + shown, xs, a.action.columns.map((c, k) => ({
        label: c, stroke: color(k), data: stepSeries(a.action.values[k], steps) })),
        width, 150, false);
    });
    const heatmap = el("div", { class: "lanes", id: "state-box" });
    target.appendChild(heatmap);
    // uPlot sizes its plotting area in a microtask: lanes and heatmap are drawn after it, on
    // the same x axis
    queueMicrotask(() => {
      drawLanes(lanes, ep, width);
      if (ep.state && ep.state.kind === "heatmap") drawState(heatmap, ep.state, steps, width);
      else heatmap.remove();
      setStep(0);
      document.body.dataset.episode = String(ep.id);
      document.body.dataset.episodeMs = String(Math.round(performance.now() - state.opened));
    });
  }

  /* Lanes share the charts' x axis: GUTTER px of names, then the plotting area. */
  function laneGeometry(width) {
    const ref = state.charts[0];
    const left = ref ? ref.over.offsetLeft : GUTTER;
    const plot = ref ? ref.over.clientWidth : width - GUTTER;
    return { left: left, plot: plot };
  }

  function drawLanes(target, ep, width) {
    const lanes = [];
    if (ep.turns) lanes.push({ name: "turn", kind: "turns" });
    ep.agents.forEach((a, i) => {
      lanes.push({ name: a.name + " present", kind: "presence", agent: i });
      if (a.action.kind === "discrete") lanes.push({ name: a.name + " action",
                                                     kind: "action", agent: i });
      if (a.mask) lanes.push({ name: a.name + " legal", kind: "mask", agent: i,
                               height: Math.min(48, Math.max(LANE, a.mask.actions.length * 3)) });
    });
    const geo = laneGeometry(width);
    const heights = lanes.map((l) => l.height || LANE);
    const total = heights.reduce((s, h) => s + h + 3, 0) + 4;
    const ratio = window.devicePixelRatio || 1;
    const canvas = el("canvas", { id: "lanes", width: String(width * ratio),
                                  height: String(total * ratio),
                                  style: "width:" + width + "px;height:" + total + "px" });
    target.replaceChildren(
      el("div", { class: "chart-title", text: (ep.turns ? "turns, " : "") +
                  "presence (green present, grey absent, red ended; ▼ terminated, " +
                  "◆ truncated), discrete actions, legal actions" }),
      el("div", { class: "lane-wrap" }, [canvas, el("div", {
        class: "cursor-line", id: "lane-cursor", style: "height:" + total + "px" })]));
    const ctx = canvas.getContext("2d");
    ctx.scale(ratio, ratio);
    const cols = ep.steps + 1;
    const cell = geo.plot / Math.max(1, cols - 1);
    const x = (k) => geo.left + k * cell - cell / 2;
    let y = 2;
    ctx.font = "12px sans-serif";
    ctx.textBaseline = "middle";
    lanes.forEach((lane, n) => {
      const h = heights[n];
      ctx.fillStyle = "#222";
      ctx.fillText(fit(ctx, lane.name, geo.left - 10), 4, y + h / 2);
      ctx.save();
      clipPlot(ctx, geo, total);
      const a = lane.agent === undefined ? null : ep.agents[lane.agent];
      if (lane.kind === "turns") {
        ep.turns.forEach((who, k) => {
          if (who < 0) return;
          ctx.fillStyle = color(who);
          ctx.fillRect(x(k), y, Math.max(1, cell - 0.5), h);
        });
      } else if (lane.kind === "presence") {
        const ended = firstEnd(a);
        a.active.forEach((on, k) => {
          ctx.fillStyle = on ? "#59a14f" : (ended !== null && k >= ended ? "#e15759" : "#cccccc");
          ctx.fillRect(x(k), y + 3, Math.max(1, cell - 0.5), h - 6);
        });
        ctx.fillStyle = "#111";
        // a turn-based game keeps an ended agent's flag up until its dead step: mark the
        // step that ended it
        const starts = (list) => list.filter((t, n) => n === 0 || list[n - 1] !== t - 1);
        for (const t of starts(a.terminated)) marker(ctx, "▼", x(t + 1) + cell / 2, y + h / 2);
        for (const t of starts(a.truncated)) marker(ctx, "◆", x(t + 1) + cell / 2, y + h / 2);
      } else if (lane.kind === "action") {
        a.action.values.forEach((v, k) => {
          if (v === null) return;
          ctx.fillStyle = color(v);
          ctx.fillRect(x(k), y, Math.max(1, cell - 0.5), h);
        });
      } else if (lane.kind === "mask") {
        const rows = a.mask.actions.length;
        const rowH = h / rows;
        a.mask.rows.forEach((row, k) => row.forEach((legal, r) => {
          ctx.fillStyle = legal ? "#4e79a7" : "#eeeeee";
          ctx.fillRect(x(k), y + r * rowH, Math.max(1, cell - 0.5), Math.max(0.5, rowH));
        }));
      }
      ctx.restore();
      y += h + 3;
    });
    state.laneGeo = { left: geo.left, cell: cell };
    const labels = Math.max(0, ...ep.agents.map((a) => a.action.kind === "discrete"
                                                         ? a.action.labels : 0));
    if (labels > 0) {
      const keys = [el("span", { text: "discrete action colours:" })];
      for (let v = 0; v < Math.min(labels, 20); v++) {
        keys.push(el("span", { class: "key" }, [
          el("i", { style: "background:" + color(v) }), el("span", { text: String(v) })]));
      }
      if (labels > 20) keys.push(el("span", { text: "... (" + labels + " actions)" }));
      target.appendChild(el("div", { class: "keys", id: "action-keys" }, keys));
    }
  }

  /* Cells are centred on their step: the first and last spill half a cell, never into the
     names left of the plotting area. */
  function clipPlot(ctx, geo, height) {
    ctx.beginPath();
    ctx.rect(geo.left - 3, 0, geo.plot + 12, height);
    ctx.clip();
  }

  function firstEnd(agent) {
    const all = agent.terminated.concat(agent.truncated);
    return all.length ? Math.min(...all) + 1 : null;
  }

  function marker(ctx, glyph, cx, cy) {
    ctx.textAlign = "center";
    ctx.fillText(glyph, cx, cy);
    ctx.textAlign = "left";
  }

  function fit(ctx, label, room) {
    if (ctx.measureText(label).width <= room) return label;
    let cut = label;
    while (cut.length > 1 && ctx.measureText(cut + "…").width > room) cut = cut.slice(0, -1);
    return cut + "…";
  }

  function drawState(target, st, steps, width) {
    const rows = st.columns.length;
    const h = Math.min(240, Math.max(60, rows * 4));
    const geo = laneGeometry(width);
    const ratio = window.devicePixelRatio || 1;
    const canvas = el("canvas", { id: "state-heatmap", width: String(width * ratio),
                                  height: String((h + 4) * ratio),
                                  style: "width:" + width + "px;height:" + (h + 4) + "px" });
    const shown = rows < st.of ? " (" + rows + " of " + st.of + " values)" : "";
    target.replaceChildren(
      el("div", { class: "chart-title", text: "global state, each value scaled to its " +
                  "range in the episode" + shown }), canvas);
    const ctx = canvas.getContext("2d");
    ctx.scale(ratio, ratio);
    const cell = geo.plot / Math.max(1, steps);
    ctx.font = "12px sans-serif";
    ctx.fillStyle = "#222";
    ctx.textBaseline = "middle";
    ctx.fillText("state", 4, h / 2);
    clipPlot(ctx, geo, h + 4);
    // one pixel per (step, value), scaled up without smoothing: cheap on long episodes
    const pixels = new ImageData(st.rows.length, rows);
    st.rows.forEach((row, k) => row.forEach((v, r) => {
      const at = 4 * (r * st.rows.length + k);
      pixels.data[at] = 40 + 215 * v / 255;      // dark blue (low) to yellow (high)
      pixels.data[at + 1] = 30 + 190 * v / 255;
      pixels.data[at + 2] = 110 - 70 * v / 255;
      pixels.data[at + 3] = 255;
    }));
    const small = document.createElement("canvas");
    small.width = st.rows.length;
    small.height = rows;
    small.getContext("2d").putImageData(pixels, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(small, geo.left - cell / 2, 2, cell * st.rows.length, h);
  }

  function drawFrames(box, ep) {
    const streams = [];
    ep.agents.forEach((a, i) => {
      if (a.frames && a.frames.images) streams.push({ name: a.name, images: a.frames.images,
                                                      agent: i });
    });
    if (ep.state && ep.state.kind === "frames") streams.push({ name: "state",
                                                               images: ep.state.images });
    if (!streams.length) { box.remove(); return; }
    for (const s of streams) {
      const img = el("img", { alt: s.name + " observation", "data-stream": s.name });
      s.img = img;
      box.appendChild(el("figure", { class: "frame" }, [img, el("figcaption", {
        text: s.name, style: s.agent === undefined ? "" : "color:" + color(s.agent) })]));
    }
    state.frames = streams;
  }

  function nearestFrame(rows, k) {
    let lo = 0, hi = rows.length - 1;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (rows[mid] < k) lo = mid + 1; else hi = mid; }
    if (lo > 0 && Math.abs(rows[lo - 1] - k) <= Math.abs(rows[lo] - k)) lo -= 1;
    return lo;
  }

  function setStep(k, from) {
    const ep = state.episode;
    if (!ep) return;
    k = Math.max(0, Math.min(ep.steps, k));
    state.step = k;
    document.getElementById("scrub").value = String(k);
    document.getElementById("step-label").textContent = "step " + k + " of " + ep.steps;
    state.syncing = true;
    for (const u of state.charts) {
      if (u !== from) u.setCursor({ left: u.valToPos(k, "x"), top: u.over.clientHeight / 2 });
    }
    state.syncing = false;
    const line = document.getElementById("lane-cursor");
    if (line && state.laneGeo) line.style.left = (state.laneGeo.left + k * state.laneGeo.cell) + "px";
    if (state.frames && ep.frame_rows.length) {
      const at = nearestFrame(ep.frame_rows, k);
      for (const s of state.frames) if (s.images[at]) s.img.src = s.images[at];
    }
    readout(ep, k);
  }

  function readout(ep, k) {
    const rows = ep.agents.map((a, i) => {
      const acted = k < ep.steps && a.acted[k];
      let action = "-";
      if (acted && a.action.kind === "discrete") action = String(a.action.values[k]);
      else if (acted && a.action.kind === "continuous") {
        action = a.action.values.slice(0, 4).map((col) => num(col[k])).join(", ") +
                 (a.action.values.length > 4 ? ", ..." : "");
      }
      const ended = a.terminated.includes(k) ? "terminated" : a.truncated.includes(k)
        ? "truncated" : "";
      return el("tr", { class: ep.turns && ep.turns[k] === i ? "turn" : "" }, [
        el("td", { text: a.name, style: "color:" + color(i) }),
        el("td", { text: a.active[k] ? "present" : "absent" }),
        el("td", { class: "n", text: k < ep.steps ? num(a.reward[k]) : "-" }),
        el("td", { class: "n", text: num(k < ep.steps ? a.return[k] : a.return[ep.steps - 1]) }),
        el("td", { text: action }), el("td", { text: ended })]);
    });
    const head = el("tr", {}, ["agent", "at this step", "reward", "return so far", "action",
                               "end"].map((h) => el("th", { text: h })));
    const turn = ep.turns ? (ep.turns[k] >= 0 ? "turn: " + ep.agents[ep.turns[k]].name
                                              : "turn: nobody (game over)") : "";
    document.getElementById("readout").replaceChildren(
      turn ? el("p", { id: "turn", class: "turn-note", text: turn }) : document.createTextNode(""),
      el("table", { class: "readout-table" }, [el("thead", {}, [head]), el("tbody", {}, rows)]));
  }

  /* ---------------------------------------------------------------- start */

  function start() {
    const app = document.getElementById("app");
    const parts = [header(), card(), distributions()];
    app.replaceChildren(...parts);
    if (DATA.comparison) app.appendChild(comparisonSection());
    app.appendChild(episodeTable());
    app.appendChild(el("section", { id: "episode" }, [el("h2", { text: "Episode" }),
      el("p", { class: "small", text: "Open an episode from the table." })]));
    document.body.dataset.ready = "1";
    document.body.dataset.drawnMs = String(Math.round(performance.now()));
  }

  window.mmView = { openEpisode: openEpisode, setStep: setStep };
  start();
})();
