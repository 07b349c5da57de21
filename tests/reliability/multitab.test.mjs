// Several tabs on one memory, in headless Chromium (Debian's, driven by playwright-core): every page of the same
// origin opens the same memory; the first leads, the others forward their calls to it.
//
// 1. Two tabs, then three: each adds 1,000 turns (500 exchanges, one addMessages each), all at once, interleaved.
//    Afterwards the memory holds every turn exactly once: 0 lost, 0 duplicated.
// 2. The leader's tab is closed while a distillation job's LLM call is in flight (the scripted server, slow), and
//    while a follower waits on a forwarded flush(): that call settles with LEADER_GONE (never hangs), the follower
//    takes over, and the queue ends exactly as in a memory that was never interrupted (each job ran once).
//
//   node tests/reliability/multitab.test.mjs [--json PATH]    (LOCI_MULTITAB_EXCHANGES per tab, default 500)
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { serve } from "../../scripts/serve.mjs";
import { launchChromium, reliabilityTab } from "./harness.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const argv = process.argv.slice(2);
const jsonPath = argv.includes("--json") ? argv[argv.indexOf("--json") + 1] : null;
const perTab = Number(process.env.LOCI_MULTITAB_EXCHANGES ?? 500);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const server = await serve(0, ["tests"]);
const origin = `http://127.0.0.1:${server.address().port}`;
const llmServer = spawn("node", [join(root, "tests/llm-server/server.mjs"), "0"], { stdio: ["ignore", "pipe", "inherit"] });
const llmPort = await new Promise((ok) => llmServer.stdout.on("data", (d) => {
  const m = /READY (\d+)/.exec(String(d));
  if (m) ok(m[1]);
}));
const llmBase = `http://127.0.0.1:${llmPort}`;
const llm = { baseUrl: `${llmBase}/v1`, model: "scripted", timeoutMs: 60_000 };
const browser = await launchChromium();

/** A tab of `context` with the reliability page loaded. */
const tab = (context) => reliabilityTab(context, origin);

const isLeader = (page) => page.evaluate(() => window.memory.isLeader);

const report = { multitab_tabs_tried: [], multitab_turns_added: 0, multitab_turns_lost: 0,
  multitab_turns_duplicated: 0, multitab_leader_closed_mid_job: 0, multitab_in_flight_settled: 0 };
