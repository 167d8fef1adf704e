// Rendering: turn cards (heard text, replies per agent, stage timeline, audio) and the
// context panel. Everything goes through textContent: service text is never HTML.

const TIMELINE = [
  "sent",
  "end of speech",
  "final transcript",
  "query",
  "routed",
  "first reply text",
  "first audio",
  "playing",
];

const ORIGINS = { voice: "spoken", earlier: "earlier" };

function el(tag, attrs = {}, text = null) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== null) node.textContent = text;
  return node;
}

function ms(value) {
  return value >= 1000 ? `${(value / 1000).toFixed(2)} s` : `${Math.round(value)} ms`;
}

export class Turns {
  constructor(list, player) {
    this.list = list;
    this.player = player;
    this.byId = new Map();
    this.order = [];
  }

  open(query, stages) {
    const turn = {
      id: query.request_id,
      text: query.text,
      origin: query.origin,
      stages: new Map(stages),
      sources: new Map(), // source -> {text, final, node}
      audioBytes: 0,
      audioSeconds: 0,
      audioFinal: false,
      done: false,
      interrupted: false,
    };
    turn.node = this.card(turn);
    this.byId.set(turn.id, turn);
    this.order.push(turn.id);
    this.list.append(turn.node);
    turn.node.scrollIntoView({ block: "nearest" });
    this.renderTimeline(turn);
    return turn;
  }

  /** After a reload: the conversation's earlier exchanges (from `history`) as finished
   * cards, before any turn of this page. */
  restore(entries) {
    const first = this.list.firstChild;
    for (const entry of entries) {
      if (entry.kind !== "exchange" || this.byId.has(`earlier-${entry.id}`)) continue;
      const turn = this.open({ request_id: `earlier-${entry.id}`, text: entry.user, origin: "earlier" }, []);
      this.list.insertBefore(turn.node, first);
      this.order.splice(this.order.indexOf(turn.id), 1);
      this.order.splice(this.order.filter((id) => id.startsWith("earlier-")).length, 0, turn.id);
      turn.done = true;
      this.reply({ request_id: turn.id, source: "device", text: shownReply(entry.assistant), final: true }, 0);
      turn.stages.clear();
      this.renderTimeline(turn);
    }
  }

  card(turn) {
    const item = el("li", { class: "turn", "data-request-id": turn.id });
    const head = el("div", { class: "turn-head" });
    head.append(
      el("span", { class: `origin origin-${turn.origin}` }, ORIGINS[turn.origin] || "typed"),
      el("q", { class: "heard" }, turn.text),
      el("code", { class: "rid", title: "request id" }, turn.id.slice(0, 8)),
    );
    item.append(head, el("div", { class: "replies" }), el("ol", { class: "timeline", "aria-label": "Stages" }));
    item.append(el("p", { class: "audio-line", hidden: "" }));
    return item;
  }

  stage(id, name, now) {
    const turn = id ? this.byId.get(id) : this.latestOpen();
    if (!turn || turn.stages.has(name)) return;
    turn.stages.set(name, now);
    this.renderTimeline(turn);
  }

  reply(message, now) {
    const turn = this.byId.get(message.request_id);
    if (!turn) return;
    if (!turn.stages.has("routed")) {
      turn.stages.set("routed", now);
      turn.routedTo = message.source;
    }
    if (message.text.trim() && !turn.stages.has("first reply text")) {
      turn.stages.set("first reply text", now);
      if (message.timestamp_us) turn.serverStamp = message.timestamp_us;
    }
    let part = turn.sources.get(message.source);
    if (!part) {
      part = { text: "", final: false, frames: 0, node: el("p", { class: `reply source-${message.source}` }) };
      part.node.append(el("span", { class: "agent" }, message.source), el("span", { class: "text" }));
      turn.sources.set(message.source, part);
      turn.node.querySelector(".replies").append(part.node);
    }
    if (message.source === "router" && part.text && message.text) part.text += " ";
    part.text += message.text;
    part.frames += 1;
    part.final = message.final;
    part.node.querySelector(".text").textContent = part.text;
    part.node.classList.toggle("streaming", !message.final);
    turn.done = [...turn.sources.entries()].some(([s, p]) => s !== "router" && p.final) ||
      (turn.sources.size === 1 && turn.sources.has("router") && part.final);
    this.renderTimeline(turn);
  }

