// The console page: wires the session, the microphone, the player and the panels.

import { FRAME_MS, MIC_RATE, Microphone, Player, microphoneProblem, refusalMessage } from "./audio.js";
import { Session, serviceUrl, takeToken } from "./session.js";
import { renderContext, renderHistory, renderView, Turns } from "./view.js";

const $ = (id) => document.getElementById(id);
const VOICED_LEVEL = 0.012; // RMS above which a microphone frame counts as speech
const PTT_TAIL_FRAMES = 8; // silence sent after a release when end_of_utterance is not offered

const token = takeToken();
const player = new Player();
const turns = new Turns($("turns"), player);
let session = null;
let mic = null;
let mode = "off"; // off | hands-free | push-to-talk
let pttHeld = false;
let lastVoicedAt = null;
let speech = null; // the utterance being transcribed: {utterance, stages}
const typed = []; // typed turns sent, waiting for their `query` echo
const sceneSent = { text: "" };
const HISTORY_PAGE = 200;
let lastView = null; // the latest context_view, when the service offers it
let historyTotal = 0;
let restoring = false; // a resumed session in a fresh page: the next whole history page refills it
let busy = false;
let healthVoice = null; // what /health said about voice, when known
let pttReleasedAt = null;
let tailFrames = 0;

// -- notices and status --------------------------------------------------------------

function notice(text, kind = "warn") {
  const box = $("notice");
  box.hidden = !text;
  box.textContent = text || "";
  box.dataset.kind = kind;
}

function setConnection(state, text) {
  const el = $("st-connection");
  el.dataset.state = state;
  el.textContent = text;
}

function logEvent(text) {
  const list = $("events");
  const item = document.createElement("li");
  item.textContent = `${new Date().toLocaleTimeString()} ${text}`;
  list.prepend(item);
  while (list.children.length > 40) list.lastChild.remove();
}

function updateQueue() {
  const open = turns.unfinished();
  $("st-queue").textContent =
    (busy ? "processing" : "idle") + (open > 1 ? ` · ${open - 1} waiting` : "");
}

async function pollHealth() {
  try {
    const health = await (await fetch("/health", { cache: "no-store" })).json();
    healthVoice = Boolean(health.voice);
    $("st-device").textContent =
      `${health.participants} participant${health.participants === 1 ? "" : "s"} · ` +
      (health.voice ? "voice on" : "text only");
  } catch {
    $("st-device").textContent = "unreachable";
  }
}

// -- connecting ------------------------------------------------------------------------

function helloFields() {
  const wantAudio = $("want-audio").checked;
  const hello = {
    display_name: $("display-name").value.trim(),
    audio: { sample_rate: MIC_RATE, channels: 1 },
    want_audio: wantAudio,
  };
  const pid = $("participant").value.trim();
  if (pid) hello.participant_id = pid;
  if (session.protocol >= 2) {
    if (token) hello.token = token;
    const resume = pid && sessionStorage.getItem(`edge.resume.${pid}`);
    if (resume) hello.resume = resume;
  }
  return hello;
}

async function connect() {
  if (session) return;
  notice("");
  await player.unlock(); // inside the click: browsers start audio only after a gesture
  session = new Session(serviceUrl());
  session.addEventListener("message", (e) => onMessage(e.detail));
  session.addEventListener("close", (e) => onClose(e.detail));
  setConnection("connecting", "connecting…");
  try {
    await openWithFallback();
  } catch (error) {
    session = null;
    setConnection("closed", "not connected");
    notice(`Could not join: ${error.message}`, "error");
    return;
  }
  onWelcome(session.welcome);
}

async function openWithFallback() {
  try {
    await session.open(helloFields());
  } catch (error) {
    const older = /speaks protocol (\d+)/.exec(error.message);
    if (!older || Number(older[1]) >= session.protocol) throw error;
    session.protocol = Number(older[1]); // an older service: its own protocol, no new fields
    await session.open(helloFields());
  }
}

