// specframe's chat page: a conversation streamed from /v1/chat/completions with each accepted drafted token tinted
// by the drafter that proposed it (the response's "specframe" spans, docs/serving.md), each answer's statistics,
// and the server's live statistics (/metrics) and drafters (/props). Plain JavaScript, no dependencies: the page
// works offline. Text from the model is only ever put in the page as text nodes, never parsed as HTML.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const SVG = (() => {       // SVG's namespace as the HTML parser gives it (this file names no address)
    const template = document.createElement("template");
    template.innerHTML = "<svg></svg>";
    return template.content.firstChild.namespaceURI;
  })();
  const PALETTE = ["#ffd166", "#8ecae6", "#b5e48c", "#f4a3c0", "#cdb4db", "#ffb4a2", "#a0e7e5", "#e9c46a"];
  const POLL_MS = 2000;

  const state = {
    messages: [],          // {role, content, provenance, stats, stopped, element}
    colors: new Map(),     // drafter name -> its tint
    controller: null,      // the AbortController of the answer streaming in
    pending: new Set(),    // messages to render at the next frame
  };

  // --- settings kept in the browser ---------------------------------------------------------------------------

  const stored = {
    get(key, fallback) {
      try { return localStorage.getItem("specframe." + key) ?? fallback; } catch { return fallback; }
    },
    set(key, value) {
      try { localStorage.setItem("specframe." + key, value); } catch { /* private mode: not kept */ }
    },
  };

  // --- the API --------------------------------------------------------------------------------------------------

  function headers() {
    const result = {"Content-Type": "application/json"};
    const key = $("api-key").value.trim();
    if (key) result.Authorization = "Bearer " + key;
    return result;
  }

  async function api(path, options = {}) {
    const response = await fetch(path, {...options, headers: headers()});
    if (!response.ok) throw new Error(await problem(response));
    return response;
  }

  async function problem(response) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const body = await response.json();
      if (body.error && body.error.message) message = body.error.message;
    } catch { /* not JSON */ }
    if (response.status === 401) message += " (enter the server's API key at the top right)";
    return message;
  }

  // Server-sent events: each "data:" payload parsed as JSON, until [DONE].
  async function* events(response) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, {stream: true}).replace(/\r\n/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = block.split("\n").filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(5).replace(/^ /, "")).join("\n");
        if (data === "[DONE]") return;
        if (data) yield JSON.parse(data);
      }
    }
  }

  // --- provenance: which drafter wrote which characters --------------------------------------------------------

  function colorOf(drafter) {
    if (!state.colors.has(drafter)) state.colors.set(drafter, PALETTE[state.colors.size % PALETTE.length]);
    return state.colors.get(drafter);
  }

  class Provenance {
    constructor() {
      this.ends = [];          // the end of each run of characters of one source
      this.drafters = [];      // its drafter (null: the target's own tokens)
      this.length = 0;
      this.tokens = new Map(); // tokens by drafter (null: the target's)
    }

    add(span) {
      const drafter = span.drafter ?? null;
      this.tokens.set(drafter, (this.tokens.get(drafter) || 0) + span.tokens);
      if (!span.text) return;
      this.length += span.text.length;
      const last = this.drafters.length - 1;
      if (last >= 0 && this.drafters[last] === drafter) this.ends[last] = this.length;
      else {
        this.ends.push(this.length);
        this.drafters.push(drafter);
      }
    }

    // [start, end, drafter] runs covering characters [a, b)
    runs(a, b) {
      const out = [];
      let low = 0, high = this.ends.length;
      while (low < high) {          // the first run ending after a
        const middle = (low + high) >> 1;
        if (this.ends[middle] > a) high = middle; else low = middle + 1;
      }
      for (let i = low, start = a; start < b; i++) {
        const end = i < this.ends.length ? Math.min(b, this.ends[i]) : b;
        out.push([start, end, i < this.ends.length ? this.drafters[i] : null]);
        start = end;
      }
      return out;
    }
  }

  // --- Markdown ---------------------------------------------------------------------------------------------------
  // A small renderer over the source's character offsets, so that every character of text it shows keeps its
  // drafter: fenced code, headings, lists, quotes, rules and paragraphs; inline code, bold, italic and links.

  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*).*$/;
  const HEADING = /^ {0,3}(#{1,6})\s+/;
  const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
  const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+/;
  const QUOTE = /^ {0,3}>\s?/;
  const INLINE = new RegExp([
    "`([^`\\n]+)`",                                 // 1: code
    "\\*\\*(?=\\S)([\\s\\S]*?\\S)\\*\\*",            // 2: bold
    "__(?=\\S)([\\s\\S]*?\\S)__",                    // 3: bold
    "\\*(?=[^\\s*])([^*\\n]*?[^\\s*])\\*",            // 4: italic
    "(?<!\\w)_(?=[^\\s_])([^_\\n]*?[^\\s_])_(?!\\w)", // 5: italic
    "\\[([^\\]\\n]+)\\]\\(([^()\\s]+)\\)",            // 6, 7: a link
  ].join("|"), "g");
  const SAFE_LINK = /^(https?:|mailto:|#|\/(?!\/)|\.{1,2}\/)/i;

  function render(source, provenance) {
    const root = document.createDocumentFragment();
    const lines = [];
    for (let start = 0; start <= source.length;) {
      const newline = source.indexOf("\n", start);
      const end = newline < 0 ? source.length : newline;
      lines.push({start, end, text: source.slice(start, end)});
      start = end + 1;
    }

    function text(parent, a, b) {
      for (const [start, end, drafter] of provenance.runs(a, b)) {
        const node = document.createTextNode(source.slice(start, end));
        if (drafter === null) {
          parent.appendChild(node);
          continue;
        }
        const tint = document.createElement("span");
        tint.className = "tint";
        tint.dataset.drafter = drafter;
        tint.style.setProperty("--tint", colorOf(drafter));
        tint.appendChild(node);
        parent.appendChild(tint);
      }
    }

    function inline(parent, a, b) {
      const part = source.slice(a, b);
      INLINE.lastIndex = 0;
      let at = 0, m;
      while ((m = INLINE.exec(part)) !== null) {
        text(parent, a + at, a + m.index);
        const start = a + m.index;
        let element;
        if (m[1] !== undefined) {
          element = document.createElement("code");
          text(element, start + 1, start + 1 + m[1].length);
        } else if (m[2] !== undefined || m[3] !== undefined) {
          element = document.createElement("strong");
          inline(element, start + 2, start + 2 + (m[2] ?? m[3]).length);
        } else if (m[4] !== undefined || m[5] !== undefined) {
          element = document.createElement("em");
          inline(element, start + 1, start + 1 + (m[4] ?? m[5]).length);
        } else if (SAFE_LINK.test(m[7])) {
          element = document.createElement("a");
          element.href = m[7];
          element.rel = "noopener noreferrer";
          element.target = "_blank";
          inline(element, start + 1, start + 1 + m[6].length);
        } else {
          element = document.createElement("span");
          text(element, start, start + m[0].length);
        }
        parent.appendChild(element);
        at = m.index + m[0].length;
        INLINE.lastIndex = at;     // nested calls share the expression
      }
      text(parent, a + at, b);
    }

    function startsBlock(line) {
      return FENCE.test(line.text) || HEADING.test(line.text) || RULE.test(line.text) || ITEM.test(line.text)
        || QUOTE.test(line.text);
    }

    for (let i = 0; i < lines.length;) {
      const line = lines[i];
      let m;
      if (!line.text.trim()) {
        i++;
      } else if ((m = FENCE.exec(line.text))) {
        const closing = new RegExp(`^ {0,3}${m[1][0]}{${m[1].length},}\\s*$`);
        let close = i + 1;
        while (close < lines.length && !closing.test(lines[close].text)) close++;
        const pre = document.createElement("pre");
        const code = document.createElement("code");
        if (m[2]) code.dataset.language = m[2];
        const from = i + 1 < lines.length ? lines[i + 1].start : source.length;
        const to = close < lines.length ? Math.max(from, lines[close].start - 1) : source.length;
        text(code, from, to);
        pre.appendChild(code);
        root.appendChild(pre);
        i = close + 1;
      } else if ((m = HEADING.exec(line.text))) {
        const heading = document.createElement("h" + Math.min(6, m[1].length + 2));   // below the page's own
        inline(heading, line.start + m[0].length, line.end);
        root.appendChild(heading);
        i++;
      } else if (RULE.test(line.text)) {
        root.appendChild(document.createElement("hr"));
        i++;
      } else if ((m = ITEM.exec(line.text))) {
        const ordered = /\d/.test(m[2]);
        const list = document.createElement(ordered ? "ol" : "ul");
        if (ordered && parseInt(m[2], 10) !== 1) list.start = parseInt(m[2], 10);
        while (i < lines.length && (m = ITEM.exec(lines[i].text)) && /\d/.test(m[2]) === ordered) {
          const item = document.createElement("li");
          item.style.marginLeft = `${Math.floor(m[1].length / 2)}em`;
          const start = lines[i].start + m[0].length;
          let end = lines[i].end;
          // lines that continue the item: indented, not starting a block of their own
          while (i + 1 < lines.length && /^\s+\S/.test(lines[i + 1].text) && !startsBlock(lines[i + 1])) {
            i++;
            end = lines[i].end;
          }
          inline(item, start, end);
          list.appendChild(item);
          i++;
        }
        root.appendChild(list);
      } else if (QUOTE.test(line.text)) {
        const quote = document.createElement("blockquote");
        while (i < lines.length && (m = QUOTE.exec(lines[i].text))) {
          const paragraph = document.createElement("p");
          inline(paragraph, lines[i].start + m[0].length, lines[i].end);
          quote.appendChild(paragraph);
          i++;
        }
        root.appendChild(quote);
      } else {
        const paragraph = document.createElement("p");
        const start = line.start;
        let end = line.end;
        i++;
        while (i < lines.length && lines[i].text.trim() && !startsBlock(lines[i])) {
          end = lines[i].end;
          i++;
        }
        inline(paragraph, start, end);
        root.appendChild(paragraph);
      }
    }
    return root;
  }

  // --- the conversation ---------------------------------------------------------------------------------------------

  function showError(message) {
    const box = $("error");
    box.textContent = message || "";
    box.hidden = !message;
  }

  function addMessage(role, content) {
    const message = {role, content, provenance: new Provenance(), stats: null, stopped: false};
    const element = document.createElement("div");
    element.className = "message " + role;
    const label = document.createElement("div");
    label.className = "role";
    label.textContent = role;
    const body = document.createElement("div");
    body.className = "content";
    element.append(label, body);
    if (role === "assistant") {
      const legend = document.createElement("div");
      legend.className = "legend";
      const stats = document.createElement("div");
      stats.className = "stats";
      element.append(legend, stats);
    }
    message.element = element;
    $("messages").appendChild(element);
    state.messages.push(message);
    draw(message);
    return message;
  }

  function draw(message) {
    state.pending.add(message);
    if (state.pending.size === 1) requestAnimationFrame(drawPending);
  }

  function drawPending() {
    for (const message of state.pending) drawMessage(message);
    state.pending.clear();
    const list = $("messages");
    list.scrollTop = list.scrollHeight;
  }

  function drawMessage(message) {
    const body = message.element.querySelector(".content");
    body.replaceChildren(render(message.content, message.provenance));
    if (message.role !== "assistant") return;
    drawLegend(message);
    drawStats(message);
  }

  function drawLegend(message) {
    const legend = message.element.querySelector(".legend");
    legend.replaceChildren();
    const counts = message.provenance.tokens;
    const order = [...counts.keys()].filter((drafter) => drafter !== null);
    order.forEach(colorOf);
    order.sort((a, b) => [...state.colors.keys()].indexOf(a) - [...state.colors.keys()].indexOf(b));
    for (const drafter of [...order, null]) {
      const tokens = counts.get(drafter);
      if (!tokens) continue;
      const entry = document.createElement("span");
      entry.className = "entry";
      entry.dataset.drafter = drafter ?? "";
      entry.dataset.tokens = tokens;
      const swatch = document.createElement("span");
      swatch.className = drafter === null ? "swatch target" : "swatch";
      if (drafter !== null) swatch.style.background = colorOf(drafter);
      entry.append(swatch, `${drafter ?? "target"} ${tokens}`);
      legend.appendChild(entry);
    }
  }

  function drawStats(message) {
    const box = message.element.querySelector(".stats");
    const s = message.stats;
    if (!s) {
      box.textContent = message.stopped ? "stopped" : (state.controller ? "…" : "");
      return;
    }
    const t = s.timings;
    const parts = [`${t.predicted_per_second.toFixed(1)} tokens/s`];
    parts.push(t.draft_n ? `acceptance ${(100 * t.draft_n_accepted / t.draft_n).toFixed(0)}%` : "nothing drafted");
    parts.push(`${t.draft_n} drafted, ${t.draft_n_accepted} accepted`);
    if (s.target_passes) parts.push(`${(t.predicted_n / s.target_passes).toFixed(2)} tokens per target pass`);
    parts.push(`${t.predicted_n} tokens`);
    box.textContent = parts.join(" · ");
  }

  function setBusy(busy) {
    $("send").disabled = busy;
    $("stop").disabled = !busy;
    $("regenerate").disabled = busy || !state.messages.some((m) => m.role === "assistant");
  }

  async function answer() {
    showError("");
    const system = $("system").value.trim();
    const conversation = state.messages.map((m) => ({role: m.role, content: m.content}));
    if (system) conversation.unshift({role: "system", content: system});
    const message = addMessage("assistant", "");
    state.controller = new AbortController();
    setBusy(true);
    try {
      const response = await api("v1/chat/completions", {
        method: "POST", signal: state.controller.signal,
        body: JSON.stringify({messages: conversation, stream: true, specframe: {spans: true}}),
      });
      for await (const chunk of events(response)) {
        if (chunk.error) throw new Error(chunk.error.message);
        const choice = chunk.choices[0];
        if (choice.delta && choice.delta.content) message.content += choice.delta.content;
        for (const span of (choice.specframe && choice.specframe.spans) || []) message.provenance.add(span);
        if (choice.finish_reason) message.stats = {timings: chunk.timings, target_passes: chunk.target_passes};
        draw(message);
      }
    } catch (error) {
      if (error.name === "AbortError") message.stopped = true;
      else showError(error.message);
    } finally {
      state.controller = null;
      setBusy(false);
      draw(message);
      refreshMetrics();
    }
  }

  function send() {
    const input = $("input");
    const content = input.value.trim();
    if (!content || state.controller) return;
    input.value = "";
    addMessage("user", content);
    answer();
  }

  function regenerate() {
    const last = state.messages[state.messages.length - 1];
    if (state.controller || !last || last.role !== "assistant") return;
    state.messages.pop();
    last.element.remove();
    answer();
  }

  function newChat() {
    if (state.controller) state.controller.abort();
    state.messages = [];
    $("messages").replaceChildren();
    showError("");
    setBusy(false);
  }

  // --- the server's statistics and drafters ----------------------------------------------------------------------

  function parseMetrics(text) {
    const samples = [];
    for (const line of text.split("\n")) {
      const m = /^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
      if (!m) continue;
      const labels = {};
      for (const label of (m[2] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
        labels[label[1]] = label[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
      }
      samples.push({name: m[1].replace(/^specframe:/, ""), labels, value: Number(m[3])});
    }
    return samples;
  }

  async function refreshMetrics() {
    try {
      const samples = parseMetrics(await (await api("metrics")).text());
      drawServerStats(samples);
    } catch (error) {
      $("server-stats").textContent = error.message;
    }
  }

  function drawServerStats(samples) {
    const total = (name) => samples.filter((s) => s.name === name).reduce((sum, s) => sum + s.value, 0);
    const drafters = new Map();
    const positions = [];
    const row = (name) => {
      if (!drafters.has(name)) drafters.set(name, {drafted: 0, accepted: 0});
      return drafters.get(name);
    };
    for (const s of samples) {
      const drafter = s.labels.drafter;
      if (drafter === undefined) continue;
      if (s.name === "spec_decode_num_draft_tokens_total") row(drafter).drafted += s.value;
      else if (s.name === "spec_decode_num_accepted_tokens_total") row(drafter).accepted += s.value;
      else if (s.name === "spec_decode_num_accepted_tokens_per_pos_total") {
        const position = Number(s.labels.position);
        positions[position] = positions[position] || new Map();
        positions[position].set(drafter, (positions[position].get(drafter) || 0) + s.value);
      }
    }
    const box = $("server-stats");
    box.classList.remove("muted");
    const summary = document.createElement("p");
    summary.textContent = `${total("request_success_total")} requests answered, `
      + `${total("generation_tokens_total")} tokens generated; `
      + `${total("num_requests_running")} running, ${total("num_requests_waiting")} waiting`;
    const table = document.createElement("table");
    table.innerHTML = "<thead><tr><th>drafter</th><th>drafted</th><th>accepted</th><th>acceptance</th></tr>"
      + "</thead>";     // constant markup, no data
    const rows = document.createElement("tbody");
    for (const [name, d] of drafters) {
      const tr = document.createElement("tr");
      const cells = [name, d.drafted, d.accepted,
                     d.drafted ? `${(100 * d.accepted / d.drafted).toFixed(0)}%` : "–"];
      cells.forEach((value, column) => {
        const td = document.createElement("td");
        if (column === 0) {
          const swatch = document.createElement("span");
          swatch.className = "swatch";
          swatch.style.background = colorOf(name);
          td.append(swatch);
        }
        td.append(String(value));
        tr.appendChild(td);
      });
      rows.appendChild(tr);
    }
    table.appendChild(rows);
    box.replaceChildren(summary, drafters.size ? table : document.createTextNode("no drafts verified yet"));
    drawPositions(positions);
  }

  function drawPositions(positions) {
    const width = 300, height = 120, bottom = 16, top = 12;
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    svg.setAttribute("role", "img");
    const n = positions.length;
    const totals = Array.from({length: n}, (_, i) => [...(positions[i] || new Map()).values()]
      .reduce((a, b) => a + b, 0));
    const highest = Math.max(1, ...totals);
    const add = (name, attributes, content) => {
      const element = document.createElementNS(SVG, name);
      for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, value);
      if (content !== undefined) element.textContent = content;
      svg.appendChild(element);
      return element;
    };
    if (!n) add("text", {x: 4, y: height / 2, class: "axis"}, "no drafted token accepted yet");
    const barWidth = n ? Math.min(24, (width - 8) / n) : 0;
    for (let i = 0; i < n; i++) {
      let y = height - bottom;
      for (const [drafter, count] of positions[i] || []) {
        const h = (height - bottom - top) * count / highest;
        y -= h;
        const bar = add("rect", {x: 4 + i * barWidth + 1, y, width: Math.max(1, barWidth - 2), height: h,
                                 fill: colorOf(drafter)});
        const title = document.createElementNS(SVG, "title");
        title.textContent = `${drafter}, position ${i + 1}: ${count} accepted`;
        bar.appendChild(title);
      }
      if (n <= 16 || i % Math.ceil(n / 16) === 0) {
        add("text", {x: 4 + (i + 0.5) * barWidth, y: height - 3, class: "axis", "text-anchor": "middle"}, i + 1);
      }
    }
    if (n) add("text", {x: 4, y: 10, class: "axis"}, `${highest} tokens`);
    $("positions").replaceChildren(svg);
  }

  async function loadProps() {
    try {
      const props = await (await api("props")).json();
      $("model").textContent = `${props.model_alias} · ${props.total_slots} slots · `
        + `context ${props.default_generation_settings.n_ctx}`;
      drawDrafters(props.drafters);
    } catch (error) {
      $("drafters").textContent = error.message;
    }
  }

  function drawDrafters(drafters) {
    const box = $("drafters");
    if (!drafters.length) {
      box.textContent = "none: speculation is off";
      return;
    }
    box.classList.remove("muted");
    box.replaceChildren(...drafters.map((drafter) => {
      const details = document.createElement("details");
      const summary = document.createElement("summary");
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = colorOf(drafter.name);
      summary.append(swatch, drafter.name === drafter.type ? drafter.name : `${drafter.name} (${drafter.type})`);
      const table = document.createElement("table");
      for (const [key, value] of Object.entries(drafter.params || {})) {
        const tr = document.createElement("tr");
        const name = document.createElement("td");
        name.textContent = key;
        const setting = document.createElement("td");
        setting.textContent = typeof value === "object" ? JSON.stringify(value) : String(value);
        tr.append(name, setting);
        table.appendChild(tr);
      }
      details.append(summary, table);
      return details;
    }));
    state.messages.forEach(draw);    // the colours now follow the configured order
  }

  // --- wiring -----------------------------------------------------------------------------------------------------

  function setTint(on) {
    document.body.classList.toggle("no-tint", !on);
    stored.set("tint", on ? "on" : "off");
  }

  $("api-key").value = stored.get("apiKey", "");
  $("system").value = stored.get("system", "");
  $("tint").checked = stored.get("tint", "on") === "on";
  setTint($("tint").checked);
  if ($("system").value) $("system-box").open = true;

  $("api-key").addEventListener("change", () => {
    stored.set("apiKey", $("api-key").value.trim());
    showError("");
    loadProps();
    refreshMetrics();
  });
  $("system").addEventListener("change", () => stored.set("system", $("system").value));
  $("tint").addEventListener("change", () => setTint($("tint").checked));
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  $("input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  $("stop").addEventListener("click", () => state.controller && state.controller.abort());
  $("regenerate").addEventListener("click", regenerate);
  $("new-chat").addEventListener("click", newChat);

  loadProps();
  refreshMetrics();
  setInterval(() => {
    if (document.visibilityState === "visible") refreshMetrics();
  }, POLL_MS);
})();
