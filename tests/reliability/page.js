// What the reliability tests drive in the page: a memory, a long series of addMessages that acknowledges each call
// to the test (`window.ack`, a Playwright binding) as soon as it resolves, and reads of what is stored.
import init, { Memory } from "/pkg/loci.js";
import { chatTurns } from "/bench/turns.mjs";

const embedder = { device: "wasm", modelUrl: "/www/assets/model/model.onnx",
  tokenizerUrl: "/www/assets/model/tokenizer.json", ortUrl: "/www/assets/ort/" };

const TURNS = chatTurns(4000, 23);
const SESSION = 10; // exchanges per session
const DAY = 86_400_000;

/** Exchange `i`: a user turn and an assistant turn, each tagged with `item i` so that a lost one is found. */
export function exchange(i) {
  const time = Date.UTC(2024, 0, 1) + Math.floor(i / SESSION) * DAY + (i % SESSION) * 60_000;
  return [
    { speaker: "user", content: `(item ${i}) ${TURNS[(2 * i) % TURNS.length].content}`, time },
    { speaker: "assistant", content: `(item ${i}) ${TURNS[(2 * i + 1) % TURNS.length].content}`, time: time + 1000 },
  ];
}
const sessionOf = (i) => `s${Math.floor(i / SESSION)}`;

/**
 * How many exchanges the call that starts at exchange `i` adds: `sizes` (a number, or one per session in turn),
 * never past the end of `i`'s session. The crash test computes the same, to know which call was in flight.
 */
export function callSize(i, sizes = 1) {
  const size = Array.isArray(sizes) ? sizes[Math.floor(i / SESSION) % sizes.length] : sizes;
  return Math.max(1, Math.min(size, SESSION - (i % SESSION)));
}

/** The messages of exchanges `i..i + n`. */
const exchanges = (i, n) => Array.from({ length: n }, (_, k) => exchange(i + k)).flat();

window.reliability = {
  /** Opens memory `name`; with `reportPhases`, each `onProgress` phase goes to the test (`window.phase`, a
   * binding) as it happens. */
  async open(name, { reportPhases, ...options } = {}) {
    await init();
    if (reportPhases) options.onProgress = (e) => { window.phase(e.phase); };
    window.memory = await Memory.open({ name, embedder, ...options });
    return true;
  },
  /** Adds exchanges `from..to`, `callSize(i, sizes)` per call (one by default), and acknowledges each exchange of a
   * call to the test once its `addMessages` resolved (`window.ack(i)`, or the call's exchanges at once). */
  async ingest(from, to, sizes = 1) {
    for (let i = from; i < to; i += callSize(i, sizes)) {
      const n = Math.min(callSize(i, sizes), to - i);
      await window.memory.addMessages(exchanges(i, n), { session: sessionOf(i) });
      await window.ack(n === 1 ? i : Array.from({ length: n }, (_, k) => i + k));
    }
  },
  /** As `ingest`, but a call that fails is counted by its error code and the next one goes on, until
   * `window.stopIngest` is set (a follower tab whose leader goes: its calls in flight get LEADER_GONE). */
  async ingestThrough(from, to, sizes = 1) {
    const codes = {};
    let i = from;
    for (; i < to && !window.stopIngest; i += callSize(i, sizes)) {
      const n = Math.min(callSize(i, sizes), to - i);
      try {
        await window.memory.addMessages(exchanges(i, n), { session: sessionOf(i) });
        await window.ack(n === 1 ? i : Array.from({ length: n }, (_, k) => i + k));
      } catch (e) {
        codes[e.code ?? String(e)] = (codes[e.code ?? String(e)] ?? 0) + 1;
      }
    }
    return { codes, next: i };
  },
  /** The items stored (from the export: every turn's tag), and the memory's counts. */
  async stored() {
    const doc = await window.memory.export();
    const items = new Map();
    for (const s of doc.sessions) {
      for (const t of s.turns) {
        const m = /^\(item (\d+)\)/.exec(t.text);
        const i = m ? Number(m[1]) : -1;
        items.set(i, (items.get(i) ?? 0) + 1);
      }
    }
    return { items: [...items.entries()], stats: await window.memory.stats(), doc };
  },
  async importDoc(doc) {
    return window.memory.import(JSON.stringify(doc));
  },
  async rankings(queries) {
    const out = [];
    for (const q of queries) {
      const r = await window.memory.recall(q, { k: 5 });
      out.push(r.sessions.map((s) => [s.id, Math.round(s.score * 1e4) / 1e4]));
    }
    return out;
  },
  async close() {
    await window.memory.close();
  },
  /** A second opener of memory `name` in this page (as another tab would be): it follows `window.memory`. */
  async follow(name, options = {}) {
    window.follower = await Memory.open({ name, embedder, ...options });
    return window.follower.isLeader;
  },
};
