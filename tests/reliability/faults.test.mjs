// Injected storage faults in headless Chromium: each gets a typed error, leaves nothing partial behind, and the next
// operation succeeds.
// - A write transaction aborts half-way (its first put aborts it: IDBObjectStore.prototype.put patched).
// - The quota runs out (CDP Storage.overrideQuotaForOrigin, then lifted without a reload): QUOTA_EXCEEDED, the data
//   already stored unchanged.
// - The connection is closed under the memory (every IDBDatabase the page opened is closed from outside): the
//   next write opens a fresh connection and commits.
// - The write that ends a pasted document's background embedding aborts: told through onProgress (in the leader and
//   in a follower tab), the document stays pending and recallable, and the next addMessages completes it.
//
//   node tests/reliability/faults.test.mjs [--json PATH]
import { persistentBrowser } from "../../bench/local-browser.mjs";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { serve } from "../../scripts/serve.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const argv = process.argv.slice(2);
const jsonPath = argv.includes("--json") ? argv[argv.indexOf("--json") + 1] : null;

mkdirSync(join(root, "target"), { recursive: true });
const profile = mkdtempSync(join(root, "target", "faults-profile-"));
const server = await serve(0, ["tests"]);
const origin = `http://127.0.0.1:${server.address().port}`;
const context = await persistentBrowser(profile);
const report = { faults_injected: 0, faults_typed: 0, faults_recovered: 0 };

/** In the page: the next `put` aborts its transaction half-way, once (`window.restorePut()` disarms it). */
function abortTheNextPut() {
  const put = IDBObjectStore.prototype.put;
  window.restorePut = () => { IDBObjectStore.prototype.put = put; };
  IDBObjectStore.prototype.put = function (...args) {
    const request = put.apply(this, args);
    window.restorePut();
    this.transaction.abort();
    return request;
  };
}

/**
 * The quota runs out. Chromium reads an origin's quota when its IndexedDB is first used in a browser session (an
 * override set later is not seen), so this runs in a browser of its own: the quota is set before the memory
 * opens (model not cached, so that IndexedDB is all the origin stores), exchanges are added until a write is refused
 * (QUOTA_EXCEEDED, and the memory and the store unchanged), then the quota is lifted without a reload and the next
 * write succeeds.
 */
