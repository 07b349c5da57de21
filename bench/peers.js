// The peers of `npm run bench`: what a web developer would pick instead of loci to rank stored vectors in the page,
// on the same synthetic data (`benchSyntheticUnits`: the very units `benchPopulate` gives loci, 10 to a session,
// each session's vectors near one direction) and the same query vectors. Each peer persists to IndexedDB, is opened
// cold in a fresh page, and answers the queries given their vectors (ranking only, top 10 units).
// - `brute`: plain JS, as a user would write it: one IndexedDB record per unit with a Float32Array, read with getAll
//   into one Float32Array, exact cosine (the vectors are unit length) over every row.
// - `pglite`: PGlite + pgvector (Postgres in wasm), persisted to IndexedDB (`idb://`); exact (index scans off) and
//   HNSW (`vector_cosine_ops`, pgvector's defaults m = 16, ef_construction = 64, ef_search = 40).
// - `orama`: Orama's vector search (brute force in JS), persisted with its data-persistence plugin as JSON, in
//   IndexedDB records of at most 32 M characters (one value may not exceed ~127 MB). Its other formats fail here:
//   `binary` is hex text (157 MB at 10k units, over that limit), `seqproto` overflows a 16 MB buffer.
// The libraries are bundled from node_modules into bench/assets/peers-libs.js by bench/run.mjs (nothing from a CDN).
import { benchSyntheticUnits } from "./pkg/loci.js";

const DIM = 384;
const K = 10;
const libs = () => import("./assets/peers-libs.js");
const req = (r) => new Promise((ok, fail) => { r.onsuccess = () => ok(r.result); r.onerror = () => fail(r.error); });
const now = () => performance.now();

/** The synthetic data of `n` units and `q` queries, with each query's exact top 10 (f32 cosine): the reference. */
export function dataset(n, q) {
  const d = benchSyntheticUnits(n, 10, 1, q);
  d.reference = [];
  for (let j = 0; j < q; j++) d.reference.push(topK(d.vectors, n, d.queries.subarray(j * DIM, (j + 1) * DIM), (i) => i + 1));
  return d;
}

/** Exact top `K` rows of `rows` (n × DIM) by dot product with `query`, as ids (`id(row)`), best first. */
function topK(rows, n, query, id) {
  const best = [];
  for (let i = 0; i < n; i++) {
    let s = 0;
    const o = i * DIM;
    for (let d = 0; d < DIM; d++) s += rows[o + d] * query[d];
    if (best.length === K && s <= best[K - 1][0]) continue;
    let at = best.length;
    while (at > 0 && best[at - 1][0] < s) at--;
    best.splice(at, 0, [s, id(i)]);
    if (best.length > K) best.pop();
  }
  return best.map(([, i]) => i);
}

/** Mean share of the reference's top 10 that a ranking found. */
export function agreement(rankings, reference) {
  let hit = 0;
  rankings.forEach((r, j) => { const ref = new Set(reference[j]); hit += r.filter((x) => ref.has(Number(x))).length; });
  return hit / (K * rankings.length);
}

const vectorText = (v) => `[${Array.from(v, (x) => x.toPrecision(7)).join(",")}]`;

