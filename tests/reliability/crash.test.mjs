// Crash safety in headless Chromium (Debian's, driven by playwright-core) on a profile directory on disk: a table of
// scenarios, each cut at its own crash points by a renderer crash (CDP Page.crash) or a browser kill (SIGKILL to
// every process of the profile), each crash followed by a reopen on the same profile and checks that can fail.
//
// - ingest: a long addMessages series (1–10 exchanges per call, never across a session), each call's exchanges
//   acknowledged to this test (`window.ack`) as soon as it resolves, cut at random points. At every reopen: every
//   acknowledged exchange is stored, both its turns; the call in flight at the crash is stored whole or not at all;
//   nothing else is. At the end, recall ranks exactly as a memory built from the same turns without any crash.
// - open: the populated memory's open cut as it resolves (the lexical index being built in the background) and as
//   the index is kept (`indexed`); a new memory's first open cut as its schema is created (`storage`).
// - upgrade: a schema-1 memory (as loci 0.1 wrote it) cut as this loci upgrades and migrates it at open.
// - import: the ingest memory's export imported into a new memory, cut twice: each session is there whole or not
//   at all (each is one transaction: what `import` promises), a re-run skips those and completes the rest, and the
//   result equals the export.
// - encrypted: the ingest series into a memory opened with a passphrase.
// - changePassphrase: cut mid re-encryption, and right after it resolved: exactly one of the old and new passphrase opens it (the new one once
//   the call resolved), and every acknowledged turn reads back.
// - embedding: a pasted ~40,000-character document (addMessages resolves with a few windows embedded, the rest in
//   the background) cut mid background embedding, twice: it is stored whole, the reopen goes on, and it ends with as
//   many vectors as the same document embedded without a crash.
// - forget: forget({ session }) of one session after another, cut: every session whose forget resolved is gone
//   entirely, the one in flight is there whole or gone, every other one whole.
// - hand-over: two tabs of one browser on one memory; the follower adds (forwarded to the leader) while the leader's
//   renderer crashes; the follower takes over; then again with a third tab. Every call a tab saw resolve is
//   stored, once; a call in flight gets LEADER_GONE.
// - distillation: background jobs against the scripted LLM server (40 ms per call), cut right after the reply of
//   each step was sent (segment, narrate, merge, predict, distill, consolidate: `/__wait` of the server), as the
//   job commits; after a last reopen `flush()` ends with the same episodes and facts as a run without crashes.
//
//   node tests/reliability/crash.test.mjs [--json PATH]
//   LOCI_CRASH_POINTS: ingest crash points (default 6, each after ~80 more exchanges; the other scenarios' are
//   fixed)
import { persistentBrowser } from "../../bench/local-browser.mjs";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { serve } from "../../scripts/serve.mjs";
import { questions } from "../../bench/turns.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const argv = process.argv.slice(2);
const jsonPath = argv.includes("--json") ? argv[argv.indexOf("--json") + 1] : null;
const ingestPoints = Number(process.env.LOCI_CRASH_POINTS ?? 6);
const started = Date.now();

let seed = 0x5eed;
const random = () => { seed ^= seed << 13; seed >>>= 0; seed ^= seed >> 17; seed ^= seed << 5; seed >>>= 0; return seed / 2 ** 32; };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const withTimeout = (p, ms) => Promise.race([p, sleep(ms)]);
/** Resolves once `predicate()` holds (checked every 10 ms), or throws after `ms`. */
async function until(predicate, ms, what) {
  for (const end = Date.now() + ms; !predicate();) {
    if (Date.now() > end) throw new Error(`timed out waiting until ${what}`);
    await sleep(10);
  }
}
const ackedFrom = (lo, hi) => [...acked].filter((i) => i >= lo && i < hi).length;
const elapsed = () => `${((Date.now() - started) / 1000).toFixed(0)} s`;

// As tests/reliability/page.js: exchanges per session, and how many exchanges the call starting at `i` adds.
const SESSION = 10;
const callSize = (i, sizes) => Math.max(1, Math.min(
  Array.isArray(sizes) ? sizes[Math.floor(i / SESSION) % sizes.length] : sizes, SESSION - (i % SESSION)));
const SIZES = [1, 10, 5, 10, 2, 10]; // exchanges per call, by session in turn

mkdirSync(join(root, "target"), { recursive: true });
const profile = mkdtempSync(join(root, "target", "crash-profile-"));
const server = await serve(0, ["tests"]);
const origin = `http://127.0.0.1:${server.address().port}`;
const llmServer = spawn("node", [join(root, "tests/llm-server/server.mjs"), "0"], { stdio: ["ignore", "pipe", "inherit"] });
const llmPort = await new Promise((ok) => llmServer.stdout.on("data", (d) => {
  const m = /READY (\d+)/.exec(String(d));
  if (m) ok(m[1]);
}));
const llmBase = `http://127.0.0.1:${llmPort}`;
const llm = { baseUrl: `${llmBase}/v1`, model: "scripted", timeoutMs: 60_000 };
await fetch(`${llmBase}/__config`, { method: "POST", body: JSON.stringify({ latencyMs: 40 }) });

