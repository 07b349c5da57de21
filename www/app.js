// The demo: a chat whose bot remembers across reloads. Every reply uses answer() with the configured LLM endpoint;
// without one, the page shows the recalled and extractively pruned evidence instead. All memory text is rendered
// with textContent: it is data, never markup. The API key stays in this page's memory unless "remember" is ticked.
// "Sync" syncs the memory with a WebDAV folder (loci/sync); its password and passphrase are never stored.
// "Run the model in this browser" loads a small GGUF model into wllama (served by this site, like the embedder) and
// answers with it through loci/llm: then nothing leaves the device.
// loci/sync: the library with sync (the default entry, ../pkg/loci.js, is the same without it).
import init, { Memory } from "../pkg-sync/loci.js";
import { fromWllama } from "../adapters/llm.js";
import { SAMPLE, SAMPLE_QUESTIONS } from "./sample.js";

const $ = (id) => document.getElementById(id);
const phases = ["tokenizer", "model", "runtime", "storage", "ready"];
const SETTINGS_KEY = "loci-demo-llm";
const LOCAL_MODEL = { name: "SmolLM2-135M", url: "assets/llm/SmolLM2-135M-Instruct.Q4_1.gguf", contextTokens: 2048 };
let memory = null;
// The in-browser model once loaded ({ wllama, loadMs }), and whether replies come from it.
let local = null;
let usingLocal = false;
const callStats = []; // each in-browser call's speed, for the page and the end-to-end test

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

const describeError = (e) => (e && e.code ? `${e.code}: ${e.message}` : String(e));
const when = (ms) => new Date(ms).toISOString().slice(0, 16).replace("T", " ");

// A line of the transcript; returns it, and its text node for a reply still being written.
function say(who, text, className) {
  const item = el("li", undefined, className);
  const body = document.createTextNode(text);
  item.append(el("span", who, "who"), body);
  $("transcript").append(item);
  item.scrollIntoView({ block: "end" });
  return { item, body };
}

function showEvidence(result) {
  const list = $("evidence");
  list.replaceChildren();
  for (const s of result.sessions) {
    const item = el("li");
    item.append(el("strong", s.id), el("span", `  ${when(s.firstTime)} · score ${s.score.toFixed(3)}`, "score"));
    for (const u of s.units) {
      const unit = el("div", u.text, "unit");
      unit.title = `unit ${u.id}, score ${u.score.toFixed(3)}`;
      item.append(unit);
    }
    list.append(item);
  }
  $("context").textContent = result.context;
  $("context-summary").textContent = `What the memory added to the prompt (${result.contextTokens} tokens` +
    `${result.unprunedTokens > result.contextTokens ? ` of ${result.unprunedTokens} recalled` : ""})`;
}

async function refreshMeters() {
  const stats = await memory.stats();
  const llm = stats.llm;
  const phases = Object.values(llm);
  const calls = phases.reduce((n, p) => n + p.calls, 0);
  const tokens = phases.reduce((n, p) => n + p.inputTokens + p.outputTokens, 0);
  const storage = stats.storage.usage === null ? "" : ` · storage ${(stats.storage.usage / 1e6).toFixed(1)} MB`;
  // Not persistent: the browser may evict the whole memory under storage pressure; offer to ask it not to.
  $("storage-warning").hidden = stats.storage.persisted !== false;
  const pending = stats.pendingEmbeddings ? ` · embedding ${stats.pendingEmbeddings} long message(s) in the background` : "";
  $("meters").textContent = `embedding on ${stats.device} · LLM ${memory.hasLlm ? "on" : "off"} · ${calls} LLM calls, ` +
    `${tokens} tokens${storage}${pending}`;
  $("stats").textContent = `${stats.sessions} sessions · ${stats.turns} turns · ${stats.units} units · ${stats.model}`;
  const list = $("sessions");
  list.replaceChildren();
  for (const s of await memory.sessions()) {
    const details = el("details");
    details.append(el("summary", `${s.id} — ${when(s.firstTime)} · ${s.turnCount} turns`));
    details.addEventListener("toggle", async () => {
      if (!details.open || details.dataset.loaded) return;
      details.dataset.loaded = "1";
      const turns = await memory.sessionTurns(s.id);
      details.append(el("div", turns.map((t) => `${t.speaker}: ${t.text}`).join("\n"), "turns"));
    });
    const item = el("li");
    item.append(details);
    list.append(item);
  }
}