const peers = {
  brute: {
    async populate(d, n, name) {
      const db = await openBrute(name, true);
      for (let from = 0; from < n; from += 5000) {
        const tx = db.transaction("units", "readwrite");
        const store = tx.objectStore("units");
        for (let i = from; i < Math.min(n, from + 5000); i++) {
          store.put({ id: i + 1, text: d.texts[i], vector: d.vectors.slice(i * DIM, (i + 1) * DIM) });
        }
        await new Promise((ok, fail) => { tx.oncomplete = ok; tx.onabort = () => fail(tx.error); });
      }
      db.close();
    },
    async open(name) {
      const db = await openBrute(name, false);
      const records = await req(db.transaction("units").objectStore("units").getAll());
      db.close();
      const n = records.length;
      const rows = new Float32Array(n * DIM);
      const ids = new Uint32Array(n);
      records.forEach((r, i) => { rows.set(r.vector, i * DIM); ids[i] = r.id; });
      return { rows, ids, n };
    },
    async rank(state, query) {
      return topK(state.rows, state.n, query, (i) => state.ids[i]);
    },
  },
  pglite: {
    async populate(d, n, name, times) {
      const { PGlite, vector } = await libs();
      const pg = await PGlite.create(`idb://${name}`, { extensions: { vector } });
      await pg.exec("CREATE EXTENSION IF NOT EXISTS vector; CREATE TABLE units (id int PRIMARY KEY, text text, embedding vector(384));");
      const rows = 500;
      for (let from = 0; from < n; from += rows) {
        const values = [];
        const params = [];
        for (let i = from; i < Math.min(n, from + rows); i++) {
          const p = params.length;
          values.push(`($${p + 1}, $${p + 2}, $${p + 3})`);
          params.push(i + 1, d.texts[i], vectorText(d.vectors.subarray(i * DIM, (i + 1) * DIM)));
        }
        await pg.query(`INSERT INTO units VALUES ${values.join(",")}`, params);
      }
      const t = now();
      await pg.exec("CREATE INDEX units_hnsw ON units USING hnsw (embedding vector_cosine_ops);");
      times.hnsw_build_ms = now() - t;
      await pg.close();
    },
    async open(name) {
      const { PGlite, vector } = await libs();
      const pg = await PGlite.create(`idb://${name}`, { extensions: { vector } });
      await pg.query("SELECT count(*) FROM units");
      return { pg };
    },
    async rank(state, query, variant) {
      const exact = variant === "exact";
      if (state.variant !== variant) {
        await state.pg.exec(exact ? "SET enable_indexscan = off; SET enable_bitmapscan = off;" : "SET enable_indexscan = on; SET enable_bitmapscan = on;");
        state.variant = variant;
      }
      const r = await state.pg.query("SELECT id FROM units ORDER BY embedding <=> $1 LIMIT 10", [vectorText(query)]);
      return r.rows.map((row) => row.id);
    },
  },
  orama: {
    async populate(d, n, name) {
      const { create, insertMultiple, persist } = await libs();
      const db = create({ schema: { text: "string", embedding: `vector[${DIM}]` } });
      for (let from = 0; from < n; from += 5000) {
        const docs = [];
        for (let i = from; i < Math.min(n, from + 5000); i++) {
          docs.push({ id: String(i + 1), text: d.texts[i], embedding: Array.from(d.vectors.subarray(i * DIM, (i + 1) * DIM)) });
        }
        await insertMultiple(db, docs, 5000);
      }
      const data = await persist(db, "json");
      const idb = await openBlob(name, true);
      const tx = idb.transaction("blobs", "readwrite");
      const PIECE = 32 * 2 ** 20;
      let pieces = 0;
      for (let at = 0; at < data.length; at += PIECE) tx.objectStore("blobs").put(data.slice(at, at + PIECE), pieces++);
      tx.objectStore("blobs").put(pieces, "pieces");
      await new Promise((ok, fail) => { tx.oncomplete = ok; tx.onabort = () => fail(tx.error); });
      idb.close();
    },
    async open(name) {
      const { restore } = await libs();
      const idb = await openBlob(name, false);
      const store = idb.transaction("blobs").objectStore("blobs");
      const pieces = await req(store.get("pieces"));
      const parts = await Promise.all(Array.from({ length: pieces }, (_, i) => req(store.get(i))));
      idb.close();
      return { db: await restore("json", parts.join("")) };
    },
    async rank(state, query) {
      const { search } = await libs();
      const r = await search(state.db, { mode: "vector", vector: { value: Array.from(query), property: "embedding" }, similarity: 0, limit: K, includeVectors: false });
      return r.hits.map((h) => Number(h.id));
    },
  },
};

async function openBrute(name, create) {
  const open = indexedDB.open(name, 1);
  open.onupgradeneeded = () => { if (create) open.result.createObjectStore("units", { keyPath: "id" }); };
  return req(open);
}

async function openBlob(name, create) {
  const open = indexedDB.open(name, 1);
  open.onupgradeneeded = () => { if (create) open.result.createObjectStore("blobs"); };
  return req(open);
}

async function deleteDatabase(name) {
  await new Promise((ok) => { const r = indexedDB.deleteDatabase(name); r.onsuccess = ok; r.onerror = ok; r.onblocked = ok; });
}

/** JS heap in use (Chromium, with --enable-precise-memory-info) plus the peer's wasm memory where it has one. */
function heapBytes(wasmBytes = 0) {
  return (performance.memory?.usedJSHeapSize ?? 0) + wasmBytes;
}

window.peers = {
  /** Writes `n` units into peer `peer`'s persisted store; resolves to the time it took and the bytes stored. */
  async populate(peer, n) {
    const name = `peer-${peer}-${n}`;
    if (peer === "pglite") await deleteDatabase(`/pglite/${name}`);
    await deleteDatabase(name);
    const before = (await navigator.storage.estimate()).usage;
    const d = benchSyntheticUnits(n, 10, 1, 0);
    const times = {};
    const t = now();
    await peers[peer].populate(d, n, name, times);
    const ms = now() - t;
    return { ms, ...times, bytes: (await navigator.storage.estimate()).usage - before };
  },

  /** Opens peer `peer` cold (call in a fresh page), then answers `q` queries (after 3 untimed) per variant. */
  async openAndRank(peer, n, q, variants = [null]) {
    const name = `peer-${peer}-${n}`;
    globalThis.gc?.();
    const heapBefore = heapBytes();
    const t = now();
    const state = await peers[peer].open(name);
    const openMs = now() - t;
    // What the opened peer keeps: the JS heap after a collection, against before the open (PGlite's wasm memory is
    // not reachable from its API, so its figure is its JS side only).
    globalThis.gc?.();
    const out = { openMs, heapBytes: heapBytes() - heapBefore, variants: {} };
    const d = dataset(n, q + 3);
    for (const variant of variants) {
      const times = [];
      const rankings = [];
      for (let j = 0; j < q + 3; j++) {
        const query = d.queries.slice(j * DIM, (j + 1) * DIM);
        const s = now();
        const r = await peers[peer].rank(state, query, variant);
        if (j >= 3) { times.push(now() - s); rankings.push(r); }
      }
      out.variants[variant ?? peer] = { times, agreement: agreement(rankings, d.reference.slice(3)) };
    }
    if (state.pg) await state.pg.close();
    return out;
  },

  async remove(peer, n) {
    const name = `peer-${peer}-${n}`;
    await deleteDatabase(name);
    if (peer === "pglite") await deleteDatabase(`/pglite/${name}`);
  },
};