let failed = false;
try {
  // 1. Interleaved adds from 2, then 3 tabs.
  for (const tabs of [2, 3]) {
    const context = await browser.newContext();
    const pages = [];
    for (let t = 0; t < tabs; t++) {
      const page = await tab(context);
      await page.evaluate((name) => window.reliability.open(name), `multitab-${tabs}`);
      pages.push(page);
    }
    const leaders = await Promise.all(pages.map(isLeader));
    assert.deepEqual(leaders, pages.map((_, t) => t === 0), "the first tab leads, the others follow");
    // Tab t adds exchanges t·100000 … t·100000 + perTab − 1 (each tagged with its number), all tabs at once.
    const started = Date.now();
    await Promise.all(pages.map((page, t) =>
      page.evaluate(([from, to]) => window.reliability.ingest(from, to), [t * 100_000, t * 100_000 + perTab])));
    const seconds = (Date.now() - started) / 1000;
    // What the memory holds, read from the last tab (a follower) and from the leader.
    const fromFollower = await pages[tabs - 1].evaluate(async () => (await window.reliability.stored()).items);
    const fromLeader = await pages[0].evaluate(async () => (await window.reliability.stored()).items);
    assert.deepEqual(fromFollower, fromLeader, "a follower reads what the leader holds");
    const counts = new Map(fromLeader);
    let lost = 0;
    let duplicated = 0;
    for (let t = 0; t < tabs; t++) {
      for (let i = t * 100_000; i < t * 100_000 + perTab; i++) {
        const c = counts.get(i) ?? 0;
        lost += Math.max(0, 2 - c);
        duplicated += Math.max(0, c - 2);
      }
    }
    const unexpected = fromLeader.filter(([i]) => (i % 100_000) >= perTab || i < 0).length;
    report.multitab_tabs_tried.push(tabs);
    report.multitab_turns_added += 2 * perTab * tabs;
    report.multitab_turns_lost += lost;
    report.multitab_turns_duplicated += duplicated + unexpected;
    console.log(`${tabs} tabs: ${2 * perTab} turns added from each, interleaved, in ${seconds.toFixed(1)} s; ` +
      `${lost} lost, ${duplicated} duplicated, ${unexpected} unexpected`);
    assert.equal(lost, 0, "no turn is lost");
    assert.equal(duplicated + unexpected, 0, "no turn is stored twice");
    await context.close();
  }

  // 2. The leader goes in the middle of a distillation job. The reference: the same turns, distilled in one tab.
  const context = await browser.newContext();
  const distill = (autoRun) => ({ window: 4, autoRun, backoffMs: 200 });
  const ref = await tab(context);
  await ref.evaluate(([d, l]) => window.reliability.open("multitab-distill-ref", { distill: d, llm: l }), [distill(false), llm]);
  await ref.evaluate(() => window.reliability.ingest(20_000, 20_024));
  const reference = await ref.evaluate(async () => {
    await window.memory.flush();
    const s = await window.memory.stats();
    await window.memory.close();
    return { episodes: s.distill.episodes, facts: s.distill.factsActive, jobs: s.distill.jobs };
  });
  await ref.close();
  assert.ok(reference.episodes > 0 && reference.facts > 0, "the reference distilled something");

  // The turns go in with the runner off (both memories queue the same jobs), then the leader runs them.
  const leader = await tab(context);
  await leader.evaluate(([d, l]) => window.reliability.open("multitab-distill", { distill: d, llm: l }), [distill(false), llm]);
  await leader.evaluate(() => window.reliability.ingest(20_000, 20_024));
  await leader.evaluate(() => window.reliability.close());
  await fetch(`${llmBase}/__config`, { method: "POST", body: JSON.stringify({ latencyMs: 1500 }) });
  await leader.evaluate(([d, l]) => window.reliability.open("multitab-distill", { distill: d, llm: l }), [distill(true), llm]);
  const follower = await tab(context);
  await follower.evaluate(([d, l]) => window.reliability.open("multitab-distill", { distill: d, llm: l }), [distill(true), llm]);
  assert.equal(await isLeader(follower), false);
  // A forwarded flush() waits on the leader's jobs; then the leader's tab goes while a job's call is in flight.
  const logged = async () => (await (await fetch(`${llmBase}/__log`)).json()).length;
  const before = await logged();
  await follower.evaluate(() => {
    window.flushOutcome = window.memory.flush().then(() => "resolved", (e) => e.code);
  });
  for (let i = 0; i < 100 && (await logged()) === before; i++) await sleep(50);
  assert.ok((await logged()) > before, "the leader's job is calling the LLM");
  await sleep(300);
  await leader.close();
  report.multitab_leader_closed_mid_job++;
  const outcome = await Promise.race([follower.evaluate(() => window.flushOutcome), sleep(30_000).then(() => "hung")]);
  console.log(`the follower's flush() in flight when the leader went: ${outcome}`);
  assert.equal(outcome, "LEADER_GONE", "a call in flight to a leader that goes gets LEADER_GONE");
  report.multitab_in_flight_settled++;
  for (let i = 0; i < 200 && !(await isLeader(follower)); i++) await sleep(100);
  assert.equal(await isLeader(follower), true, "the follower took over");
  await fetch(`${llmBase}/__config`, { method: "POST", body: JSON.stringify({ latencyMs: 0 }) });
  const got = await follower.evaluate(async () => {
    const flush = await window.memory.flush();
    const s = await window.memory.stats();
    return { episodes: s.distill.episodes, facts: s.distill.factsActive, jobs: s.distill.jobs, failures: flush.failures };
  });
  console.log(`after the takeover: ${JSON.stringify(got)}; uninterrupted: ${JSON.stringify(reference)}`);
  assert.deepEqual({ episodes: got.episodes, facts: got.facts, jobs: got.jobs }, reference,
    "the job the leader was running ran once, in the tab that took over");
  await context.close();
  console.log("multitab: ok");
} catch (e) {
  console.error(e);
  failed = true;
} finally {
  if (jsonPath) writeFileSync(jsonPath, JSON.stringify(report, null, 2) + "\n");
  console.log(JSON.stringify(report));
  await browser.close().catch(() => {});
  llmServer.kill();
  server.close();
}
process.exit(failed ? 1 : 0);
