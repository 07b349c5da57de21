// Crash safety in headless Chromium (Debian's, driven by playwright-core) on a profile directory on disk.
//
// 1. A long series of addMessages, one exchange per call, each acknowledged to this test as soon as it resolves, is
//    cut at random points: the renderer is crashed (CDP Page.crash) or the whole browser is killed (SIGKILL). After
//    each crash the browser is started again on the same profile, the memory opened, and the series resumed where
//    the store says it stopped. At the end: every acknowledged exchange is stored, both its turns, with vectors; no
//    exchange is half stored; and recall ranks exactly as a memory built from the same turns without any crash.
// 2. Background distillation (the scripted LLM server, with latency) is cut the same way, several times; after a
//    last reopen `flush()` finishes the queue, and the episodes and facts are exactly those of a run without
//    crashes (jobs ran once each, in order, across the crashes).
//
//   node tests/reliability/crash.test.mjs [--json PATH]    (LOCI_CRASH_POINTS: ingest crash points, default 8)
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
const ingestPoints = Number(process.env.LOCI_CRASH_POINTS ?? 8);
const distillPoints = Math.max(2, Math.round(ingestPoints / 2));

let seed = 0x5eed;
const random = () => { seed ^= seed << 13; seed >>>= 0; seed ^= seed >> 17; seed ^= seed << 5; seed >>>= 0; return seed / 2 ** 32; };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const withTimeout = (p, ms) => Promise.race([p, sleep(ms)]);

mkdirSync(join(root, "target"), { recursive: true });
const profile = mkdtempSync(join(root, "target", "crash-profile-"));
const server = await serve(0, ["tests"]);
const origin = `http://127.0.0.1:${server.address().port}`;
const llmServer = spawn("node", [join(root, "tests/llm-server/server.mjs"), "0"], { stdio: ["ignore", "pipe", "inherit"] });
const llmPort = await new Promise((ok) => llmServer.stdout.on("data", (d) => {
  const m = /READY (\d+)/.exec(String(d));
  if (m) ok(m[1]);
}));
const llm = { baseUrl: `http://127.0.0.1:${llmPort}/v1`, model: "scripted", timeoutMs: 60_000 };
await fetch(`http://127.0.0.1:${llmPort}/__config`, { method: "POST", body: JSON.stringify({ latencyMs: 150 }) });

const acked = new Set();
async function launch() {
  const context = await persistentBrowser(profile);
  const page = context.pages()[0] ?? await context.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.exposeBinding("ack", (_source, i) => { acked.add(i); });
  await page.goto(`${origin}/tests/reliability/page.html`);
  await page.waitForFunction(() => window.reliability);
  return { context, page };
}

/** Crashes the renderer (CDP) or kills every process of the browser (SIGKILL), then lets the context go. */
async function crash({ context, page }, kill) {
  if (kill) {
    try { execFileSync("pkill", ["-KILL", "-f", "--", `--user-data-dir=${profile}`], { stdio: "ignore" }); } catch { /* already gone */ }
  } else {
    const cdp = await context.newCDPSession(page);
    cdp.send("Page.crash").catch(() => {});
    await withTimeout(new Promise((r) => page.once("crash", r)), 10_000);
  }
  await withTimeout(context.close().catch(() => {}), 10_000);
  if (kill) await sleep(200);
}

const stored = (page) => page.evaluate(async () => {
  const s = await window.reliability.stored();
  return { items: s.items, turns: s.stats.turns, units: s.stats.units, vectors: s.stats.vectors, distill: s.stats.distill };
});

const report = { crash_points: 0, kills: 0, turns_acknowledged: 0, turns_lost: 0, half_stored: 0,
  distill_crash_points: 0, ranking_mismatches: 0 };