  audio(message, now, startsAt) {
    const turn = this.byId.get(message.request_id);
    if (!turn) return;
    if (message.bytes > 0 && !turn.stages.has("first audio")) {
      turn.stages.set("first audio", now);
      const context = this.player.context;
      if (startsAt !== null && context) {
        turn.stages.set("playing", now + Math.max(0, startsAt - context.currentTime) * 1000);
      }
    }
    turn.audioBytes += message.bytes;
    turn.audioSeconds += message.bytes / 2 / message.sample_rate;
    turn.audioFinal = turn.audioFinal || message.final;
    const line = turn.node.querySelector(".audio-line");
    line.hidden = false;
    line.textContent =
      `spoken reply: ${turn.audioSeconds.toFixed(1)} s (${turn.audioBytes.toLocaleString()} bytes at ` +
      `${message.sample_rate} Hz)${turn.audioFinal ? "" : " …"} · audio ${this.player.state}`;
    this.renderTimeline(turn);
  }

  interrupted(message) {
    const turn = message.request_id ? this.byId.get(message.request_id) : this.latestOpen();
    if (!turn) return;
    turn.interrupted = true;
    turn.node.classList.add("interrupted");
    const line = turn.node.querySelector(".audio-line");
    line.hidden = false;
    line.textContent = `${line.textContent.replace(/ · interrupted.*$/, "")} · interrupted`;
  }

  renderTimeline(turn) {
    const list = turn.node.querySelector(".timeline");
    const entries = TIMELINE.filter((name) => turn.stages.has(name)).map((name) => [name, turn.stages.get(name)]);
    list.replaceChildren();
    if (entries.length === 0) return;
    const origin = entries[0][1];
    const span = Math.max(1, entries[entries.length - 1][1] - origin);
    for (const [name, at] of entries) {
      const label = name === "routed" && turn.routedTo ? `routed → ${turn.routedTo}` : name;
      const item = el("li", { class: "stage", "data-stage": name });
      const bar = el("span", { class: "tick", "aria-hidden": "true" });
      bar.style.setProperty("--at", `${((at - origin) / span) * 100}%`);
      item.append(bar, el("span", { class: "stage-name" }, label), el("span", { class: "stage-at" }, `+${ms(at - origin)}`));
      list.append(item);
    }
  }

  latestOpen() {
    for (let i = this.order.length - 1; i >= 0; i--) {
      const turn = this.byId.get(this.order[i]);
      if (!turn.done) return turn;
    }
    return null;
  }

  current() {
    const turn = this.latestOpen() || this.byId.get(this.order[this.order.length - 1]);
    return turn ? turn.id : null;
  }

  unfinished() {
    return this.order.filter((id) => !this.byId.get(id).done).length;
  }

  /** What the page saw dictated: turns the notes agent answered, oldest first. */
  notes() {
    return this.order
      .map((id) => this.byId.get(id))
      .filter((turn) => turn.sources.has("notes"))
      .map((turn) => ({ heard: turn.text, answer: turn.sources.get("notes").text }));
  }

  summary() {
    return this.order.map((id) => {
      const turn = this.byId.get(id);
      return {
        id,
        text: turn.text,
        origin: turn.origin,
        done: turn.done,
        interrupted: Boolean(turn.interrupted),
        reply: Object.fromEntries([...turn.sources].map(([s, p]) => [s, p.text])),
        frames: Object.fromEntries([...turn.sources].map(([s, p]) => [s, p.frames])),
        stages: [...turn.stages.keys()],
        audioBytes: turn.audioBytes,
      };
    });
  }
}

/** What the device said for a recorded exchange: the notes agent records a dictated line
 * for the model as "(dictating a note) …" and an empty note as "(no note saved)"; the
 * person heard its confirmation. */
export function shownReply(assistant) {
  if (/^\(dictating a note\)/.test(assistant)) return "Got it.";
  if (assistant === "(no note saved)") return "There was nothing to save.";
  return assistant;
}

