#!/usr/bin/env node
// `node bench/profile-open.mjs [UNITS] [REPS]` (after `npm run bench`, which builds bench/pkg): where a cold
// `Memory.open` of UNITS synthetic units (default 100,000) spends its time. Populates a database in headless
// Chromium, times REPS cold opens (default 5, a fresh page each; median), then records one more with the V8 CPU
// profiler (Chrome DevTools Protocol) and prints the functions with the most self time, wasm and JS alike. Function
// names need a wasm with its name section (wasm-opt strips it: run wasm-bindgen on the cargo output without it).
import { localBrowser } from "./local-browser.mjs";
import { benchPage, profiled, selfTimes } from "./profile-tools.mjs";

const units = Number(process.argv[2] || 100_000);
const reps = Number(process.argv[3] || 5);
const { origin, browser, close } = await localBrowser();
try {
  const { page, fresh, call } = await benchPage(browser, origin);
  const name = `profile-${units}`;
  await fresh();
  await call("populate", name, units);
  const times = { ready: [], indexed: [] };
  for (let i = 0; i < reps; i++) {
    await fresh();
    const o = await call("open", name);
    times.ready.push(o.storageMs);
    times.indexed.push(o.indexedMs);
    await call("close");
  }
  for (const [what, t] of Object.entries(times)) {
    t.sort((a, b) => a - b);
    console.log(`cold open of ${units} units, storage to ${what}: median ${t[t.length >> 1].toFixed(0)} ms of ${t.map((x) => x.toFixed(0)).join(", ")}`);
  }
  await fresh();
  const [opened, profile] = await profiled(page, 200, () => call("open", name));
  await call("close");
  await call("deleteDatabase", name);

  const { total, top } = selfTimes(profile);
  console.log(`open of ${units} units: ${opened.storageMs.toFixed(0)} ms from storage to ready; profile ${total.toFixed(0)} ms`);
  for (const [f, ms] of top.slice(0, 30)) {
    console.log(`${ms.toFixed(1).padStart(8)} ms  ${(100 * ms / total).toFixed(1).padStart(5)}%  ${f.slice(0, 110)}`);
  }
} finally {
  await close();
}