function onWelcome(welcome) {
  setConnection("open", `connected (protocol ${welcome.protocol})`);
  $("st-participant").textContent = welcome.participant_id;
  $("st-profile").textContent = welcome.profile || "(none)";
  $("st-models").textContent = Object.entries(welcome.models || {})
    .map(([role, name]) => `${role}: ${name}`)
    .join(" · ") || "–";
  if (welcome.session_token) {
    sessionStorage.setItem(`edge.resume.${welcome.participant_id}`, welcome.session_token);
    sessionStorage.setItem("edge.participant", welcome.participant_id); // for a reload
  }
  logEvent(`joined as ${welcome.participant_id}${welcome.resumed ? " (resumed)" : ""}`);
  for (const id of ["turn-text", "send", "scene-text", "scene-send", "stop-reply"]) $(id).disabled = false;
  $("connect").hidden = true;
  $("disconnect").hidden = false;
  for (const id of ["participant", "display-name", "want-audio"]) $(id).disabled = true;
  showContext();
  const asked = $("want-audio").checked;
  enableMicrophone(asked ? welcome.audio_out_rate !== null : healthVoice !== false);
  $("view-section").hidden = !welcome.session_token;
  $("history-section").hidden = !welcome.session_token;
  restoring = Boolean(welcome.resumed) && turns.order.length === 0; // a reload, not a reconnect
  if (welcome.session_token) requestViews();
  updateQueue();
  pollHealth();
  $("turn-text").focus();
}

function enableMicrophone(serverVoice) {
  const problem = microphoneProblem();
  if (!serverVoice) {
    notice("This service runs without voice (started with --no-voice): type your turns.", "info");
  } else if (problem) {
    notice(problem, "warn");
  }
  const usable = serverVoice && !problem;
  $("mic-toggle").disabled = !usable;
  $("ptt").disabled = !usable;
}

function onClose({ code, reason }) {
  lastView = null;
  historyTotal = 0;
  stopMicrophone();
  player.flush();
  session = null;
  setConnection("closed", "not connected");
  for (const id of ["turn-text", "send", "scene-text", "scene-send", "stop-reply", "mic-toggle", "ptt"]) {
    $(id).disabled = true;
  }
  for (const id of ["participant", "display-name", "want-audio"]) $(id).disabled = false;
  $("connect").hidden = false;
  $("disconnect").hidden = true;
  if (code !== 1000) {
    notice(`The connection closed (${code}${reason ? `: ${reason}` : ""}). Connect again to go on.`, "error");
  }
  logEvent(`disconnected (${code}${reason ? ` ${reason}` : ""})`);
}

// -- messages from the service ----------------------------------------------------------

function onMessage(message) {
  const now = performance.now();
  switch (message.type) {
    case "transcript":
      onTranscript(message, now);
      break;
    case "query":
      onQuery(message, now);
      break;
    case "status":
      busy = message.state === "processing";
      if (busy) turns.stage(null, "processing", now);
      if (!busy && session && session.welcome && session.welcome.session_token) requestViews();
      break;
    case "reply":
      turns.reply(message, now);
      if (message.source === "notes") {
        showContext();
      }
      break;
    case "audio":
      turns.audio(message, now, player.play(message.pcm, message.sample_rate));
      break;
    case "interrupted":
      player.flush();
      turns.interrupted(message);
      logEvent(`reply interrupted (${message.reason || "no reason"})`);
      break;
    case "error":
      onError(message);
      break;
    case "context_view":
      lastView = message;
      renderView($("view"), message);
      showContext();
      break;
    case "history":
      onHistory(message);
      break;
    case "bye":
      logEvent("the service said bye");
      break;
    default:
      logEvent(`message ${message.type}`);
  }
  updateQueue();
}

