#!/usr/bin/env node
// `npm run bench:tabs [-- --json PATH] [--calls N]`
//
// What a second tab pays: the same memory open in two tabs of headless Chromium (Debian's), the first leading and
// the second following (its calls go to the leader over a BroadcastChannel). addMessages (one exchange per call)
// and recall are timed from the leader and from the follower, alternating call by call; prints p50/p95 of each and
// the follower/leader ratios.
import { writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { serve } from "../scripts/serve.mjs";
import { chromium } from "playwright-core";

const argv = process.argv.slice(2);
const value = (name, d) => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : d; };
const jsonPath = value("--json");
const calls = Number(value("--calls", 100));

const server = await serve(0, ["tests"]);
const origin = `http://127.0.0.1:${server.address().port}`;
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
});
const quantile = (xs, q) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(q * s.length))]; };
let failed = false;
try {
  const context = await browser.newContext();
  const tab = async () => {
    const page = await context.newPage();
    await page.exposeBinding("ack", () => {});
    await page.goto(`${origin}/tests/reliability/page.html`);
    await page.waitForFunction(() => window.reliability);
    await page.evaluate(() => window.reliability.open("bench-tabs"));
    return page;
  };
  const leader = await tab();
  await leader.evaluate(() => window.memory.forgetAll());
  const follower = await tab();
  if (await follower.evaluate(() => window.memory.isLeader)) throw new Error("the second tab leads");
  // One timed call in the page: addMessages of exchange i, or a recall.
  const timed = (page, kind, i) => page.evaluate(async ([kind, i]) => {
    const { exchange } = await import("/tests/reliability/page.js");
    const t = performance.now();
    if (kind === "add") await window.memory.addMessages(exchange(i), { session: `s${Math.floor(i / 10)}` });
    else await window.memory.recall(exchange(i)[0].content.slice(12, 80), { k: 3 });
    return performance.now() - t;
  }, [kind, i]);
  const times = { add: { leader: [], follower: [] }, recall: { leader: [], follower: [] } };
  for (let i = 0; i < 10; i++) { await timed(leader, "add", 90_000 + i); await timed(follower, "recall", i); } // warm-up
  for (let i = 0; i < calls; i++) {
    times.add.leader.push(await timed(leader, "add", 2 * i));
    times.add.follower.push(await timed(follower, "add", 2 * i + 1));
    times.recall.leader.push(await timed(leader, "recall", i));
    times.recall.follower.push(await timed(follower, "recall", i));
  }
  const stat = (xs) => ({ p50: +quantile(xs, 0.5).toFixed(1), p95: +quantile(xs, 0.95).toFixed(1) });
  const ratio = (a, b) => +(a / b).toFixed(2);
  const out = { calls, cpus: cpus().length, load: +loadavg()[0].toFixed(2) };
  for (const kind of ["add", "recall"]) {
    const l = stat(times[kind].leader);
    const f = stat(times[kind].follower);
    const key = kind === "add" ? "add_messages" : "recall";
    Object.assign(out, { [`${key}_p50_ms_leader`]: l.p50, [`${key}_p95_ms_leader`]: l.p95,
      [`${key}_p50_ms_follower`]: f.p50, [`${key}_p95_ms_follower`]: f.p95,
      [`${key}_p50_follower_over_leader`]: ratio(f.p50, l.p50) });
  }
  console.log(`| call | leader p50 / p95 (ms) | follower p50 / p95 (ms) | follower / leader (p50) |`);
  console.log(`|---|---|---|---|`);
  console.log(`| addMessages (one exchange) | ${out.add_messages_p50_ms_leader} / ${out.add_messages_p95_ms_leader} | ` +
    `${out.add_messages_p50_ms_follower} / ${out.add_messages_p95_ms_follower} | ${out.add_messages_p50_follower_over_leader} |`);
  console.log(`| recall (k = 3) | ${out.recall_p50_ms_leader} / ${out.recall_p95_ms_leader} | ` +
    `${out.recall_p50_ms_follower} / ${out.recall_p95_ms_follower} | ${out.recall_p50_follower_over_leader} |`);
  console.log(JSON.stringify(out));
  if (jsonPath) writeFileSync(jsonPath, JSON.stringify(out, null, 2) + "\n");
} catch (e) {
  console.error(e);
  failed = true;
} finally {
  await browser.close();
  server.close();
}
process.exit(failed ? 1 : 0);