/** Exchanges acknowledged to the test (their calls resolved), and other acknowledgements by name. */
const acked = new Set();
const ackedOther = new Set();
/** Called with each onProgress phase of a page that opened with `reportPhases`. */
let onPhase = () => {};

async function newTab(context) {
  const page = await context.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.goto(`${origin}/tests/reliability/page.html`);
  await page.waitForFunction(() => window.reliability);
  return page;
}

async function launch() {
  const context = await persistentBrowser(profile);
  await context.exposeBinding("ack", (_source, i) => {
    if (Array.isArray(i)) i.forEach((k) => acked.add(k));
    else (typeof i === "number" ? acked : ackedOther).add(i);
  });
  await context.exposeBinding("phase", (_source, phase) => onPhase(phase));
  const blank = context.pages()[0];
  const page = await newTab(context);
  await blank?.close();
  return { context, page };
}

/** Crashes the renderer of `page` (CDP); resolves once it is gone. */
async function crashPage(context, page) {
  const cdp = await context.newCDPSession(page);
  const gone = new Promise((r) => page.once("crash", r));
  cdp.send("Page.crash").catch(() => {});
  await withTimeout(gone, 10_000);
}

/**
 * Crashes the renderer of `b.page` (CDP), or kills every process of the browser (SIGKILL), and resolves to what a
 * user would have next: a new tab of the same browser, or the browser started again on the same profile.
 */
async function crash(b, kill) {
  if (!kill) {
    await crashPage(b.context, b.page);
    await b.page.close().catch(() => {});
    return { context: b.context, page: await newTab(b.context) };
  }
  try { execFileSync("pkill", ["-KILL", "-f", "--", `--user-data-dir=${profile}`], { stdio: "ignore" }); } catch { /* already gone */ }
  await withTimeout(b.context.close().catch(() => {}), 10_000);
  await sleep(200);
  return launch();
}

/** Closes the browser (no crash). */
const quit = (b) => withTimeout(b.context.close().catch(() => {}), 10_000);

const open = (page, name, options = {}) => page.evaluate(([n, o]) => window.reliability.open(n, o), [name, options]);
/** Opens memory `name`; resolves to "ok" or the error's code. */
const tryOpen = (page, name, options = {}) => page.evaluate(async ([n, o]) => {
  try {
    await window.reliability.open(n, o);
    return "ok";
  } catch (e) {
    return e.code ?? String(e);
  }
}, [name, options]);
const close = (page) => page.evaluate(() => window.reliability.close());
const stored = (page) => page.evaluate(async () => {
  const s = await window.reliability.stored();
  return { items: s.items, turns: s.stats.turns, units: s.stats.units, vectors: s.stats.vectors, distill: s.stats.distill,
    pending: s.stats.pendingEmbeddings };
});

// Per scenario: crash points, browser kills, acknowledged turns, and acknowledged turns not found after a reopen.
const scenarios = {};
const scenario = (name) => (scenarios[name] ??= { crash_points: 0, kills: 0, turns_acknowledged: 0, turns_lost: 0 });
function crashed(name, kill) {
  scenario(name).crash_points++;
  if (kill) scenario(name).kills++;
}
let halfStored = 0;
/** Exchanges found stored without an acknowledgement (their call was cut after its commit), by any check so far. */
const foundUnacked = new Set();

/**
 * What a reopen finds of the exchanges `lo..hi` (`items`: [exchange, turns stored]) against what was acknowledged:
 * acknowledged turns missing (counted as lost to `name`), exchanges with one turn, and stored exchanges never
 * acknowledged. `inflight` (the exchanges of the call cut by the crash) may be stored, whole or not at all; nothing
 * else unacknowledged may be, except `known` (found stored before: `foundUnacked`).
 */
function reconcile(name, items, lo, hi, { inflight = [], known = foundUnacked } = {}) {
  const counts = new Map(items.filter(([i]) => i >= lo && i < hi));
  let lost = 0;
  for (const i of acked) if (i >= lo && i < hi) lost += Math.max(0, 2 - (counts.get(i) ?? 0));
  const half = [...counts].filter(([, c]) => c !== 2).map(([i]) => i);
  const unacked = [...counts.keys()].filter((i) => !acked.has(i) && !known.has(i));
  scenario(name).turns_lost += lost;
  halfStored += half.length;
  assert.equal(lost, 0, `${name}: every acknowledged turn is stored`);
  assert.deepEqual(half, [], `${name}: no exchange is half stored`);
  const cut = unacked.filter((i) => inflight.includes(i));
  assert.deepEqual(unacked.filter((i) => !inflight.includes(i)), [],
    `${name}: nothing is stored that was not acknowledged, but the call cut by the crash (${inflight})`);
  assert.ok(cut.length === 0 || cut.length === inflight.length,
    `${name}: the call cut by the crash is stored whole or not at all (${cut.length} of ${inflight.length})`);
  unacked.forEach((i) => known.add(i));
  return { counts, next: Math.max(lo, ...counts.keys()) + (counts.size ? 1 : 0), cut: cut.length };
}

