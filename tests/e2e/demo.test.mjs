// End-to-end: the demo page in headless Chromium (Debian's, driven by playwright-core; no browser download).
// Loads the demo, loads the sample, asks, reloads, asks again: the memory persisted in IndexedDB. Also checks that
// memory text renders inert (never as HTML) and that nothing but same-origin requests leave the page.
import { chromium } from "playwright-core";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { serve } from "../../scripts/serve.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const shots = join(root, "docs", "screenshots");
mkdirSync(shots, { recursive: true });

const server = await serve(0);
const origin = `http://127.0.0.1:${server.address().port}`;
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-quic"],
});
let failed = false;
try {
  const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
  const page = await context.newPage();
  const requests = [];
  page.on("request", (r) => requests.push(r.url()));
  page.on("pageerror", (e) => console.error("page error:", e.message));
  page.on("console", (m) => { if (m.type() === "error") console.error("console:", m.text()); });
  page.on("dialog", (d) => d.accept());

  await page.goto(`${origin}/www/`);
  await page.waitForFunction(() => window.loci && window.loci.memory, null, { timeout: 60_000 });
  await page.evaluate(() => window.loci.memory.forgetAll());
  await page.reload();
  await page.waitForFunction(() => window.loci && window.loci.memory, null, { timeout: 60_000 });
  assert.match(await page.textContent("#status"), /Ready: embedding on wasm/);

  await page.click("#load-sample");
  await page.waitForFunction(() => document.querySelector("#status").textContent.startsWith("Sample loaded"), null, { timeout: 60_000 });
  await page.fill("#query", "Who is Maya's physio?");
  await page.click("#ask-form button[type=submit]");
  await page.waitForFunction(() => document.querySelector("#status").textContent.startsWith("Recalled"));
  const first = await page.textContent("#results li:first-child strong");
  assert.equal(first, "2024-04-14-marathon");
  await page.screenshot({ path: join(shots, "recall.png"), fullPage: true });

  // Reload: the memory comes back from IndexedDB.
  await page.reload();
  await page.waitForFunction(() => window.loci && window.loci.memory, null, { timeout: 60_000 });
  assert.match(await page.textContent("#stats"), /^4 sessions · 16 turns/);
  await page.fill("#query", "Which starch should she try for the cheese bread?");
  await page.click("#ask-form button[type=submit]");
  await page.waitForFunction(() => document.querySelector("#status").textContent.startsWith("Recalled"));
  assert.equal(await page.textContent("#results li:first-child strong"), "2024-05-20-cooking");
  assert.match(await page.textContent("#results li:first-child"), /polvilho azedo/);

  // Stored markup renders as text.
  await page.fill("#session", "xss");
  await page.fill("#message", `<img src=x onerror="window.__pwned=1"> my cat is called <b>Biscuit</b>`);
  await page.click("#add-form button[type=submit]");
  await page.waitForFunction(() => document.querySelector("#status").textContent.startsWith("Stored"));
  await page.fill("#query", "What is my cat called?");
  await page.click("#ask-form button[type=submit]");
  await page.waitForFunction(() => document.querySelector("#status").textContent.startsWith("Recalled"));
  assert.match(await page.textContent("#results"), /<img src=x onerror=/, "the markup is shown as text");
  assert.equal(await page.locator("#results img").count(), 0, "no element was created from memory text");
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  await page.screenshot({ path: join(shots, "inert-markup.png"), fullPage: true });

  const foreign = requests.filter((u) => !u.startsWith(origin) && !u.startsWith("data:") && !u.startsWith("blob:"));
  assert.deepEqual(foreign, [], "nothing leaves the page");
  console.log(`e2e demo: ok (${requests.length} requests, all same-origin)`);
} catch (e) {
  failed = true;
  console.error(e);
  try { console.error("status:", await browser.contexts()[0].pages()[0].textContent("#status")); } catch {}
} finally {
  await browser.close();
  server.close();
}
process.exit(failed ? 1 : 0);