/** The topics panel: per topic what the model holds (from `context_view`, where the
 * service offers it) and, for notes, the note being dictated (kept by the service across
 * a reload), else what this page set (scene) or saw dictated (notes). */
export function renderContext(list, topics, scene, notes, view = null) {
  list.replaceChildren();
  const draft = view && view.dictating && view.dictating.length ? view.dictating.join(" ") : "";
  for (const topic of topics) {
    list.append(el("dt", {}, topic));
    const dd = el("dd", { "data-topic": topic });
    const held = view ? view.blocks.filter((b) => b.section === topic) : [];
    const dictating = topic === "notes" ? draft : "";
    if (held.length || dictating) {
      const ul = el("ul", { class: "notes" });
      for (const block of held) ul.append(el("li", { class: `block-${block.kind}` }, block.text));
      if (dictating) ul.append(el("li", { class: "dictating" }, `being dictated: “${dictating}”`));
      dd.append(ul);
    } else if (topic === "scene") {
      dd.textContent = scene || "(not set)";
    } else if (topic === "notes" && notes.length) {
      const ul = el("ul", { class: "notes" });
      for (const note of notes) {
        const li = el("li", {}, `“${note.heard}”`);
        li.append(el("span", { class: "dim" }, ` → ${note.answer}`));
        ul.append(li);
      }
      dd.append(ul);
    } else {
      dd.textContent = topic === "notes" ? "(nothing dictated yet)" : "(empty)";
    }
    list.append(dd);
  }
}

function kib(bytes) {
  return bytes >= 1024 ? `${(bytes / 1024).toFixed(1)} KiB` : `${bytes} B`;
}

/** The model's view (`context_view`): each section's bytes against its budget, its
 * summary, then the blocks the model sees, in order. */
export function renderView(container, message) {
  const parts = [];
  const table = el("table", { class: "sections" });
  table.append(el("caption", { class: "sr-only" }, "Context sections: bytes used of budget"));
  const head = el("tr");
  for (const name of ["section", "entries", "bytes used / budget"]) head.append(el("th", { scope: "col" }, name));
  table.append(head);
  for (const [name, section] of Object.entries(message.sections || {})) {
    const row = el("tr");
    const use = el("td");
    const meter = el("meter", {
      min: "0",
      max: String(section.budget_bytes || 1),
      high: String(Math.round((section.budget_bytes || 1) * 0.8)),
      value: String(section.used_bytes || 0),
    });
    use.append(meter, el("span", {}, ` ${kib(section.used_bytes || 0)} / ${kib(section.budget_bytes || 0)}`));
    row.append(el("th", { scope: "row" }, name), el("td", {}, String(section.entries ?? "")), use);
    table.append(row);
    if (section.summary) parts.push(el("p", { class: "summary" }, `${name} summary: ${section.summary}`));
  }
  const blocks = el("ol", { class: "blocks" });
  for (const block of message.blocks || []) {
    const li = el("li", { class: `block-${block.kind}` });
    li.append(el("span", { class: "agent" }, `${block.section} · ${block.kind}`), el("span", {}, block.text));
    blocks.append(li);
  }
  if (!(message.blocks || []).length) blocks.append(el("li", { class: "dim" }, "(empty)"));
  container.replaceChildren(table, ...parts, blocks);
}

/** The whole conversation (`history`), oldest first; compacted records are marked. */
export function renderHistory(list, message) {
  list.replaceChildren();
  for (const entry of message.entries || []) {
    const li = el("li", { class: entry.in_view === false ? "compacted" : "" });
    if (entry.kind === "exchange") {
      li.append(el("span", { class: "agent" }, "you"), el("span", {}, entry.user));
      const answer = el("div");
      answer.append(el("span", { class: "agent" }, "device"), el("span", {}, entry.assistant));
      li.append(answer);
    } else {
      li.append(el("span", { class: "agent" }, `${entry.section} ${entry.kind}`), el("span", {}, entry.text));
    }
    if (entry.in_view === false) li.append(el("span", { class: "dim" }, " (compacted)"));
    list.append(li);
  }
  if (!(message.entries || []).length) list.append(el("li", { class: "dim" }, "(nothing yet)"));
}