async function refreshDistilled() {
  const episodes = $("episodes");
  episodes.replaceChildren();
  for (const e of await memory.episodes()) {
    const item = el("li");
    item.append(el("strong", e.title), el("span", `  ${when(e.time)}`, "score"), el("div", e.narrative),
      el("div", `turns ${e.turnIds.join(", ")}${e.mergedFrom.length ? ` · merged from ${e.mergedFrom.join(", ")}` : ""}`, "provenance"));
    episodes.append(item);
  }
  const facts = $("facts");
  facts.replaceChildren();
  for (const f of await memory.facts({ includeSuperseded: true })) {
    const item = el("li");
    item.append(el("span", f.statement, f.status === "superseded" ? "superseded" : ""),
      el("div", `${f.kind} · ${f.origin} · episode ${f.episodeIds.join(", ")} · turns ${f.turnIds.join(", ")}` +
        (f.supersededBy ? ` · superseded by fact ${f.supersededBy}` : ""), "provenance"));
    if (f.supersedes.length) {
      const history = el("button", "history");
      history.type = "button";
      history.addEventListener("click", async () => {
        const chain = await memory.history(f.id);
        item.append(el("div", chain.map((h) => `${h.status === "superseded" ? "was" : "now"}: ${h.statement}`).join("\n"), "provenance"));
      });
      item.append(history);
    }
    facts.append(item);
  }
}

// Distillation runs in the background as windows fill (and after a reload); show where it is.
function distillProgress(e) {
  if (e.error) return setStatus(`Distillation stopped: ${e.error.message}`, true);
  if (!e.ok) setStatus(`A ${e.job} job failed; it will be retried.`);
  // Events can come during Memory.open (work resumed after a reload), before `memory` is set.
  if (memory && e.jobsLeft === 0) refreshDistilled().then(refreshMeters).catch((err) => setStatus(describeError(err), true));
}

async function distill() {
  if (!memory.hasLlm) return setStatus("Distillation needs an LLM endpoint (see the settings).", true);
  $("distill").disabled = true;
  try {
    setStatus("Distilling…");
    const report = await memory.flush();
    const stats = await memory.stats();
    setStatus(`Distilled: ${report.jobsRun} jobs → ${stats.distill.episodes} episodes, ${stats.distill.factsActive} facts (${stats.distill.factsSuperseded} superseded)` +
      (report.parkedTotal ? ` (${report.parkedTotal} parked)` : "") + ".");
  } catch (e) {
    setStatus(describeError(e), true);
  } finally {
    $("distill").disabled = false;
    await refreshDistilled();
    await refreshMeters();
  }
}

async function reply(question) {
  if (memory.hasLlm) {
    // The answer shows as the model writes it (as text: memory is data, never markup); a failed one is taken back.
    let line = null;
    const onText = (text) => {
      line ??= say("loci", "", "bot");
      line.body.data = text;
    };
    // Stop: the answer's calls are cancelled; what was written so far stays, marked, and is not remembered.
    const stop = new AbortController();
    $("stop").onclick = () => stop.abort();
    $("stop").hidden = false;
    let a;
    // A small model on a CPU reads ~15 prompt tokens a second on one core: two sessions, pruned without an LLM call.
    const options = usingLocal ? { k: 2, prune: "extractive" } : { k: 3 };
    try {
      a = await memory.answer(question, { ...options, onText, signal: stop.signal });
    } catch (e) {
      if (e.code === "ABORTED" && line) line.body.data += " [stopped]";
      else line?.item.remove();
      throw e;
    } finally {
      $("stop").hidden = true;
    }
    showEvidence(a);
    if (usingLocal) $("context-panel").open = true;
    if (line) line.body.data = a.answer;
    else say("loci", a.answer, "bot");
    return { answer: a.answer, note: `${a.spent.calls} LLM calls, ${a.spent.usage.inputTokens + a.spent.usage.outputTokens} tokens` };
  }
  const r = await memory.recall(question, { k: 3, prune: "extractive", order: "rank" });
  showEvidence(r);
  const best = r.sessions.length ? r.context : "(nothing in memory yet)";
  say("loci (no LLM: the evidence I would use)", best, "bot evidence");
  return { answer: null, note: `recalled ${r.sessions.length} sessions, ${r.contextTokens}/${r.unprunedTokens} tokens kept` };
}

