#!/usr/bin/env node
// `npm run bench:durability [-- --json PATH] [--rounds N]`
//
// What `durability: "strict"` (loci's default: an acknowledged write is on disk) costs against "relaxed" (Chrome's
// default: handed to the OS): addMessages of one exchange on two memories, alternating call by call in Debian's
// headless Chromium, and a bare IndexedDB put each way as the floor. Prints p50/p95 and the strict/relaxed ratios.
// The browser runs on a profile directory on disk (a persistent context): a fresh Playwright context is incognito,
// whose IndexedDB lives in RAM and never syncs, so the comparison would say nothing.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { persistentBrowser } from "./local-browser.mjs";
import { serve } from "../scripts/serve.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");

const argv = process.argv.slice(2);
const value = (name, d) => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : d; };
const jsonPath = value("--json");
const rounds = Number(value("--rounds", 100));

mkdirSync(join(root, "target"), { recursive: true });
const profile = mkdtempSync(join(root, "target", "bench-profile-"));
const server = await serve(0);
const origin = `http://127.0.0.1:${server.address().port}`;
const context = await persistentBrowser(profile);
let failed = false;
try {
  const page = context.pages()[0] ?? await context.newPage();
  page.on("console", (m) => m.type() === "error" && console.error("[page]", m.text()));
  await page.goto(`${origin}/bench/durability.html`);
  await page.waitForFunction(() => window.durability);
  const r = await page.evaluate((o) => window.durability(o), { rounds });
  const ms = (x) => +x.toFixed(1);
  const ratio = (a, b) => +(a / b).toFixed(2);
  const out = {
    rounds,
    cpus: cpus().length,
    add_messages_p50_ms_strict: ms(r.add.strict.p50),
    add_messages_p95_ms_strict: ms(r.add.strict.p95),
    add_messages_p50_ms_relaxed: ms(r.add.relaxed.p50),
    add_messages_p95_ms_relaxed: ms(r.add.relaxed.p95),
    idb_put_p50_ms_strict: ms(r.raw.strict.p50),
    idb_put_p50_ms_relaxed: ms(r.raw.relaxed.p50),
    add_messages_p50_strict_over_relaxed: ratio(r.add.strict.p50, r.add.relaxed.p50),
    add_messages_p95_strict_over_relaxed: ratio(r.add.strict.p95, r.add.relaxed.p95),
    idb_put_p50_strict_over_relaxed: ratio(r.raw.strict.p50, r.raw.relaxed.p50),
  };
  console.log(`
| ${rounds} rounds | p50 strict | p50 relaxed | p95 strict | p95 relaxed | p50 strict/relaxed |
|---|---|---|---|---|---|
| addMessages, one exchange (ms) | ${out.add_messages_p50_ms_strict} | ${out.add_messages_p50_ms_relaxed} | ${out.add_messages_p95_ms_strict} | ${out.add_messages_p95_ms_relaxed} | ${out.add_messages_p50_strict_over_relaxed} |
| bare IndexedDB put (ms) | ${out.idb_put_p50_ms_strict} | ${out.idb_put_p50_ms_relaxed} | ${ms(r.raw.strict.p95)} | ${ms(r.raw.relaxed.p95)} | ${out.idb_put_p50_strict_over_relaxed} |`);
  console.log(JSON.stringify(out));
  if (jsonPath) writeFileSync(jsonPath, JSON.stringify(out, null, 2) + "\n");
} catch (e) {
  console.error(e);
  failed = true;
} finally {
  await context.close();
  server.close();
  rmSync(profile, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
