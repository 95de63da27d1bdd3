"use strict";
// The status page of either tier. It calls only its own origin: /status, the reads and the
// rankings, and /counter/{id}/rights. The token typed in stays in this page's memory.
(function () {
  const tier = document.body.dataset.tier;
  const global = tier === "global";
  const REFRESH_MS = 2000;
  const KEPT = 90; // samples each sparkline keeps
  const SVG = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);

  let token = "";
  let timer = null;
  let lookedUp = "";
  const previous = new Map(); // slot -> {at, writes}
  const slotRates = new Map(); // slot -> [writes per second]
  const rateHistory = [];
  const lagHistory = [];

  // An element with attributes and children (text children become text nodes).
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") node.className = value;
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function ms(value) {
    if (value === undefined || value === null) return "never";
    if (value < 1000) return value + " ms";
    if (value < 60000) return (value / 1000).toFixed(1) + " s";
    return Math.round(value / 60000) + " min";
  }

  function number(value) {
    if (value === undefined || value === null) return "–";
    return typeof value === "number" ? value.toLocaleString("en-US") : String(value);
  }

  function keep(list, value) {
    list.push(value);
    while (list.length > KEPT) list.shift();
  }

  function spark(svg, values) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const shown = values.filter((v) => typeof v === "number" && isFinite(v));
    if (shown.length < 2) return svg;
    const width = 200, height = 40;
    const top = Math.max(...shown, 1);
    const points = shown.map((v, i) => {
      const x = (i / (shown.length - 1)) * width;
      const y = height - 2 - (v / top) * (height - 4);
      return x.toFixed(1) + "," + y.toFixed(1);
    });
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", points.join(" "));
    svg.appendChild(line);
    return svg;
  }

  function slotSpark(values) {
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "spark slot");
    svg.setAttribute("viewBox", "0 0 200 40");
    svg.setAttribute("preserveAspectRatio", "none");
    return spark(svg, values);
  }

  async function api(path) {
    const headers = { Accept: "application/json" };
    if (token) headers.Authorization = "Bearer " + token;
    let response;
    try {
      response = await fetch(path, { headers, cache: "no-store" });
    } catch (error) {
      return { status: 0, body: { error: "cannot reach this aggregator: " + error.message } };
    }
    let body = null;
    try {
      body = await response.json();
    } catch (error) {
      body = { error: "answered " + response.status + " without JSON" };
    }
    return { status: response.status, body };
  }

  function problem(text) {
    const box = $("problem");
    box.hidden = !text;
    box.textContent = text || "";
  }

  function refusal(answer) {
    if (answer.status === 401) return "this aggregator needs a token: type one with the read right";
    if (answer.status === 403) return "the token lacks the read right: " + answer.body.error;
    return (answer.body && answer.body.error) || "answered " + answer.status;
  }

  function badge(word) {
    const level = word === "ok" || word === "fresh" ? "ok"
      : word === "degraded" || word === "restoring" || word === "stale" ? "warn" : "bad";
    return el("span", { class: "badge " + level }, word);
  }

  // Writes per second of each slot since the last sample; the total.
  function rates(slots, at) {
    let total = 0, known = false;
    for (const slot of slots) {
      const writes = slot.writes_applied;
      const before = previous.get(slot.slot);
      let rate = null;
      if (typeof writes === "number" && before && at > before.at && writes >= before.writes) {
        rate = ((writes - before.writes) * 1000) / (at - before.at);
      }
      if (typeof writes === "number") previous.set(slot.slot, { at, writes });
      const history = slotRates.get(slot.slot) || [];
      if (rate !== null) {
        keep(history, rate);
        total += rate;
        known = true;
      }
      slotRates.set(slot.slot, history);
    }
    return known ? total : null;
  }

  function slotTable(view) {
    const head = el("tr", {},
      ["slot", "shard node", "health", "staleness", "last pull error", "restore",
       "replication lag", "writes/s", ""].map((h, i) =>
        el("th", { class: i === 3 || i === 6 || i === 7 ? "num" : null }, h)));
    const rows = view.slots.map((slot) => {
      const health = slot.health || {};
      const word = slot.error ? "unreachable" : (health.status || "?");
      const restore = health.restore
        ? health.restore.phase + " (" + number(health.restore.counters_written) + " of " +
          number(health.restore.counters_received) + " written)"
        : "–";
      const rate = (slotRates.get(slot.slot) || []).slice(-1)[0];
      const errors = [slot.last_error, slot.error, health.error, health.conflict]
        .filter(Boolean).join("; ");
      return el("tr", { "data-slot": slot.slot },
        el("td", {}, slot.slot),
        el("td", { class: "muted" }, slot.address),
        el("td", {}, badge(word)),
        el("td", { class: "num" }, ms(slot.staleness_ms)),
        el("td", { class: "error" }, errors || ""),
        el("td", {}, restore),
        el("td", { class: "num" }, slot.replication_lag_ms === null ? "–" : ms(slot.replication_lag_ms)),
        el("td", { class: "num" }, rate === undefined ? "–" : rate.toFixed(1)),
        el("td", {}, slotSpark(slotRates.get(slot.slot) || [])));
    });
    return el("table", { class: "slots" }, el("thead", {}, head), el("tbody", {}, rows));
  }

  function viewFacts(view) {
    return el("div", { class: "facts" },
      el("span", {}, "durability ", el("b", {}, view.durability)),
      el("span", {}, "slowest slot ", el("b", {}, ms(view.staleness_ms))),
      el("span", {}, "counters ", el("b", {}, number(view.counters))),
      el("span", {}, "held ", el("b", {}, number(view.state_bytes)), " of ",
        number(view.max_state_bytes), " bytes"),
      el("span", {}, "aggregator ", badge(view.status)));
  }

  // What needs an operator's eye, from one datacenter's view.
  function viewAlarms(view, where) {
    const alarms = [];
    for (const conflict of view.conflicts || []) alarms.push(["bad", where + ": fencing: " + conflict]);
    if (view.over_bound) alarms.push(["bad", where + ": " + view.over_bound]);
    for (const slot of view.slots || []) {
      const health = slot.health || {};
      const name = where + " " + slot.slot;
      if (slot.error) alarms.push(["bad", name + ": shard node unreachable: " + slot.error]);
      if (health.restore) alarms.push(["warn", name + ": restore in progress, " + health.restore.phase]);
      if (health.conflict) alarms.push(["bad", name + ": fencing: " + health.conflict]);
      if (health.error) alarms.push(["bad", name + ": storage: " + health.error]);
      if (slot.refused_ahead) alarms.push(["warn", name + ": " + slot.refused_ahead + " entries refused ahead of the clock"]);
      if (slot.incomplete) alarms.push(["warn", name + ": copy incomplete (byte bound)"]);
      if (slot.last_error) alarms.push(["warn", name + ": pull failing: " + slot.last_error]);
    }
    return alarms;
  }

  function renderAlarms(alarms) {
    const list = $("alarms");
    list.replaceChildren(...(alarms.length
      ? alarms.map(([level, text]) => el("li", { class: level }, text))
      : [el("li", { class: "muted" }, "none")]));
  }

  function renderDatacenter(view) {
    $("places-title").textContent = "Datacenter " + view.datacenter;
    const total = rates(view.slots, view.at_ms);
    const box = el("div", { class: "dc", "data-name": view.datacenter },
      el("h3", {}, view.datacenter), viewFacts(view), slotTable(view));
    $("datacenters").replaceChildren(box);
    $("lag-label").textContent = "slowest slot's staleness";
    return { lag: view.staleness_ms, total, alarms: viewAlarms(view, view.datacenter) };
  }

  function renderGlobal(status) {
    const alarms = [];
    const slots = status.datacenters.flatMap((dc) => (dc.view ? dc.view.slots : []));
    const total = rates(slots, status.at_ms);
    const boxes = status.datacenters.map((dc) => {
      const word = !dc.heard ? "never heard"
        : dc.staleness_ms === null || dc.staleness_ms > status.max_staleness_ms ? "stale" : "fresh";
      if (word !== "fresh") alarms.push(["bad", dc.name + ": " + word + " (" + ms(dc.staleness_ms) + ")"]);
      if (dc.last_error) alarms.push(["warn", dc.name + ": pull failing: " + dc.last_error]);
      for (const miss of dc.unanswered) alarms.push(["warn", dc.name + " aggregator " + miss.address + ": no status: " + miss.error]);
      const replicas = Object.entries(dc.replicas || {}).map(([address, health]) =>
        el("span", {}, address + " ", el("b", {}, ms(health.staleness_ms)),
          health.last_error ? el("span", { class: "error" }, " " + health.last_error) : null));
      const parts = [
        el("h3", {}, dc.name, badge(word)),
        el("div", { class: "facts" },
          el("span", {}, "staleness ", el("b", {}, ms(dc.staleness_ms))),
          el("span", {}, "visibility lag ", el("b", {}, ms(dc.visibility_lag_ms))),
          el("span", {}, "aggregator replicas: ", replicas)),
      ];
      if (dc.view) {
        parts.push(viewFacts(dc.view), slotTable(dc.view));
        alarms.push(...viewAlarms(dc.view, dc.name));
      } else {
        parts.push(el("div", { class: "muted" }, "its aggregator gave no status"));
      }
      return el("div", { class: "dc", "data-name": dc.name }, parts);
    });
    $("datacenters").replaceChildren(...boxes);
    return { lag: status.visibility_lag_ms, total, alarms };
  }

  function renderTrendingChoices(trending) {
    const select = $("trend-prefix");
    const known = Array.from(select.options).map((o) => o.value);
    if (known.join("\n") !== trending.prefixes.join("\n")) {
      select.replaceChildren(...trending.prefixes.map((p) => el("option", { value: p }, p)));
    }
    $("trend-window").textContent = trending.prefixes.length
      ? "hits in the last " + trending.window_seconds + " s"
      : "no prefix has a threshold ([trending] thresholds)";
  }

  async function refreshStatus() {
    const answer = await api("/status");
    if (answer.status !== 200) {
      problem(refusal(answer));
      $("updated").textContent = "not updated";
      return false;
    }
    problem("");
    const status = answer.body;
    const shown = global ? renderGlobal(status) : renderDatacenter(status);
    if (shown.total !== null) keep(rateHistory, shown.total);
    if (typeof shown.lag === "number") keep(lagHistory, shown.lag);
    $("lag").textContent = ms(shown.lag);
    $("rate").textContent = shown.total === null ? "–" : shown.total.toFixed(1);
    $("counters").textContent = number(status.counters);
    $("health").replaceChildren("this aggregator ", badge(status.status));
    spark($("lag-chart"), lagHistory);
    spark($("rate-chart"), rateHistory);
    renderAlarms(shown.alarms);
    renderTrendingChoices(status.trending);
    $("updated").textContent = "updated " + new Date(status.at_ms).toLocaleTimeString();
    return true;
  }

  // At most SHOWN entries of a ranking, with a bar each, and how many more there are.
  function rankedList(all) {
    const SHOWN = 15;
    if (!all.length) return el("div", { class: "muted" }, "no counter");
    const list = all.slice(0, SHOWN);
    const top = Math.max(...list.map((e) => Math.abs(Number(e.value))), 1);
    const more = all.length > SHOWN
      ? el("tfoot", {}, el("tr", {}, el("td", { class: "muted", colspan: 3 },
        "and " + (all.length - SHOWN) + " more")))
      : null;
    return el("table", { class: "ranked" }, more, el("tbody", {}, list.map((entry) =>
      el("tr", {},
        el("td", {}, entry.id),
        el("td", { class: "num" }, number(entry.value)),
        el("td", { style: "width:40%" },
          el("div", { class: "bar", style: "width:" + (100 * Math.abs(Number(entry.value)) / top).toFixed(1) + "%" }))))));
  }

  function perPart(parts, key) {
    return el("div", { class: "small muted" }, Object.entries(parts || {}).map(([name, part]) =>
      el("div", {}, name + " (" + ms(part.staleness_ms) + "): " +
        ((part[key] || []).map((e) => e.id + " " + number(e.value)).join(", ") || "none"))));
  }

  async function refreshTop() {
    const params = new URLSearchParams();
    params.set("k", $("top-k").value || "10");
    params.set("prefix", $("top-prefix").value);
    if ($("top-window").value) params.set("window", $("top-window").value);
    if (global) params.set("allow_partial", "true");
    const answer = await api("/topk?" + params);
    const box = $("top");
    box.className = "";
    if (answer.status !== 200) {
      box.replaceChildren(el("div", { class: "error" }, refusal(answer)));
      return;
    }
    box.replaceChildren(...[rankedList(answer.body.top),
      el("div", { class: "small muted" }, "staleness " + ms(answer.body.staleness_ms) +
        (answer.body.complete ? "" : ", not complete")),
      global ? perPart(answer.body.datacenters, "top") : null].filter(Boolean));
  }

  async function refreshTrending() {
    const prefix = $("trend-prefix").value;
    const box = $("trending");
    if (!$("trend-prefix").options.length) {
      box.replaceChildren(el("div", { class: "muted" }, "–"));
      return;
    }
    const params = new URLSearchParams({ prefix });
    if (global) params.set("allow_partial", "true");
    const answer = await api("/trending?" + params);
    if (answer.status !== 200) {
      box.replaceChildren(el("div", { class: "error" }, refusal(answer)));
      return;
    }
    box.className = "";
    box.replaceChildren(...[
      el("div", { class: "small muted" }, "threshold " + number(answer.body.threshold)),
      rankedList(answer.body.trending),
      global ? perPart(answer.body.datacenters, "trending") : null].filter(Boolean));
  }

  async function refreshCounter() {
    const id = lookedUp;
    if (!id) return;
    const path = "/counter/" + encodeURIComponent(id);
    const [read, rights] = await Promise.all([
      api(path + (global ? "?allow_partial=true" : "")),
      api(path + "/rights"),
    ]);
    if (id !== lookedUp) return;
    const box = $("counter");
    if (read.status !== 200) {
      box.replaceChildren(el("div", { class: "error", id: "counter-error" }, refusal(read)));
    } else {
      const parts = global ? read.body.datacenters : read.body.slots;
      const rows = Object.entries(parts || {}).map(([name, part]) =>
        el("tr", { "data-part": name },
          el("td", {}, name),
          el("td", { class: "num" }, number(part.value)),
          el("td", { class: "num" }, ms(part.staleness_ms))));
      box.replaceChildren(
        el("div", {}, el("span", { class: "value", id: "counter-value" }, number(read.body.value)),
          " ", el("span", { class: "muted" },
            "staleness " + ms(read.body.staleness_ms) + (read.body.complete ? "" : ", not complete"))),
        el("table", {}, el("thead", {}, el("tr", {},
          el("th", {}, global ? "datacenter" : "slot"), el("th", { class: "num" }, "value"),
          el("th", { class: "num" }, "staleness"))), el("tbody", {}, rows)));
    }
    const rightsBox = $("rights");
    if (rights.status === 404) {
      rightsBox.replaceChildren(el("div", { class: "small muted" }, "not a bounded counter"));
    } else if (rights.status !== 200) {
      rightsBox.replaceChildren(el("div", { class: "error" }, "rights: " + refusal(rights)));
    } else {
      const body = rights.body;
      const parts = global ? body.datacenters : body.slots;
      const rows = parts.map((part) => {
        const held = part.rights;
        return el("tr", {},
          el("td", {}, global ? part.name : part.slot),
          el("td", { class: "num" }, held ? number(held.up) : "–"),
          el("td", { class: "num" }, held ? number(held.down) : "–"),
          el("td", { class: "error" }, part.error || ""));
      });
      rightsBox.replaceChildren(el("h3", {}, "Rights (bounded counter)"),
        el("table", {}, el("thead", {}, el("tr", {},
          el("th", {}, global ? "datacenter" : "slot"), el("th", { class: "num" }, "up"),
          el("th", { class: "num" }, "down"), el("th", {}, ""))), el("tbody", {}, rows),
          el("tfoot", {}, el("tr", {}, el("td", {}, "together"),
            el("td", { class: "num" }, number(body.up)), el("td", { class: "num" }, number(body.down)),
            el("td", {}, "")))));
    }
  }

  async function refresh() {
    if (await refreshStatus()) {
      await Promise.all([refreshTop(), refreshTrending(), refreshCounter()]);
    }
  }

  function schedule() {
    clearTimeout(timer);
    timer = null;
    if ($("live").checked) {
      timer = setTimeout(async () => {
        await refresh();
        schedule();
      }, REFRESH_MS);
    }
  }

  $("token").addEventListener("input", (event) => {
    token = event.target.value.trim();
  });
  $("token").addEventListener("change", () => refresh());
  $("live").addEventListener("change", schedule);
  for (const id of ["top-prefix", "top-window", "top-k"]) {
    $(id).addEventListener("change", refreshTop);
  }
  $("top-form").addEventListener("submit", (event) => {
    event.preventDefault();
    refreshTop();
  });
  $("trend-prefix").addEventListener("change", refreshTrending);
  $("trend-form").addEventListener("submit", (event) => event.preventDefault());
  $("lookup-form").addEventListener("submit", (event) => {
    event.preventDefault();
    lookedUp = $("lookup-id").value.trim();
    $("counter").replaceChildren();
    $("rights").replaceChildren();
    refreshCounter();
  });

  // A link may name the counter to look up: #counter=<id>.
  const linked = new URLSearchParams(location.hash.slice(1)).get("counter");
  if (linked) {
    $("lookup-id").value = linked;
    lookedUp = linked;
  }

  refresh().then(schedule);
})();