async function send(event) {
  event.preventDefault();
  const text = $("message").value.trim();
  if (!text) return;
  $("send").disabled = true;
  say("you", text, "user");
  $("message").value = "";
  try {
    setStatus("Thinking…");
    const started = performance.now();
    // Remember the exchange after answering, so the question does not recall itself. A reply that failed (the
    // endpoint down, a rate limit) still leaves the user's message remembered; one that could not be stored goes
    // back to the box.
    let replied;
    try { replied = await reply(text); } catch (e) { replied = { failure: e }; }
    const turns = [{ role: "user", content: text }];
    if (replied.answer) turns.push({ role: "assistant", content: replied.answer });
    try {
      await memory.addMessages(turns);
    } catch (e) {
      if (!$("message").value) $("message").value = text;
      throw e;
    }
    if (replied.failure) throw replied.failure;
    setStatus(`Replied in ${((performance.now() - started) / 1000).toFixed(1)} s (${replied.note}).`);
  } catch (e) {
    if (e.code === "ABORTED") setStatus("Stopped. Your message is remembered; the unfinished reply is not.");
    else setStatus(describeError(e), true);
  } finally {
    $("send").disabled = false;
    await refreshMeters();
  }
}

async function rememberOnly() {
  const text = $("message").value.trim();
  if (!text) return;
  try {
    const report = await memory.addMessages([{ role: "user", content: text }]);
    say("you (remembered)", text, "user");
    $("message").value = "";
    setStatus(`Stored in session ${report.session}.`);
  } catch (e) {
    setStatus(describeError(e), true);
  }
  await refreshMeters();
}

async function loadSample() {
  $("load-sample").disabled = true;
  try {
    for (const [i, s] of SAMPLE.entries()) {
      setStatus(`Loading sample session ${i + 1}/${SAMPLE.length}…`);
      await memory.addMessages(s.messages.map(([speaker, content, time]) => ({ speaker, content, time })), { session: s.session });
    }
    $("message").value = SAMPLE_QUESTIONS[0];
    setStatus(`Sample loaded. Try: ${SAMPLE_QUESTIONS.join(" · ")}`);
  } catch (e) {
    setStatus(describeError(e), true);
  } finally {
    $("load-sample").disabled = false;
    await refreshMeters();
  }
}

function applySettings(event) {
  if (event) event.preventDefault();
  const baseUrl = $("base-url").value.trim();
  const model = $("model").value.trim();
  const apiKey = $("api-key").value;
  // Empty fields keep loci's defaults (4,096 tokens, 60 s); loci checks the numbers and says what is wrong.
  const contextTokens = $("context-tokens").value.trim() ? Number($("context-tokens").value) : undefined;
  const timeoutS = $("timeout-s").value.trim() ? Number($("timeout-s").value) : undefined;
  const timeoutMs = timeoutS === undefined ? undefined : Math.round(timeoutS * 1000);
  try {
    memory.setLlm(baseUrl ? { baseUrl, model: model || "default", apiKey: apiKey || undefined, contextTokens, timeoutMs }
      : null);
    usingLocal = false;
    const keep = { baseUrl, model, contextTokens, timeoutS, ...($("remember-key").checked ? { apiKey } : {}) };
    localStorage.setItem(SETTINGS_KEY, JSON.stringify(keep)); // the key only when the user asked for it
    setStatus(baseUrl ? `Replies come from ${model || "the model"} at ${baseUrl}.` : "No LLM: replies show the evidence.");
  } catch (e) {
    setStatus(describeError(e), true);
  }
  refreshMeters();
}

