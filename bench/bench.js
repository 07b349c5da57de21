// The benchmark page's side: small measurable steps exposed on `window.bench`, called one by one by bench/run.mjs
// (which owns repetition, page reloads and statistics). Everything is served by the local server; bench/run.mjs
// fails the run if any request leaves the origin.
import init, { Memory, benchPopulate } from "./pkg/loci.js";
import { chatTurns } from "./turns.mjs";
import { agreement, dataset } from "./peers.js";

// Count IndexedDB requests (and records read by getAll), installed before loci opens anything.
const idb = { requests: 0, byMethod: {}, recordsRead: 0 };
for (const method of ["get", "getAll", "getAllKeys", "getKey", "put", "add", "delete", "clear", "count", "openCursor", "openKeyCursor"]) {
  const original = IDBObjectStore.prototype[method];
  if (!original) continue;
  IDBObjectStore.prototype[method] = function (...args) {
    idb.requests++;
    idb.byMethod[`${this.name}.${method}`] = (idb.byMethod[`${this.name}.${method}`] || 0) + 1;
    const request = original.apply(this, args);
    if (method === "getAll") request.addEventListener("success", () => { idb.recordsRead += request.result.length; });
    return request;
  };
}

const wasm = await init();
const embedder = { device: "wasm", modelUrl: "/www/assets/model/model.onnx", tokenizerUrl: "/www/assets/model/tokenizer.json", ortUrl: "/www/assets/ort/" };
let memory = null;
let extractor = null;
let raw = null; // a plain onnxruntime-web session, for queryEmbedFloor

const resetIdb = () => { idb.requests = 0; idb.byMethod = {}; idb.recordsRead = 0; };

