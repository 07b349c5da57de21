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

window.reliability = {
  async open(name, options = {}) {
    await init();
    window.memory = await Memory.open({ name, embedder, ...options });
    return true;
  },
  /** Adds exchanges `from..to` one call each, acknowledging each to the test once `addMessages` resolved. */
  async ingest(from, to) {
    for (let i = from; i < to; i++) {
      await window.memory.addMessages(exchange(i), { session: sessionOf(i) });
      await window.ack(i);
    }
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