/** The call in flight when a series that resumed at `resume` was cut: the one after its last acknowledged call. */
function inflightCall(resume, hi, sizes) {
  let i = resume;
  while (acked.has(i)) i++;
  return Array.from({ length: Math.min(callSize(i, sizes), hi - i) }, (_, k) => i + k);
}

/**
 * Ingest into memory `name` (exchanges `lo..hi`, opened with `options`) cut at `points` crash points, each once
 * `perPoint` more exchanges (and a few) were acknowledged and a random moment later, mid-call; a browser kill where
 * `kill(point)`. Each reopen checks the cut. Resolves to the browser, the memory open.
 */
async function ingestScenario(name, label, lo, hi, points, perPoint, options, kill) {
  let resume = lo;
  let inflight = [];
  const cuts = [];
  let b = await launch();
  for (let point = 0; point <= points; point++) {
    await open(b.page, name, options);
    const { items } = await stored(b.page);
    const r = reconcile(label, items, lo, hi, { inflight });
    if (point > 0) cuts.push(r.cut ? "stored" : "not stored");
    resume = r.next;
    if (point === points) return b;
    b.page.evaluate(([from, to, sizes]) => window.reliability.ingest(from, to, sizes), [resume, hi, SIZES]).catch(() => {});
    const target = perPoint + Math.floor(random() * 10);
    await until(() => ackedFrom(resume, hi) >= target, 180_000, `${label}: ${target} exchanges acknowledged`);
    await sleep(random() * 400);
    const k = kill(point);
    b = await crash(b, k);
    inflight = inflightCall(resume, hi, SIZES);
    crashed(label, k);
  }
}

const report = { crash_points: 0, kills: 0, turns_acknowledged: 0, turns_lost: 0, half_stored: 0,
  distill_crash_points: 0, ranking_mismatches: 0 };