window.bench = {
  async populate(name, units, unitsPerSession = 10, passphrase = null) {
    await Memory.deleteDatabase(name);
    const t = performance.now();
    await benchPopulate(name, units, unitsPerSession, 1, passphrase);
    return { ms: performance.now() - t };
  },

  /** Opens `name`; `storageMs` is the IndexedDB read + vector index build (from the `storage` to the `ready`
   * progress event: `Memory.open` resolves), `indexedMs` runs to the `indexed` event (the lexical index, built in
   * slices after open; a recall before it would finish the build), `totalMs` includes fetching the model and
   * creating the onnxruntime session. */
  async open(name, extra = {}) {
    if (memory) await memory.close();
    resetIdb();
    const marks = {};
    let indexed;
    const lexical = new Promise((ok) => { indexed = ok; });
    const t = performance.now();
    memory = await Memory.open({ name, embedder: { ...embedder, ...(extra.embedder || {}) }, unitMode: extra.unitMode, encryption: extra.encryption, onProgress: (e) => { marks[e.phase] = performance.now(); if (e.phase === "indexed") indexed(); } });
    const end = performance.now();
    await lexical; // the BM25 index, built in slices after open resolved
    const stats = await memory.stats();
    return {
      totalMs: end - t,
      storageMs: marks.ready - marks.storage,
      indexedMs: marks.indexed - marks.storage,
      idb: { requests: idb.requests, byMethod: { ...idb.byMethod }, recordsRead: idb.recordsRead },
      stats: { units: stats.units, vectors: stats.vectors, vectorBytes: stats.vectorBytes, turns: stats.turns, sessions: stats.sessions },
      wasmHeapBytes: wasm.memory.buffer.byteLength,
      jsHeapBytes: performance.memory?.usedJSHeapSize ?? 0,
      threads: globalThis.ort?.env?.wasm?.numThreads ?? null,
    };
  },

  async recall(queries, options = {}) {
    const times = [];
    for (const q of queries) {
      const t = performance.now();
      await memory.recall(q, options);
      times.push(performance.now() - t);
    }
    return times;
  },

  /** Recall's parts: the query embedding alone, then recall by method (each includes the embedding). */
  async recallParts(queries) {
    const parts = { embed: [], tir: [], bm25: [], hybrid: [] };
    for (const q of queries) {
      let t = performance.now();
      await memory.benchEmbedQuery(q);
      parts.embed.push(performance.now() - t);
      for (const method of ["tir", "bm25", "hybrid"]) {
        t = performance.now();
        await memory.recall(q, { method });
        parts[method].push(performance.now() - t);
      }
    }
    return parts;
  },

  /** The floor under recall: loci's query embedding against onnxruntime-web's own `session.run` on the same model
   * file and the same token ids (a second session in this page, same thread count), alternating query by query. */
  async queryEmbedFloor(queries) {
    raw ||= await ort.InferenceSession.create(embedder.modelUrl, { executionProviders: ["wasm"] });
    const loci = [], ort_ = [], tokens = [];
    for (const q of queries) {
      const ids = await memory.benchQueryTokens(q);
      const n = ids.length;
      const int64 = (f) => new ort.Tensor("int64", BigInt64Array.from(ids, f), [1, n]);
      let t = performance.now();
      await memory.benchEmbedQuery(q);
      loci.push(performance.now() - t);
      t = performance.now();
      await raw.run({ input_ids: int64((x) => BigInt(x)), attention_mask: int64(() => 1n), token_type_ids: int64(() => 0n) });
      ort_.push(performance.now() - t);
      tokens.push(n);
    }
    return { loci, ort: ort_, tokens };
  },

  async close() {
    if (memory) await memory.close();
    memory = null;
  },

  /** Whether the query embedding slows what follows it (onnxruntime-web's threads spinning on after a run, or the
   * caches it evicted): the vector ranking alone (`benchRankVector`, one fixed vector) right after an embedding,
   * right after another ranking, and after 30 ms idle, per query: milliseconds. */
  async rankAfterEmbedding(queries) {
    const vector = new Float32Array(384).map((_, i) => Math.sin(i * 0.37));
    const parts = { afterEmbedding: [], backToBack: [], afterIdle: [] };
    const timed = async (into) => {
      const t = performance.now();
      await memory.benchRankVector(vector, 10);
      into.push(performance.now() - t);
    };
    for (const q of queries) {
      await memory.benchEmbedQuery(q);
      await timed(parts.afterEmbedding);
      await timed(parts.backToBack);
      await memory.benchEmbedQuery(q);
      await new Promise((ok) => setTimeout(ok, 30));
      await timed(parts.afterIdle);
    }
    return parts;
  },

  /** The query embedding alone (as recall runs it), per query: milliseconds. */
  async embedQueries(queries) {
    const times = [];
    for (const q of queries) {
      const t = performance.now();
      await memory.benchEmbedQuery(q);
      times.push(performance.now() - t);
    }
    return times;
  },

  /** loci's ranking alone given the query vector (the peers' measure, bench/peers.js): the top 10 units of the
   * synthetic memory of `n` units for `q` query vectors (after 3 untimed), and its agreement with the exact ranking. */
  async rankLoci(n, q) {
    const d = dataset(n, q + 3);
    const times = [];
    const rankings = [];
    for (let j = 0; j < q + 3; j++) {
      const query = d.queries.slice(j * 384, (j + 1) * 384);
      const t = performance.now();
      const r = await memory.benchRankVector(query, 10);
      if (j >= 3) { times.push(performance.now() - t); rankings.push(Array.from(r)); }
    }
    return { times, agreement: agreement(rankings, d.reference.slice(3)) };
  },

  /** addMessages of one exchange (a chat's unit of work), `rounds` times after 3 untimed: milliseconds each. */
  async addExchanges(rounds, seed = 7) {
    const turns = chatTurns(2 * rounds + 6, seed);
    const times = [];
    for (let i = 0; i < rounds + 3; i++) {
      const t = performance.now();
      await memory.addMessages(turns.slice(2 * i, 2 * i + 2), { session: "bench-live" });
      if (i >= 3) times.push(performance.now() - t);
    }
    return times;
  },

  async deleteDatabase(name) {
    if (memory) await memory.close();
    memory = null;
    await Memory.deleteDatabase(name);
  },

  /** loci: one addMessages call of all turns (the product path: tokenise, length-bucketed batches, pool, store). */
  async embedLoci(turns, session) {
    const t = performance.now();
    const r = await memory.addMessages(turns, { session });
    return { ms: performance.now() - t, units: r.unitsEmbedded };
  },

  async loadTransformers(threads) {
    const { env, pipeline } = await import("./assets/transformers.min.js");
    env.allowRemoteModels = false;
    env.allowLocalModels = true;
    // A path, not an absolute URL: transformers.js 4 only probes local files (tokenizer_config.json) for non-URLs.
    env.localModelPath = new URL("./assets/models/", location.href).pathname;
    env.useBrowserCache = false;
    env.backends.onnx.wasm.wasmPaths = new URL("./assets/tjs-ort/", location.href).href;
    env.backends.onnx.wasm.numThreads = threads;
    const t = performance.now();
    extractor = await pipeline("feature-extraction", "minilm", { dtype: "q8", device: "wasm" });
    return { ms: performance.now() - t, version: env.version, ort: env.backends.onnx.versions?.web ?? null };
  },

  /** transformers.js on the same texts, `batch` at a time, in the given order (its pipeline pads each batch to its
   * longest text). */
  async embedTransformers(texts, batch) {
    const t = performance.now();
    let rows = 0;
    for (let i = 0; i < texts.length; i += batch) {
      const out = await extractor(texts.slice(i, i + batch), { pooling: "mean", normalize: true });
      rows += out.dims[0];
    }
    return { ms: performance.now() - t, rows };
  },

  /** Diagnostic: the same getAll reads as loci's open, in plain JS (structured clone only, no decoding into Rust). */
  async rawRead(name) {
    const t = performance.now();
    const db = await new Promise((ok, err) => { const r = indexedDB.open(`loci:${name}`); r.onsuccess = () => ok(r.result); r.onerror = () => err(r.error); });
    const stores = ["meta", "sessions", "turnChunks", "vectors", "episodes", "facts", "jobs"];
    const tx = db.transaction(stores, "readonly");
    const counts = await Promise.all(stores.map((s) => new Promise((ok) => { const r = tx.objectStore(s).getAll(); r.onsuccess = () => ok(r.result.length); })));
    db.close();
    return { ms: performance.now() - t, counts };
  },

  async estimate() {
    return navigator.storage.estimate();
  },
};
document.querySelector("#status").textContent = "ready";
window.benchReady = true;
