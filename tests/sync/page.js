// One "device" of the two-device sync test: a memory of loci/sync (pkg-sync) in this browser context's IndexedDB,
// driven by tests/sync/two-devices.test.mjs. `window.syncPhase` (a Playwright binding) hears each sync step.
import init, { Memory } from "/pkg-sync/loci.js";

const embedder = { device: "wasm", modelUrl: "/www/assets/model/model.onnx",
  tokenizerUrl: "/www/assets/model/tokenizer.json", ortUrl: "/www/assets/ort/" };

let memory = null;

window.device = {
  /** Opens memory `name`; with `llmUrl`, it distils (Nemori, autoRun off: the test flushes) with that endpoint. */
  async open(name, llmUrl) {
    await init();
    const distilling = llmUrl ? { distill: { autoRun: false }, llm: { baseUrl: llmUrl, model: "scripted" } } : {};
    memory = await Memory.open({ name, embedder, ...distilling, onProgress: (e) => {
      if (e.phase === "sync" && window.syncPhase) window.syncPhase(e.detail ?? "error");
    } });
  },
  async add(session, turns) {
    const messages = turns.map(([speaker, content, time]) => ({ speaker, content, time }));
    return (await memory.addMessages(messages, { session })).turnIds;
  },
  async sync(options) {
    try {
      return { ok: await memory.sync(options) };
    } catch (e) {
      return { error: e.code ?? String(e) };
    }
  },
  async forget(target) {
    await memory.forget(target);
  },
  async turnIds(session) {
    return (await memory.sessionTurns(session)).map((t) => t.id);
  },
  /** Every session with its turns as [speaker, text, time], by session id. */
  async contents() {
    const out = [];
    for (const s of await memory.sessions()) {
      const turns = (await memory.sessionTurns(s.id)).map((t) => [t.speaker, t.text, t.time]);
      out.push([s.id, turns]);
    }
    return out.sort((a, b) => (a[0] < b[0] ? -1 : 1));
  },
  async flush() {
    return memory.flush();
  },
  /** Episodes and facts as a user sees them: what they say and the texts of the turns they cite, sorted. */
  async distilled() {
    const text = new Map();
    for (const s of await memory.sessions()) for (const t of await memory.sessionTurns(s.id)) text.set(t.id, t.text);
    const episodes = (await memory.episodes()).map((e) => [e.title, e.narrative, e.turnIds.map((id) => text.get(id))]);
    const facts = (await memory.facts({ includeSuperseded: true }))
      .map((f) => [f.statement, f.status, f.turnIds.map((id) => text.get(id))]);
    const sorted = (list) => list.map((x) => JSON.stringify(x)).sort();
    return { episodes: sorted(episodes), facts: sorted(facts) };
  },
  async recallTop(query) {
    return (await memory.recall(query, { k: 1 })).sessions[0]?.id ?? null;
  },
};