async function quotaScenario() {
  const dir = mkdtempSync(join(root, "target", "quota-profile-"));
  const ctx = await persistentBrowser(dir);
  try {
    const page = ctx.pages()[0] ?? await ctx.newPage();
    await page.exposeBinding("ack", () => {});
    await page.goto(`${origin}/tests/reliability/page.html`);
    await page.waitForFunction(() => window.reliability);
    const cdp = await ctx.newCDPSession(page);
    await cdp.send("Storage.overrideQuotaForOrigin", { origin, quotaSize: 400_000 });
    await page.evaluate(() => window.reliability.open("quota", { embedder: {
      device: "wasm", modelUrl: "/www/assets/model/model.onnx", tokenizerUrl: "/www/assets/model/tokenizer.json",
      ortUrl: "/www/assets/ort/", cache: false } }));
    const state = () => page.evaluate(async () => {
      const s = await window.reliability.stored();
      return { turns: s.stats.turns, doc: JSON.stringify(s.doc.sessions) };
    });
    report.faults_injected++;
    let code = null;
    let i = 0;
    let before = null;
    for (; i < 400 && code === null; i++) {
      before = await state();
      code = await page.evaluate(async (n) => {
        try { await window.reliability.ingest(n, n + 1); return null; } catch (e) { return e.code ?? String(e); }
      }, i);
    }
    console.log(`the quota runs out: ${code} after ${i - 1} exchanges`);
    assert.equal(code, "QUOTA_EXCEEDED", "a full quota is a typed error");
    report.faults_typed++;
    assert.deepEqual(await state(), before, "the data already stored is unchanged");
    await cdp.send("Storage.overrideQuotaForOrigin", { origin });
    const next = await page.evaluate(async (n) => {
      try { await window.reliability.ingest(n, n + 1); return null; } catch (e) { return e.code ?? String(e); }
    }, i);
    assert.equal(next, null, "with the quota lifted (no reload) the next write succeeds");
    assert.equal((await state()).turns, before.turns + 2);
    report.faults_recovered++;
  } finally {
    await ctx.close().catch(() => {});
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The write that ends a background embedding aborts. `addMessages` of a pasted document resolves with a few of its
 * windows embedded; the rest are embedded in the background and committed in one write, which the armed fault
 * aborts: the page hears `{ phase: "embed", error }` (STORAGE_FAILED), the document stays recallable with the windows
 * it had and stays pending, and the next `addMessages` starts the background run again, which completes; a reopen
 * finds every window.
 */
async function backgroundEmbedScenario(page) {
  await page.evaluate(() => window.reliability.open("faults-embed", {
    onProgress: (e) => { if (e.phase === "embed" || e.phase === "embedded") (window.embedEvents ||= []).push(e); },
  }));
  // A second tab on the memory: the paste is sent from it, and it hears the leader's background run too.
  const leads = await page.evaluate(() => window.reliability.follow("faults-embed", {
    onProgress: (e) => (window.followerEvents ||= []).push(e),
  }));
  assert.equal(leads, false, "the second opener follows");
  const document = Array.from({ length: 260 }, (_, i) =>
    `Section ${i}: the audit of supplier ${i} in Lyon found ${i * 3} late deliveries.`).join(" ");
  const stats = () => page.evaluate(() => window.memory.stats());
  await page.evaluate(async (text) => {
    await window.follower.addMessages([{ role: "user", content: text }, { role: "assistant", content: "Noted." }],
      { session: "paste" });
  }, document);
  // Armed once addMessages resolved: the next put is the background run's, which writes only when it is done
  // (after ~45 model calls).
  await page.evaluate(abortTheNextPut);
  report.faults_injected++;
  const first = await stats();
  assert.equal(first.pendingEmbeddings, 1, "a few windows now, the rest in the background");
  const error = await page.evaluate(async () => {
    for (let i = 0; i < 1200 && !(window.embedEvents ?? []).some((e) => e.phase === "embed"); i++) {
      await new Promise((ok) => setTimeout(ok, 50));
    }
    return (window.embedEvents ?? []).find((e) => e.phase === "embed")?.error?.code ?? null;
  });
  await page.evaluate(() => window.restorePut());
  console.log(`the background embedding's write aborts: ${error}`);
  assert.equal(error, "STORAGE_FAILED", "told through onProgress, typed");
  const heard = await page.evaluate(async () => {
    for (let i = 0; i < 100 && !(window.followerEvents ?? []).some((e) => e.phase === "embed"); i++) {
      await new Promise((ok) => setTimeout(ok, 50));
    }
    const e = (window.followerEvents ?? []).find((e) => e.phase === "embed");
    return e ? { code: e.error?.code, error: e.error instanceof Error } : null;
  });
  assert.deepEqual(heard, { code: "STORAGE_FAILED", error: true }, "the follower hears it too, as a typed error");
  report.faults_typed++;
  const during = await stats();
  assert.deepEqual([during.pendingEmbeddings, during.vectors], [1, first.vectors], "still pending, nothing lost");
  const hit = await page.evaluate(() => window.memory.recall("late deliveries of supplier 200", { k: 1 }));
  assert.equal(hit.sessions[0].id, "paste", "recallable meanwhile");
  await page.evaluate(() => window.memory.addMessages([{ role: "user", content: "And the invoices?" }], { session: "paste" }));
  const done = await page.evaluate(async () => {
    let s = await window.memory.stats();
    for (let i = 0; i < 1200 && s.pendingEmbeddings > 0; i++) {
      await new Promise((ok) => setTimeout(ok, 50));
      s = await window.memory.stats();
    }
    return s;
  });
  assert.equal(done.pendingEmbeddings, 0, "the next addMessages started it again, and it completed");
  assert.ok(done.vectors > first.vectors + 10, `every window: ${first.vectors} → ${done.vectors}`);
  const followerHeard = await page.evaluate(async () => {
    for (let i = 0; i < 100 && !(window.followerEvents ?? []).some((e) => e.phase === "embedded"); i++) {
      await new Promise((ok) => setTimeout(ok, 50));
    }
    return window.followerEvents.map((e) => e.phase + (e.phase === "tab" ? `:${e.detail}` : "") +
      (e.pending !== undefined ? `:${e.pending}` : ""));
  });
  // Its own role, then only the leader's background phases (not the leader's open or role).
  assert.deepEqual(followerHeard, ["tab:following", "embed", "embedded:0"], "what the follower heard");
  await page.evaluate(() => window.follower.close());
  await page.evaluate(() => window.reliability.close());
  await page.evaluate(() => window.reliability.open("faults-embed"));
  const reopened = await stats();
  assert.deepEqual([reopened.pendingEmbeddings, reopened.vectors], [0, done.vectors], "a reopen finds them all");
  await page.evaluate(() => window.reliability.close());
  report.faults_recovered++;
}

let failed = false;
try {
  const page = context.pages()[0] ?? await context.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.exposeBinding("ack", () => {});
  await page.goto(`${origin}/tests/reliability/page.html`);
  await page.waitForFunction(() => window.reliability);
  // Every connection the page opens, so that the test can close them from outside.
  await page.evaluate(() => {
    window.connections = [];
    const open = IDBFactory.prototype.open;
    IDBFactory.prototype.open = function (...args) {
      const request = open.apply(this, args);
      request.addEventListener("success", () => window.connections.push(request.result));
      return request;
    };
  });
  await page.evaluate(() => window.reliability.open("faults"));
  await page.evaluate(() => window.reliability.ingest(0, 5));
  const snapshot = () => page.evaluate(async () => {
    const s = await window.reliability.stored();
    return { turns: s.stats.turns, units: s.stats.units, doc: JSON.stringify(s.doc.sessions) };
  });
  /** Runs `fault` (which arms it), then one addMessages: its error code, or null. */
  const addUnder = (i) => page.evaluate(async (n) => {
    try {
      await window.reliability.ingest(n, n + 1);
      return null;
    } catch (e) {
      return e.code ?? String(e);
    }
  }, i);
  const check = async (name, arm, disarm, want) => {
    const before = await snapshot();
    await arm();
    report.faults_injected++;
    const code = await addUnder(100 + report.faults_injected);
    await disarm();
    const during = await snapshot();
    console.log(`${name}: ${code ?? "no error"}`);
    if (want) {
      assert.equal(code, want, `${name}: a typed error`);
      report.faults_typed++;
      assert.deepEqual(during, before, `${name}: nothing stored, nothing changed`);
    } else {
      assert.equal(code, null, `${name}: recovered without an error`);
      assert.equal(during.turns, before.turns + 2, `${name}: the write is stored`);
    }
    // The next operation succeeds.
    assert.equal(await addUnder(200 + report.faults_injected), null, `${name}: the next addMessages succeeds`);
    report.faults_recovered++;
  };

  await check("a write transaction aborts", () => page.evaluate(abortTheNextPut),
    () => page.evaluate(() => window.restorePut()), "STORAGE_FAILED");

  await check("the connection is closed under the memory", () => page.evaluate(() => {
    for (const c of window.connections) c.close();
  }), async () => {}, null);

  // What was acknowledged is what a reopen finds.
  const live = await snapshot();
  await page.evaluate(() => window.reliability.close());
  await page.evaluate(() => window.reliability.open("faults"));
  assert.deepEqual(await snapshot(), live, "a reopen finds exactly the acknowledged writes");
  await page.evaluate(() => window.reliability.close());
  await backgroundEmbedScenario(page);
  await quotaScenario();
  console.log("storage faults: ok");
} catch (e) {
  console.error(e);
  failed = true;
} finally {
  if (jsonPath) writeFileSync(jsonPath, JSON.stringify(report, null, 2) + "\n");
  console.log(JSON.stringify(report));
  await context.close().catch(() => {});
  server.close();
  rmSync(profile, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