let failed = false;
try {
  // 1. Ingest, cut at random points.
  let next = 0;
  for (let point = 0; point < ingestPoints; point++) {
    const b = await launch();
    await b.page.evaluate(() => window.reliability.open("crash"));
    const { items } = await stored(b.page);
    next = items.reduce((n, [i]) => Math.max(n, i + 1), next);
    b.page.evaluate(([from, to]) => window.reliability.ingest(from, to), [next, next + 500]).catch(() => {});
    await sleep(400 + random() * 2500);
    const kill = point % 3 === 2;
    await crash(b, kill);
    report.crash_points++;
    if (kill) report.kills++;
  }
  const b = await launch();
  await b.page.evaluate(() => window.reliability.open("crash"));
  const after = await stored(b.page);
  const counts = new Map(after.items);
  report.turns_acknowledged = 2 * acked.size;
  report.turns_lost = [...acked].reduce((n, i) => n + Math.max(0, 2 - (counts.get(i) ?? 0)), 0);
  report.half_stored = after.items.filter(([, c]) => c !== 2).length;
  const unacked = after.items.filter(([i]) => !acked.has(i)).length;
  console.log(`ingest: ${report.crash_points} crash points (${report.kills} browser kills), ${acked.size} exchanges ` +
    `acknowledged, ${after.items.length} stored (${unacked} committed but cut before their acknowledgement), ` +
    `${report.turns_lost} turns lost, ${report.half_stored} half stored`);
  assert.ok(acked.size > ingestPoints, `the series made progress (${acked.size} acknowledged)`);
  assert.equal(report.turns_lost, 0, "every acknowledged turn is stored");
  assert.equal(report.half_stored, 0, "no exchange is half stored");
  assert.ok(unacked <= report.crash_points, "at most the call in flight at each crash is stored unacknowledged");
  assert.equal(after.turns, 2 * after.items.length);
  assert.equal(after.units, after.items.length, "one unit per exchange");
  assert.ok(after.vectors >= after.units, "every unit has its vectors");

  // The same turns in a memory that never crashed rank the same.
  const doc = await b.page.evaluate(async () => (await window.reliability.stored()).doc);
  const queries = questions(12, 5);
  const crashed = await b.page.evaluate((q) => window.reliability.rankings(q), queries);
  await b.page.evaluate(() => window.reliability.close());
  await b.page.evaluate(() => window.reliability.open("reference"));
  await b.page.evaluate((d) => window.reliability.importDoc(d), doc);
  const reference = await b.page.evaluate((q) => window.reliability.rankings(q), queries);
  // The reopened memory and the imported one index the same units in another order, so their BM25 terms are
  // numbered differently and sums run in another order: a score may differ in its last bits, which the rounding to
  // 4 decimals can still show. The sessions must come in the same order, with scores equal within 1e-3.
  const sameRanking = (r, ref) => r.length === ref.length &&
    r.every(([id, score], j) => id === ref[j][0] && Math.abs(score - ref[j][1]) <= 1e-3);
  report.ranking_mismatches = crashed.filter((r, i) => !sameRanking(r, reference[i])).length;
  assert.equal(crashed.length, reference.length);
  assert.equal(report.ranking_mismatches, 0,
    `recall ranks as in a memory built without crashes: ${JSON.stringify({ crashed, reference })}`);
  await b.page.evaluate(() => window.reliability.close());

  // 2. Distillation, cut at random points. The turns go in with the runner off, so that both runs queue the same
  // jobs; then the runner works in the background until the crash.
  const distill = (autoRun) => ({ window: 4, autoRun, backoffMs: 200 });
  await b.page.evaluate(([d, l]) => window.reliability.open("distill-crash", { distill: d, llm: l }), [distill(false), llm]);
  await b.page.evaluate(() => window.reliability.ingest(10_000, 10_030));
  await b.page.evaluate(() => window.reliability.close());
  await b.page.evaluate(([d, l]) => window.reliability.open("distill-ref", { distill: d, llm: l }), [distill(false), llm]);
  await b.page.evaluate(() => window.reliability.ingest(10_000, 10_030));
  const ref = await b.page.evaluate(async () => {
    await window.memory.flush();
    const s = await window.memory.stats();
    return { episodes: s.distill.episodes, facts: s.distill.factsActive, jobs: s.distill.jobs };
  });
  await b.page.evaluate(() => window.reliability.close());
  await withTimeout(b.context.close(), 10_000);
  let before = null;
  const seen = [];
  for (let point = 0; point < distillPoints; point++) {
    const c = await launch();
    await c.page.evaluate(([d, l]) => window.reliability.open("distill-crash", { distill: d, llm: l }), [distill(true), llm]);
    const now = (await stored(c.page)).distill;
    if (before) assert.ok(now.episodes >= before.episodes, "no committed episode is lost");
    before = now;
    seen.push(`${now.jobs} jobs queued, ${now.episodes} episodes`);
    await sleep(500 + random() * 2000);
    await crash(c, point % 2 === 1);
    report.distill_crash_points++;
  }
  const c = await launch();
  await c.page.evaluate(([d, l]) => window.reliability.open("distill-crash", { distill: d, llm: l }), [distill(false), llm]);
  const got = await c.page.evaluate(async () => {
    const flush = await window.memory.flush();
    const s = await window.memory.stats();
    return { episodes: s.distill.episodes, facts: s.distill.factsActive, jobs: s.distill.jobs, failures: flush.failures };
  });
  console.log(`distillation: at each reopen ${seen.join("; ")}`);
  console.log(`distillation: ${report.distill_crash_points} crash points; after: ${JSON.stringify(got)}; ` +
    `without crashes: ${JSON.stringify(ref)}`);
  assert.equal(ref.jobs, 0);
  assert.ok(ref.episodes > 0 && ref.facts > 0, "the reference distilled something");
  assert.deepEqual({ episodes: got.episodes, facts: got.facts, jobs: got.jobs },
    { episodes: ref.episodes, facts: ref.facts, jobs: 0 }, "queued jobs resumed and ran once each");
  await withTimeout(c.context.close(), 10_000);
  console.log("crash safety: ok");
} catch (e) {
  console.error(e);
  failed = true;
} finally {
  if (jsonPath) writeFileSync(jsonPath, JSON.stringify(report, null, 2) + "\n");
  console.log(JSON.stringify(report));
  llmServer.kill();
  server.close();
  try { execFileSync("pkill", ["-KILL", "-f", "--", `--user-data-dir=${profile}`], { stdio: "ignore" }); } catch { /* none left */ }
  rmSync(profile, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