function restoreSettings() {
  try {
    const saved = JSON.parse(localStorage.getItem(SETTINGS_KEY) || "{}");
    $("base-url").value = saved.baseUrl || "";
    $("model").value = saved.model || "";
    $("context-tokens").value = saved.contextTokens ?? "";
    $("timeout-s").value = saved.timeoutS ?? "";
    $("api-key").value = saved.apiKey || "";
    $("remember-key").checked = Boolean(saved.apiKey);
    if (saved.baseUrl) applySettings();
  } catch {
    localStorage.removeItem(SETTINGS_KEY);
  }
}

function setLocalStatus(text, isError = false) {
  $("local-status").textContent = text;
  $("local-status").classList.toggle("error", isError);
}

const perSecond = (n) => (n ? `${n.toFixed(1)} tokens/s` : "–");

function showSpeed(s) {
  callStats.push(s);
  $("local-speed").textContent = `Last call: read ${s.promptTokens} prompt tokens at ${perSecond(s.promptTokensPerSecond)}, ` +
    `wrote ${s.outputTokens} at ${perSecond(s.outputTokensPerSecond)} (${(s.totalMs / 1000).toFixed(1)} s).`;
}

// Loads wllama and the model once (the model file is kept by the browser: later loads skip the download), then
// answers with it. Everything comes from this site: wllama's CDN fallback (for browsers without JSPI or memory64) is
// turned off, so such a browser gets an error here rather than a download from elsewhere.
async function runLocal() {
  const button = $("run-local");
  const progress = $("local-progress");
  button.disabled = true;
  try {
    if (!local) {
      const started = performance.now();
      setLocalStatus("Loading wllama…");
      const { Wllama } = await import("./assets/wllama/wllama.js");
      const wllama = new Wllama({ default: new URL("assets/wllama/wllama.wasm", location.href).href },
        { suppressNativeLog: true });
      wllama.setCompat(null);
      progress.hidden = false;
      progress.value = 0;
      await wllama.loadModelFromUrl(new URL(LOCAL_MODEL.url, location.href).href, {
        n_ctx: LOCAL_MODEL.contextTokens,
        n_gpu_layers: 0, // the CPU: WebGPU is not everywhere, and a 135M model gains little from it
        progressCallback: ({ loaded, total }) => {
          progress.value = total ? loaded / total : 0;
          setLocalStatus(`Downloading the model: ${(loaded / 1e6).toFixed(0)} of ${(total / 1e6).toFixed(0)} MB…`);
        },
      });
      local = { wllama, loadMs: performance.now() - started };
    }
    memory.setLlm(fromWllama(local.wllama, { onStats: showSpeed }));
    usingLocal = true;
    const threads = local.wllama.getNumThreads();
    setLocalStatus(`${LOCAL_MODEL.name} loaded in ${(local.loadMs / 1000).toFixed(1)} s: ${threads} thread` +
      `${threads === 1 ? "" : "s"}, ${LOCAL_MODEL.contextTokens.toLocaleString("en")}-token window.`);
    setStatus(`Replies come from ${LOCAL_MODEL.name} running in this browser: nothing leaves this device.`);
  } catch (e) {
    // wllama rejects with the worker's error event when its worker cannot start: a CSP without `worker-src blob:`.
    const why = e instanceof Event ? "wllama's worker did not start (a Content-Security-Policy needs `worker-src blob:`)"
      : describeError(e);
    setLocalStatus(`The model could not run here: ${why}`, true);
  } finally {
    button.disabled = false;
    progress.hidden = true;
    await refreshMeters();
  }
}

async function exportMemory() {
  const doc = await memory.export();
  const url = URL.createObjectURL(new Blob([JSON.stringify(doc, null, 1)], { type: "application/json" }));
  const a = Object.assign(document.createElement("a"), { href: url, download: `loci-${memory.name}.json` });
  a.click();
  URL.revokeObjectURL(url);
}

async function importMemory(event) {
  const file = event.target.files[0];
  if (!file) return;
  try {
    const report = await memory.import(await file.text());
    setStatus(`Imported ${report.sessionsImported} sessions (${report.sessionsSkipped} already here).`);
  } catch (e) {
    setStatus(describeError(e), true);
  }
  event.target.value = "";
  await refreshMeters();
}