const countAcked = (label, lo, hi) => {
  scenario(label).turns_acknowledged += 2 * [...acked].filter((i) => i >= lo && i < hi).length;
};
let failed = false;
try {
  // ingest: exchanges 0..100,000 of memory "crash".
  const INGEST = [0, 100_000];
  let b = await ingestScenario("crash", "ingest", ...INGEST, ingestPoints, 50, {}, (p) => p % 3 === 2);
  countAcked("ingest", ...INGEST);
  console.log(`ingest: ${scenario("ingest").crash_points} crash points, ${scenario("ingest").turns_acknowledged} ` +
    `turns acknowledged, 0 lost (${elapsed()})`);
  await close(b.page);

  // open: the populated memory cut as its open resolves (the index is built in the background) and once the index
  // is built (it is being kept); then the same memory cut as the index.
  for (const [point, at] of ["ready", "indexed"].entries()) {
    let hit;
    const heard = new Promise((r) => { hit = r; });
    onPhase = (phase) => { if (phase === at) hit(); };
    const kill = point === 1;
    const opening = open(b.page, "crash", { reportPhases: true }).catch(() => {});
    await withTimeout(heard, 30_000);
    b = await crash(b, kill);
    await opening;
    crashed("open", kill);
    onPhase = () => {};
    await open(b.page, "crash");
    reconcile("open", (await stored(b.page)).items, ...INGEST);
    await close(b.page);
  }
  // A new memory's first open, cut as its schema is created.
  for (const point of [0, 1]) {
    let hit;
    const heard = new Promise((r) => { hit = r; });
    onPhase = (phase) => { if (phase === "storage") hit(); };
    const opening = open(b.page, `fresh-${point}`, { reportPhases: true }).catch(() => {});
    await withTimeout(heard, 30_000);
    await sleep(point * 15);
    b = await crash(b, point === 1);
    await opening;
    crashed("open", point === 1);
    onPhase = () => {};
    await open(b.page, `fresh-${point}`);
    const fresh = await stored(b.page);
    assert.equal(fresh.turns, 0, "a new memory cut in its first open opens empty");
    await b.page.evaluate((i) => window.reliability.ingest(i, i + 1), 150_000 + point);
    await close(b.page);
    await open(b.page, `fresh-${point}`);
    reconcile("open", (await stored(b.page)).items, 150_000 + point, 150_001 + point);
    countAcked("open", 150_000 + point, 150_001 + point);
    await close(b.page);
  }
  console.log(`open: ${scenario("open").crash_points} crash points, nothing lost (${elapsed()})`);

  // upgrade: a memory as loci 0.1 wrote it (schema 1: a record per turn and per unit, the unit's vectors inside it),
  // opened by this loci, which migrates it into chunks in one transaction; the open is cut as storage opens (the
  // schema upgrade, then the migration), twice. Whether each crash came before the migration committed is read
  // from the raw database (its old stores are emptied by the migration).
  const LEGACY = [160_000, 160_060];
  await b.page.evaluate(([lo, hi]) => new Promise((ok, err) => {
    const r = indexedDB.open("loci:legacy", 1);
    r.onupgradeneeded = () => {
      r.result.createObjectStore("meta");
      for (const s of ["sessions", "turns", "units"]) r.result.createObjectStore(s, { keyPath: "id" });
    };
    r.onerror = () => err(r.error);
    r.onsuccess = async () => {
      const { exchange } = await import("/tests/reliability/page.js");
      const db = r.result;
      const tx = db.transaction(["meta", "sessions", "turns", "units"], "readwrite");
      const n = hi - lo;
      tx.objectStore("meta").put({ schema: 1, model: "sentence-transformers/all-MiniLM-L6-v2@int8", dim: 384,
        unit_mode: "pair", next_turn: 2 * n + 1, next_unit: n + 1 }, "meta");
      const sessions = new Map();
      for (let k = 0; k < n; k++) {
        const session = `s${Math.floor((lo + k) / 10)}`;
        const turns = exchange(lo + k).map((t, j) => ({ id: 2 * k + 1 + j, session, seq: 2 * (k % 10) + j,
          speaker: t.speaker, text: t.content, time: t.time, ingested: t.time }));
        turns.forEach((t) => tx.objectStore("turns").put(t));
        const vectors = new Float32Array(384).map((_, d) => Math.sin(k * 7 + d));
        const norm = Math.hypot(...vectors);
        tx.objectStore("units").put({ id: k + 1, session, turnIds: turns.map((t) => t.id),
          vectors: vectors.map((x) => x / norm) });
        const s = sessions.get(session) ?? { id: session, firstTime: turns[0].time, lastTime: 0, turnCount: 0 };
        s.lastTime = turns[1].time;
        s.turnCount += 2;
        sessions.set(session, s);
      }
      sessions.forEach((s) => tx.objectStore("sessions").put(s));
      tx.oncomplete = () => { db.close(); ok(); };
      tx.onerror = () => err(tx.error);
    };
  }), LEGACY);
  for (let i = LEGACY[0]; i < LEGACY[1]; i++) acked.add(i); // committed by the old loci
  const migrated = [];
  for (const point of [0, 1]) {
    let hit;
    const heard = new Promise((r) => { hit = r; });
    onPhase = (phase) => { if (phase === "storage") hit(); };
    const opening = open(b.page, "legacy", { reportPhases: true }).catch(() => {});
    await withTimeout(heard, 30_000);
    await sleep(random() * 30);
    b = await crash(b, point === 1);
    await opening;
    crashed("upgrade", point === 1);
    onPhase = () => {};
    migrated.push(await b.page.evaluate(() => new Promise((ok) => {
      const r = indexedDB.open("loci:legacy");
      r.onsuccess = () => {
        const db = r.result;
        if (!db.objectStoreNames.contains("vectors")) { db.close(); return ok("not upgraded"); }
        const count = db.transaction("turns").objectStore("turns").count();
        count.onsuccess = () => { db.close(); ok(count.result ? "upgraded, not migrated" : "migrated"); };
      };
    })));
  }
  await open(b.page, "legacy");
  const legacy = await stored(b.page);
  reconcile("upgrade", legacy.items, ...LEGACY);
  assert.deepEqual([legacy.turns, legacy.units, legacy.vectors], [120, 60, 60], "upgrade: every turn and unit, migrated");
  countAcked("upgrade", ...LEGACY);
  await close(b.page);
  console.log(`upgrade: after each crash the database was ${migrated.join("; ")}; then opened whole (${elapsed()})`);

  // import: the ingest memory's export, imported into a new memory, cut twice, then completed.
  await open(b.page, "crash");
  const doc = await b.page.evaluate(async () => (await window.reliability.stored()).doc);
  await close(b.page);
  const docSessions = new Map(doc.sessions.map((s) => [s.id, JSON.stringify(s.turns)]));
  const importCheck = async (page) => {
    const now = await page.evaluate(async () => (await window.memory.export()).sessions);
    let whole = 0;
    for (const s of now) {
      assert.ok(docSessions.has(s.id), `import: session ${s.id} is from the document`);
      assert.equal(JSON.stringify(s.turns), docSessions.get(s.id), `import: session ${s.id} is there whole`);
      whole++;
    }
    return whole;
  };
  const importSeen = [];
  for (let point = 0; point < 2; point++) {
    await open(b.page, "imported");
    importSeen.push(await importCheck(b.page));
    b.page.evaluate((d) => window.memory.import(d).then(() => window.ack("import")), doc).catch(() => {});
    await sleep(2000 + random() * 4000);
    b = await crash(b, point === 1);
    crashed("import", point === 1);
  }
  assert.ok(!ackedOther.has("import"), "import: the crashes cut it before it resolved");
  await open(b.page, "imported");
  const before = await importCheck(b.page);
  importSeen.push(before);
  const finished = await b.page.evaluate((d) => window.memory.import(d), doc);
  assert.equal(finished.sessionsSkipped, before, "import: a re-run skips the sessions already there");
  assert.equal(finished.sessionsImported, doc.sessions.length - before);
  assert.equal(await importCheck(b.page), doc.sessions.length, "import: completed, every session whole");
  console.log(`import: ${doc.sessions.length} sessions; whole after each crash: ${importSeen.join(", ")} (${elapsed()})`);

  // The imported memory (built without crashes) and the crashed one rank the same.
  const queries = questions(12, 5);
  const reference = await b.page.evaluate((q) => window.reliability.rankings(q), queries);
  await close(b.page);
  await open(b.page, "crash");
  const ranked = await b.page.evaluate((q) => window.reliability.rankings(q), queries);
  await close(b.page);
  // The two memories index the same units in another order, so their BM25 terms are numbered differently and sums
  // run in another order: a score may differ in its last bits, which the rounding to 4 decimals can still show. The
  // sessions must come in the same order, with scores equal within 1e-3.
  const sameRanking = (r, ref) => r.length === ref.length &&
    r.every(([id, score], j) => id === ref[j][0] && Math.abs(score - ref[j][1]) <= 1e-3);
  report.ranking_mismatches = ranked.filter((r, i) => !sameRanking(r, reference[i])).length;
  assert.equal(report.ranking_mismatches, 0,
    `recall ranks as in a memory built without crashes: ${JSON.stringify({ ranked, reference })}`);
  await quit(b);

  // encrypted: the ingest series into a memory opened with a passphrase.
  const PASS = ["correct horse battery staple", "a second passphrase", "and a third one"];
  const ENC = [100_000, 150_000];
  b = await ingestScenario("enc", "encrypted", ...ENC, 3, 45, { encryption: { passphrase: PASS[0] } }, (p) => p === 1);
  countAcked("encrypted", ...ENC);
  await close(b.page);
  console.log(`encrypted: ${scenario("encrypted").crash_points} crash points, ` +
    `${scenario("encrypted").turns_acknowledged} turns acknowledged (${elapsed()})`);

  // changePassphrase, cut mid re-encryption.
  let current = 0;
  const rekeys = [];
  for (let point = 0; point < 2; point++) {
    const next = current === 0 ? 1 + point : 0;
    await open(b.page, "enc", { encryption: { passphrase: PASS[current] } });
    const tag = `rekey-${point}`;
    b.page.evaluate(([a, z, t]) => window.memory.changePassphrase(a, z).then(() => window.ack(t)),
      [PASS[current], PASS[next], tag]).catch(() => {});
    // The first mid-way; the second as soon as it resolved (the new passphrase must open it then).
    if (point === 0) await sleep(random() * 300);
    else await until(() => ackedOther.has(tag), 30_000, "changePassphrase resolved");
    const kill = point === 1;
    b = await crash(b, kill);
    crashed("changePassphrase", kill);
    const outcomes = [];
    for (const p of [current, next]) {
      const got = await tryOpen(b.page, "enc", { encryption: { passphrase: PASS[p] } });
      outcomes.push(got);
      if (got === "ok") await close(b.page);
    }
    assert.equal(outcomes.filter((o) => o === "ok").length, 1, `exactly one passphrase opens it: ${outcomes}`);
    assert.ok(outcomes.every((o) => o === "ok" || o === "BAD_KEY"), `the other is BAD_KEY: ${outcomes}`);
    const opens = outcomes[0] === "ok" ? current : next;
    if (ackedOther.has(tag)) assert.equal(opens, next, "once changePassphrase resolved, the new passphrase opens it");
    rekeys.push(`${ackedOther.has(tag) ? "resolved" : "cut"}: ${opens === next ? "new" : "old"}`);
    current = opens;
    await open(b.page, "enc", { encryption: { passphrase: PASS[current] } });
    reconcile("changePassphrase", (await stored(b.page)).items, ...ENC);
    await close(b.page);
  }
  console.log(`changePassphrase: ${rekeys.join("; ")} (${elapsed()})`);

  // embedding: a pasted document, its background embedding cut twice.
  const DOC = 500_000;
  const paste = `(item ${DOC}) ` + Array.from({ length: 520 }, (_, i) => i < 400
    ? `Section ${i}: the audit of supplier ${i} in Lyon found ${i * 3} late deliveries.`
    : `Appendix ${i}: the lighthouse keeper on Ushant ${i} kept a recipe for fish soup with saffron.`).join(" ");
  assert.ok(paste.length >= 40_000, `a ~40,000-character document (${paste.length})`);
  const addPaste = (page, session, item) => page.evaluate(async ([text, session, item]) => {
    await window.memory.addMessages([{ speaker: "user", content: text },
      { speaker: "assistant", content: `(item ${item}) Noted.` }], { session });
    await window.ack(item);
    return (await window.memory.stats()).pendingEmbeddings;
  }, [paste.replace(`(item ${DOC})`, `(item ${item})`), session, item]);
  await open(b.page, "paste");
  await b.page.evaluate((i) => window.reliability.ingest(i, i + 10, 5), DOC + 10);
  const v0 = (await stored(b.page)).vectors;
  assert.equal(await addPaste(b.page, "doc", DOC), 1, "embedding: addMessages resolved with windows still to embed");
  const pendingAt = [];
  for (let point = 0; point < 2; point++) {
    await sleep(150 + random() * 500);
    const kill = point === 1;
    b = await crash(b, kill);
    crashed("embedding", kill);
    await open(b.page, "paste");
    const s = await stored(b.page);
    pendingAt.push(s.pending);
    reconcile("embedding", s.items, DOC, DOC + 100);
    const text = await b.page.evaluate(async () => (await window.memory.sessionTurns("doc"))[0].text);
    assert.equal(text.length, paste.length, "embedding: the document is stored whole");
  }
  const waitEmbedded = (page) => page.evaluate(async () => {
    let s = await window.memory.stats();
    for (let i = 0; i < 1200 && s.pendingEmbeddings > 0; i++) {
      await new Promise((ok) => setTimeout(ok, 50));
      s = await window.memory.stats();
    }
    return s;
  });
  const v1 = (await waitEmbedded(b.page)).vectors;
  // The same document, embedded without a crash.
  assert.equal(await addPaste(b.page, "doc-ref", DOC + 1), 1);
  const done = await waitEmbedded(b.page);
  assert.equal(done.pendingEmbeddings, 0, "embedding: the reference completed");
  console.log(`embedding: pending at each reopen ${pendingAt}; ${v1 - v0} vectors after the crashes, ` +
    `${done.vectors - v1} without (${elapsed()})`);
  assert.ok(pendingAt[0] === 1, "embedding: the first crash cut the background embedding");
  assert.equal(v1 - v0, done.vectors - v1, "embedding: every window embedded, as without a crash");
  // Dense recall of what only the late windows say scores the document as the one embedded without a crash.
  const dense = await b.page.evaluate(() => window.memory.recall("fish soup with saffron kept by the lighthouse keeper",
    { k: 3, method: "tir" }));
  const score = (id) => dense.sessions.find((s) => s.id === id)?.score ?? -1;
  assert.ok(Math.abs(score("doc") - score("doc-ref")) < 0.01,
    `embedding: a late window is recalled as without a crash (${score("doc")} vs ${score("doc-ref")})`);
  await close(b.page);
  await open(b.page, "paste");
  reconcile("embedding", (await stored(b.page)).items, DOC, DOC + 100);
  countAcked("embedding", DOC, DOC + 100);
  await close(b.page);

  // forget: sessions forgotten one after another, cut twice.
  const FORGET = [200_000, 200_160];
  await open(b.page, "forget");
  await b.page.evaluate(([a, z]) => window.reliability.ingest(a, z, 10), FORGET);
  await close(b.page);
  const forgetIds = Array.from({ length: (FORGET[1] - FORGET[0]) / SESSION }, (_, k) => `s${FORGET[0] / SESSION + k}`);
  const cutAndGone = new Set(); // sessions whose forget was cut by a crash after it committed
  const forgetState = async (page, inflight) => {
    const { items, turns, units, vectors } = await stored(page);
    assert.equal(turns, 2 * items.length, "forget: the memory counts the turns stored");
    assert.equal(units, items.length, "forget: one unit per exchange stored");
    assert.ok(vectors >= units, "forget: every unit has its vectors");
    const sessions = await page.evaluate(async () => (await window.memory.sessions()).map((s) => s.id));
    const by = new Map();
    for (const [i, c] of items) by.set(`s${Math.floor(i / SESSION)}`, (by.get(`s${Math.floor(i / SESSION)}`) ?? 0) + c);
    for (const id of forgetIds) {
      const turns = by.get(id) ?? 0;
      if (ackedOther.has(`forgot:${id}`) || cutAndGone.has(id)) {
        assert.equal(turns, 0, `forget: ${id}'s forget resolved (or was found committed): gone`);
        assert.ok(!sessions.includes(id), `forget: ${id} is not listed`);
      } else if (id === inflight) {
        assert.ok(turns === 0 || turns === 2 * SESSION, `forget: ${id}, cut, is whole or gone (${turns})`);
        assert.equal(sessions.includes(id), turns > 0, `forget: ${id} listed as it is stored`);
        if (turns === 0) cutAndGone.add(id);
      } else {
        scenario("forget").turns_lost += 2 * SESSION - turns;
        assert.equal(turns, 2 * SESSION, `forget: ${id} is whole`);
      }
    }
    return forgetIds.filter((id) => (by.get(id) ?? 0) > 0);
  };
  let left = forgetIds;
  for (let point = 0; point < 2; point++) {
    await open(b.page, "forget");
    const targets = left.slice(0, 8);
    b.page.evaluate(async (ids) => {
      for (const id of ids) {
        await window.memory.forget({ session: id });
        await window.ack(`forgot:${id}`);
      }
    }, targets).catch(() => {});
    // Cut mid-series: once 1–4 of its forgets resolved, a moment later.
    const k = 1 + Math.floor(random() * 4);
    await until(() => targets.filter((id) => ackedOther.has(`forgot:${id}`)).length >= k, 60_000, `${k} forgets`);
    await sleep(random() * 20);
    const kill = point === 0;
    b = await crash(b, kill);
    crashed("forget", kill);
    const inflight = targets.find((id) => !ackedOther.has(`forgot:${id}`));
    await open(b.page, "forget");
    left = await forgetState(b.page, inflight);
    await close(b.page);
  }
  await quit(b);
  const forgotten = forgetIds.filter((id) => ackedOther.has(`forgot:${id}`) || cutAndGone.has(id)).length;
  assert.ok(forgotten > 0 && left.length > 0, `forget: the crashes cut the series (${forgotten} forgotten)`);
  // Acknowledged and still to be found: the exchanges of the sessions left.
  scenario("forget").turns_acknowledged += 2 * SESSION * left.length;
  console.log(`forget: ${forgotten} sessions forgotten (${cutAndGone.size} by a forget cut after its commit), ` +
    `${left.length} left whole (${elapsed()})`);

  // hand-over: a follower tab adds while its leader's renderer crashes; twice.
  const HAND = [300_000, 400_000];
  b = await launch();
  const { context } = b;
  let leader = b.page;
  await open(leader, "handover");
  const handCodes = {};
  let from = HAND[0];
  for (let point = 0; point < 2; point++) {
    const follower = await newTab(context);
    await open(follower, "handover");
    assert.equal(await follower.evaluate(() => window.memory.isLeader), false, "hand-over: the new tab follows");
    const adding = follower.evaluate(([a, z, sizes]) => window.reliability.ingestThrough(a, z, sizes),
      [from, from + 50_000, SIZES]);
    const target = 30 + Math.floor(random() * 10);
    await until(() => ackedFrom(from, from + 50_000) >= target, 120_000, `hand-over: ${target} acknowledged`);
    await sleep(random() * 300);
    await crashPage(context, leader);
    crashed("hand-over", false);
    let took = false;
    for (let i = 0; i < 200 && !took; i++) {
      took = await follower.evaluate(() => window.memory.isLeader);
      if (!took) await sleep(50);
    }
    assert.ok(took, "hand-over: the follower took over");
    await sleep(800);
    await follower.evaluate(() => { window.stopIngest = true; });
    const { codes } = await adding;
    for (const [c, n] of Object.entries(codes)) handCodes[c] = (handCodes[c] ?? 0) + n;
    await leader.close().catch(() => {});
    leader = follower;
    from += 50_000;
  }
  await close(leader);
  await quit({ context });
  assert.ok(Object.keys(handCodes).every((c) => c === "LEADER_GONE"), `hand-over: only LEADER_GONE: ${JSON.stringify(handCodes)}`);
  b = await launch();
  await open(b.page, "handover");
  const hand = reconcile("hand-over", (await stored(b.page)).items, ...HAND,
    { known: new Set((await stored(b.page)).items.map(([i]) => i).filter((i) => !acked.has(i))) });
  const unackedHand = (await stored(b.page)).items.filter(([i]) => !acked.has(i)).length;
  assert.ok(unackedHand <= (handCodes.LEADER_GONE ?? 0) * SESSION,
    "hand-over: only calls that got LEADER_GONE are stored unacknowledged");
  countAcked("hand-over", ...HAND);
  console.log(`hand-over: ${hand.counts.size} exchanges stored, ${unackedHand} of them from calls that got ` +
    `LEADER_GONE; errors ${JSON.stringify(handCodes)} (${elapsed()})`);
  await close(b.page);

  // distillation: cut as each step's reply is sent. The turns go in with the runner off, so that both runs queue
  // the same jobs; then the runner works in the background until the crash.
  const DIST = [400_000, 400_030];
  const distill = (autoRun) => ({ window: 4, autoRun, backoffMs: 200 });
  const sentCounts = async () => {
    const sent = await (await fetch(`${llmBase}/__sent`)).json();
    return sent.reduce((m, s) => ({ ...m, [s.phase]: (m[s.phase] ?? 0) + 1 }), {});
  };
  await open(b.page, "distill-crash", { distill: distill(false), llm });
  await b.page.evaluate(([a, z]) => window.reliability.ingest(a, z), DIST);
  await close(b.page);
  const sentBefore = await sentCounts();
  await open(b.page, "distill-ref", { distill: distill(false), llm });
  await b.page.evaluate(([a, z]) => window.reliability.ingest(a, z), DIST);
  const ref = await b.page.evaluate(async () => {
    await window.memory.flush();
    const s = await window.memory.stats();
    return { episodes: s.distill.episodes, facts: s.distill.factsActive, jobs: s.distill.jobs };
  });
  await close(b.page);
  await quit(b);
  const sentRef = await sentCounts();
  const steps = ["segment", "narrate", "merge", "predict", "distill", "consolidate"];
  const refCalls = Object.fromEntries(steps.map((s) => [s, (sentRef[s] ?? 0) - (sentBefore[s] ?? 0)]));
  assert.ok(steps.every((s) => refCalls[s] > 0), `every step runs in the reference: ${JSON.stringify(refCalls)}`);
  const seen = [];
  let last = null;
  let c = await launch();
  for (const [point, step] of steps.entries()) {
    const want = ((await sentCounts())[step] ?? 0) + 1;
    // Waits from before the open: the crash follows the step's next reply at once.
    const waiting = fetch(`${llmBase}/__wait?phase=${step}&count=${want}&timeoutMs=60000`);
    await open(c.page, "distill-crash", { distill: distill(true), llm });
    const now = await c.page.evaluate(async () => (await window.memory.stats()).distill);
    if (last) assert.ok(now.episodes >= last.episodes, "distillation: no committed episode is lost");
    last = now;
    const waited = await waiting;
    assert.equal(waited.status, 200, `distillation: a ${step} reply was sent`);
    await sleep(random() * 20);
    const kill = point % 2 === 1;
    c = await crash(c, kill);
    crashed("distillation", kill);
    seen.push(`${step}: ${now.jobs} jobs, ${now.episodes} episodes`);
  }
  await open(c.page, "distill-crash", { distill: distill(false), llm });
  reconcile("distillation", (await stored(c.page)).items, ...DIST);
  countAcked("distillation", ...DIST);
  const got = await c.page.evaluate(async () => {
    const flush = await window.memory.flush();
    const s = await window.memory.stats();
    return { episodes: s.distill.episodes, facts: s.distill.factsActive, jobs: s.distill.jobs, failures: flush.failures };
  });
  console.log(`distillation: the reference's calls ${JSON.stringify(refCalls)}; cut at ${seen.join("; ")}`);
  console.log(`distillation: after: ${JSON.stringify(got)}; without crashes: ${JSON.stringify(ref)} (${elapsed()})`);
  assert.equal(ref.jobs, 0);
  assert.ok(ref.episodes > 0 && ref.facts > 0, "the reference distilled something");
  assert.deepEqual({ episodes: got.episodes, facts: got.facts, jobs: got.jobs },
    { episodes: ref.episodes, facts: ref.facts, jobs: 0 }, "queued jobs resumed and ran once each");
  await quit(c);
  console.log("crash safety: ok");
} catch (e) {
  console.error(e);
  failed = true;
} finally {
  for (const s of Object.values(scenarios)) {
    report.crash_points += s.crash_points;
    report.kills += s.kills;
    report.turns_acknowledged += s.turns_acknowledged;
    report.turns_lost += s.turns_lost;
  }
  report.half_stored = halfStored;
  report.distill_crash_points = scenario("distillation").crash_points;
  report.crash_points_by_scenario = Object.fromEntries(Object.entries(scenarios).map(([k, s]) => [k, s.crash_points]));
  report.turns_acknowledged_by_scenario =
    Object.fromEntries(Object.entries(scenarios).map(([k, s]) => [k, s.turns_acknowledged]));
  report.crash_seconds = Math.round((Date.now() - started) / 1000);
  if (jsonPath) writeFileSync(jsonPath, JSON.stringify(report, null, 2) + "\n");
  console.log(JSON.stringify(report));
  llmServer.kill();
  server.close();
  try { execFileSync("pkill", ["-KILL", "-f", "--", `--user-data-dir=${profile}`], { stdio: "ignore" }); } catch { /* none left */ }
  rmSync(profile, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
