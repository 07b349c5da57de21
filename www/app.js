// The demo page: talk to the memory, ask it, inspect it. All memory text is rendered with textContent: it is
// data, never markup.
import init, { Memory } from "../pkg/loci.js";
import { SAMPLE, SAMPLE_QUESTIONS } from "./sample.js";

const $ = (id) => document.getElementById(id);
const phases = ["tokenizer", "model", "runtime", "storage", "ready"];
let memory = null;

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

function describeError(e) {
  return e && e.code ? `${e.code}: ${e.message}` : String(e);
}

async function refreshInspector() {
  const stats = await memory.stats();
  $("stats").textContent =
    `${stats.sessions} sessions · ${stats.turns} turns · ${stats.units} units · ${stats.vectors} vectors · ` +
    `device ${stats.device} · ${stats.model}`;
  const list = $("sessions");
  list.replaceChildren();
  for (const s of await memory.sessions()) {
    const item = el("li");
    const details = el("details");
    details.append(el("summary", `${s.id} — ${new Date(s.firstTime).toISOString().slice(0, 16).replace("T", " ")} · ${s.turnCount} turns`));
    details.addEventListener("toggle", async () => {
      if (!details.open || details.dataset.loaded) return;
      details.dataset.loaded = "1";
      const turns = await memory.sessionTurns(s.id);
      details.append(el("div", turns.map((t) => `${t.speaker}: ${t.text}`).join("\n"), "turns"));
    });
    item.append(details);
    list.append(item);
  }
}

async function remember(event) {
  event.preventDefault();
  const content = $("message").value;
  const session = $("session").value.trim() || undefined;
  try {
    const report = await memory.addMessages([{ speaker: $("speaker").value || "user", content }], { session });
    $("message").value = "";
    setStatus(`Stored in session ${report.session}.`);
    await refreshInspector();
  } catch (e) {
    setStatus(describeError(e), true);
  }
}

async function ask(event) {
  event.preventDefault();
  const query = $("query").value;
  try {
    const started = performance.now();
    const result = await memory.recall(query, { k: Number($("k").value) || 3, order: "rank" });
    const ms = performance.now() - started;
    const list = $("results");
    list.replaceChildren();
    for (const s of result.sessions) {
      const item = el("li");
      item.append(el("strong", s.id), el("span", `  score ${s.score.toFixed(3)}`, "score"));
      for (const u of s.units) item.append(el("div", u.text, "unit"));
      list.append(item);
    }
    $("context").textContent = result.context;
    setStatus(`Recalled ${result.sessions.length} sessions in ${ms.toFixed(0)} ms on ${result.device}.`);
  } catch (e) {
    setStatus(describeError(e), true);
  }
}

async function loadSample() {
  $("load-sample").disabled = true;
  try {
    for (const [i, s] of SAMPLE.entries()) {
      setStatus(`Loading sample session ${i + 1}/${SAMPLE.length}…`);
      const messages = s.messages.map(([speaker, content, time]) => ({ speaker, content, time }));
      await memory.addMessages(messages, { session: s.session });
    }
    $("query").value = SAMPLE_QUESTIONS[0];
    setStatus(`Sample loaded. Try: ${SAMPLE_QUESTIONS.join(" · ")}`);
    await refreshInspector();
  } catch (e) {
    setStatus(describeError(e), true);
  } finally {
    $("load-sample").disabled = false;
  }
}

async function forget() {
  if (!confirm("Erase everything this memory holds?")) return;
  await memory.forgetAll();
  $("results").replaceChildren();
  $("context").textContent = "";
  await refreshInspector();
  setStatus("Forgotten.");
}

async function main() {
  await init();
  memory = await Memory.open({
    name: "demo",
    embedder: { device: "auto" },
    onProgress: (e) => {
      $("progress").value = phases.indexOf(e.phase) + 1;
      setStatus(e.phase === "ready" ? `Ready on ${e.detail}.` : `Loading ${e.phase}…`);
    },
  });
  $("progress").classList.add("done");
  setStatus(`Ready: embedding on ${(await memory.stats()).device} (${memory.deviceReason}).`);
  $("add-form").addEventListener("submit", remember);
  $("ask-form").addEventListener("submit", ask);
  $("load-sample").addEventListener("click", loadSample);
  $("forget").addEventListener("click", forget);
  await refreshInspector();
  window.loci = { memory }; // for the console and the end-to-end test
}

main().catch((e) => setStatus(describeError(e), true));