async function forget() {
  if (!confirm("Erase everything this memory holds?")) return;
  await memory.forgetAll();
  $("transcript").replaceChildren();
  $("evidence").replaceChildren();
  $("context").textContent = "";
  await refreshDistilled();
  setStatus("Forgotten.");
  await refreshMeters();
}

// The sync panel's state line: what the last sync did, or why it failed.
function showSync(text, isError = false) {
  $("sync-state").textContent = text;
  $("sync-state").classList.toggle("error", isError);
}

async function syncNow(event) {
  event?.preventDefault();
  const url = $("sync-url").value.trim();
  if (!url) return showSync("A folder URL is needed.", true);
  const remote = { url };
  if ($("sync-user").value) Object.assign(remote, { username: $("sync-user").value, password: $("sync-password").value });
  $("sync-now").disabled = true;
  showSync("Syncing…");
  try {
    const r = await memory.sync({ remote, passphrase: $("sync-passphrase").value });
    showSync(`Synced at ${new Date().toLocaleTimeString()}: sent ${r.opsSent} change(s), received ${r.segmentsReceived} ` +
      `segment(s): ${r.turnsAdded} turn(s) added, ${r.turnsForgotten} forgotten, ${r.derivedChanged} episode(s)/fact(s).`);
    await refreshMeters();
    await refreshDistilled();
  } catch (e) {
    showSync(e.code === "BAD_KEY" ? "That passphrase does not open this folder's memory." : describeError(e), true);
  } finally {
    $("sync-now").disabled = false;
  }
}

async function main() {
  await init();
  memory = await Memory.open({
    name: "demo",
    embedder: { device: "auto" },
    distill: true,
    onProgress: (e) => {
      if (e.phase === "distill") return distillProgress(e);
      if (e.phase === "sync") return e.detail && e.detail !== "done" && showSync(`Syncing: ${e.detail}…`);
      if (e.phase === "closed") return setStatus(`Memory closed: ${e.detail} Reload the page.`, true);
      if (e.phase === "indexed") return; // the lexical index, built after open; nothing to show
      // A long message's other windows, embedded in the background after it was stored (it was recallable already).
      if (e.phase === "embedded") return memory && refreshMeters();
      if (e.phase === "embed") return setStatus(describeError(e.error), true);
      if (e.phase === "tab" && e.detail === "following") return; // told once open resolves
      if (e.phase === "tab") return memory && setStatus("The other tab closed: this one holds the memory now.");
      $("progress").value = phases.indexOf(e.phase) + 1;
      setStatus(e.phase === "ready" ? `Ready on ${e.detail}.` : `Loading ${e.phase}…`);
    },
  });
  $("progress").classList.add("done");
  setStatus(memory.isLeader
    ? `Ready: embedding on ${(await memory.stats()).device} (${memory.deviceReason}).`
    : "Ready: another tab holds this memory; this one works through it.");
  $("chat-form").addEventListener("submit", send);
  $("remember-only").addEventListener("click", rememberOnly);
  $("load-sample").addEventListener("click", loadSample);
  $("settings").addEventListener("submit", applySettings);
  $("clear-llm").addEventListener("click", () => { $("base-url").value = ""; applySettings(); });
  $("run-local").addEventListener("click", runLocal);
  $("export").addEventListener("click", exportMemory);
  $("import").addEventListener("change", importMemory);
  $("forget").addEventListener("click", forget);
  $("persist").addEventListener("click", async () => {
    const kept = await memory.persist();
    setStatus(kept ? "The browser will keep this memory." : "The browser declined to make storage persistent.", !kept);
    await refreshMeters();
  });
  $("distill").addEventListener("click", distill);
  $("sync-form").addEventListener("submit", syncNow);
  restoreSettings();
  await refreshMeters();
  await refreshDistilled();
  window.loci = { memory, callStats }; // for the console and the end-to-end test
}

main().catch((e) => setStatus(describeError(e), true));