function onTranscript(message, now) {
  if (!speech || speech.utterance !== message.utterance) {
    speech = { utterance: message.utterance, stages: [] };
  }
  const live = $("live-transcript");
  live.textContent = message.final ? "" : `hearing: ${message.text}`;
  if (message.final) {
    const end = pttReleasedAt ?? lastVoicedAt ?? now;
    speech.stages.push(["end of speech", Math.min(end, now)], ["final transcript", now]);
    speech.text = message.text;
    speech.truncated = message.truncated;
    pttReleasedAt = null;
  }
}

function onQuery(message, now) {
  let stages;
  if (message.origin === "voice" && speech && speech.text !== undefined) {
    stages = speech.stages;
    speech = null;
  } else {
    const sent = typed.shift();
    stages = sent ? [["sent", sent]] : [];
  }
  turns.open(message, [...stages, ["query", now]]);
}

function onError(message) {
  const about = message.in_reply_to ? ` (${message.in_reply_to})` : "";
  if (/context_view|history/.test(message.message) && /unknown message type/.test(message.message)) {
    $("view-section").hidden = true; // an older service: panels stay hidden
    $("history-section").hidden = true;
    return;
  }
  notice(`The service says${about}: ${message.message}`, "error");
  logEvent(`error${about}: ${message.message}`);
}

function requestViews() {
  session.send({ type: "context_view" });
  session.send({ type: "history", offset: Math.max(0, historyTotal - HISTORY_PAGE), limit: HISTORY_PAGE });
}

function onHistory(message) {
  const behind = message.total > message.offset + message.entries.length;
  historyTotal = message.total;
  if (behind) {
    session.send({ type: "history", offset: Math.max(0, message.total - HISTORY_PAGE), limit: HISTORY_PAGE });
  }
  renderHistory($("history"), message);
  if (restoring && !behind) restore(message.entries || []);
}

/** A resumed session (a reload, a dropped link): the earlier turns and the scene the
 * service holds come back into the page. */
function restore(entries) {
  restoring = false;
  turns.restore(entries);
  const scene = entries.filter((e) => e.section === "scene" && e.kind !== "exchange").pop();
  if (scene && !sceneSent.text) {
    sceneSent.text = scene.text;
    $("scene-text").value = scene.text;
    showContext();
  }
  updateQueue();
}

function showContext() {
  const topics = session && session.welcome ? session.welcome.context_topics : [];
  renderContext($("topics"), topics || [], sceneSent.text, turns.notes(), lastView);
}

// -- talking --------------------------------------------------------------------------

function onMicFrame(pcm, level) {
  $("mic-level").value = Math.min(1, level * 4);
  if (level > VOICED_LEVEL) lastVoicedAt = performance.now();
  if (!session || !session.connected) return;
  if (mode === "hands-free" || pttHeld) {
    session.sendAudio(pcm);
  } else if (tailFrames > 0) {
    tailFrames -= 1;
    session.sendAudio(new ArrayBuffer(pcm.byteLength)); // silence lets the device's endpointing end it
  }
}

async function startMicrophone() {
  if (!mic) mic = new Microphone(onMicFrame);
  try {
    await mic.start();
    return true;
  } catch (error) {
    notice(refusalMessage(error), "error");
    mode = "off";
    return false;
  }
}

function stopMicrophone() {
  if (mic) mic.stop();
  mode = "off";
  pttHeld = false;
  $("mic-toggle").setAttribute("aria-pressed", "false");
  $("mic-toggle").textContent = "Start hands-free";
  $("ptt").setAttribute("aria-pressed", "false");
  $("mic-level").value = 0;
}

async function toggleHandsFree() {
  if (mode === "hands-free") {
    stopMicrophone();
    logEvent("hands-free off");
    return;
  }
  if (!(await startMicrophone())) return;
  mode = "hands-free";
  $("mic-toggle").setAttribute("aria-pressed", "true");
  $("mic-toggle").textContent = "Stop hands-free";
  logEvent("hands-free: listening");
}

