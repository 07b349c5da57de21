// What a strict commit costs: addMessages (one user + assistant exchange, as a chat sends them) on a memory opened
// with `durability: "strict"` against one opened with "relaxed", alternating call by call in one page so that both
// see the same machine and disk; and, as the floor, a bare IndexedDB put of a similar record each way.
import init, { Memory } from "/pkg/loci.js";
import { chatTurns } from "./turns.mjs";
import { embedder, summary, timed } from "./page-tools.mjs";

const request = (r) => new Promise((ok, fail) => { r.onsuccess = () => ok(r.result); r.onerror = () => fail(r.error); });

async function rawPut(db, durability, i) {
  const tx = db.transaction(["records"], "readwrite", { durability });
  tx.objectStore("records").put({ text: "x".repeat(400), vector: new Int8Array(384) }, `${durability}-${i}`);
  await new Promise((ok, fail) => { tx.oncomplete = ok; tx.onabort = () => fail(tx.error); tx.onerror = () => fail(tx.error); });
}

window.durability = async ({ rounds }) => {
  await init();
  for (const name of ["durability-strict", "durability-relaxed"]) await Memory.deleteDatabase(name);
  const memories = {
    strict: await Memory.open({ name: "durability-strict", embedder, durability: "strict" }),
    relaxed: await Memory.open({ name: "durability-relaxed", embedder, durability: "relaxed" }),
  };
  const live = chatTurns(rounds * 2 + 20, 7);
  // Warm both (first-call costs) before timing.
  for (const m of Object.values(memories)) await m.addMessages(live.slice(0, 2), { session: "warm" });
  const t = { strict: [], relaxed: [] };
  for (let i = 0; i < rounds; i++) {
    const pair = live.slice(20 + 2 * i, 22 + 2 * i);
    const order = i % 2 ? ["strict", "relaxed"] : ["relaxed", "strict"];
    for (const kind of order) t[kind].push(await timed(() => memories[kind].addMessages(pair, { session: "live" })));
  }
  for (const m of Object.values(memories)) await m.close();

  await new Promise((ok) => { const r = indexedDB.deleteDatabase("durability-raw"); r.onsuccess = ok; r.onerror = ok; });
  const open = indexedDB.open("durability-raw", 1);
  open.onupgradeneeded = () => open.result.createObjectStore("records");
  const db = await request(open);
  const raw = { strict: [], relaxed: [] };
  for (let i = 0; i < rounds; i++) {
    const order = i % 2 ? ["strict", "relaxed"] : ["relaxed", "strict"];
    for (const kind of order) raw[kind].push(await timed(() => rawPut(db, kind, i)));
  }
  db.close();
  return {
    add: { strict: summary(t.strict), relaxed: summary(t.relaxed) },
    raw: { strict: summary(raw.strict), relaxed: summary(raw.relaxed) },
  };
};