async function pttDown() {
  if (pttHeld || $("ptt").disabled) return;
  pttHeld = true;
  $("ptt").setAttribute("aria-pressed", "true");
  if (player.playing) bargeIn();
  if (!(await startMicrophone())) {
    pttHeld = false;
    $("ptt").setAttribute("aria-pressed", "false");
    return;
  }
  if (mode !== "hands-free") mode = "push-to-talk";
  $("live-transcript").textContent = "listening…";
}

function pttUp() {
  if (!pttHeld) return;
  pttHeld = false;
  $("ptt").setAttribute("aria-pressed", "false");
  pttReleasedAt = performance.now();
  if (mode === "hands-free") return;
  if (session && session.offers("end_of_utterance")) {
    session.send({ type: "end_of_utterance" });
  } else {
    tailFrames = Math.ceil(PTT_TAIL_FRAMES * (100 / FRAME_MS));
  }
}

function bargeIn() {
  player.flush();
  const current = turns.current();
  if (session) session.send({ type: "interrupt", ...(current ? { request_id: current } : {}) });
}

function sendText(event) {
  event.preventDefault();
  const box = $("turn-text");
  const text = box.value.trim();
  if (!text || !session) return; // a typed turn queues behind a reply that is still speaking
  typed.push(performance.now());
  if (session.send({ type: "text", text })) box.value = "";
}

function sendScene(event) {
  event.preventDefault();
  const text = $("scene-text").value;
  if (!session) return;
  session.send({ type: "context", topic: "scene", text });
  sceneSent.text = text;
  showContext();
  logEvent("scene context sent");
}

function isTyping(target) {
  return target instanceof HTMLElement && target.closest("input, textarea, select, [contenteditable]");
}

function wire() {
  $("connect-form").addEventListener("submit", (e) => {
    e.preventDefault();
    connect();
  });
  $("disconnect").addEventListener("click", () => session && session.close());
  $("text-form").addEventListener("submit", sendText);
  $("scene-form").addEventListener("submit", sendScene);
  $("mic-toggle").addEventListener("click", toggleHandsFree);
  $("stop-reply").addEventListener("click", bargeIn);
  $("view-refresh").addEventListener("click", () => session && requestViews());
  const ptt = $("ptt");
  ptt.addEventListener("pointerdown", (e) => {
    ptt.setPointerCapture(e.pointerId);
    pttDown();
  });
  for (const type of ["pointerup", "pointercancel"]) ptt.addEventListener(type, pttUp);
  document.addEventListener("keydown", (e) => {
    if (e.code !== "Space" || e.repeat || isTyping(e.target)) return;
    if (e.target instanceof HTMLButtonElement && e.target !== ptt) return;
    e.preventDefault();
    pttDown();
  });
  document.addEventListener("keyup", (e) => {
    if (e.code !== "Space" || isTyping(e.target)) return;
    if (e.target instanceof HTMLButtonElement && e.target !== ptt) return;
    e.preventDefault();
    pttUp();
  });
  window.addEventListener("beforeunload", () => session && session.close());
}

/** After a reload, this tab's last participant (with its resume token) is pre-filled, so
 * Connect resumes the same conversation; the click is still needed, to unlock audio. */
function offerResume() {
  const last = sessionStorage.getItem("edge.participant");
  if (!last || !sessionStorage.getItem(`edge.resume.${last}`) || $("participant").value) return;
  $("participant").value = last;
  notice(`Connect to resume as ${last}; clear the participant field to start afresh.`, "info");
}

wire();
offerResume();
pollHealth();
setInterval(pollHealth, 5000);
if (token === null && new URL(location.href).searchParams.size === 0) {
  logEvent("no device token in the address: a service that needs one refuses the connection");
}

// For diagnostics and the browser tests: what the page has observed.
window.edgeConsole = {
  state: () => ({
    connected: Boolean(session && session.connected),
    mode,
    player: player.stats(),
    turns: turns.summary(),
  }),
};
