// Shared by the profiling scripts (bench/profile-open.mjs, bench/profile-recall.mjs): the bench page in headless
// Chromium, and the V8 CPU profiler's self time per function.

/** Opens bench/index.html in a new page: `fresh()` reloads it, `call(fn, ...args)` runs `window.bench[fn]`. */
export async function benchPage(browser, origin) {
  const page = await browser.newPage();
  const fresh = async () => {
    await page.goto(`${origin}/bench/index.html`);
    await page.waitForFunction(() => window.benchReady === true, null, { timeout: 120_000 });
  };
  const call = (fn, ...args) => page.evaluate(([fn, args]) => window.bench[fn](...args), [fn, args]);
  return { page, fresh, call };
}

/** Runs `f` under the V8 CPU profiler (sampling every `intervalUs`); resolves to [f's result, the profile]. */
export async function profiled(page, intervalUs, f) {
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Profiler.enable");
  await cdp.send("Profiler.setSamplingInterval", { interval: intervalUs });
  await cdp.send("Profiler.start");
  const result = await f();
  const { profile } = await cdp.send("Profiler.stop");
  return [result, profile];
}

/** Self time per function (ms), most first: samples × their time deltas, attributed to the sampled function. */
export function selfTimes(profile) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map();
  profile.samples.forEach((id, i) => {
    const f = byId.get(id).callFrame;
    const key = f.functionName || `(anonymous ${f.url.split("/").pop()}:${f.lineNumber})`;
    self.set(key, (self.get(key) || 0) + (profile.timeDeltas[i] || 0) / 1000);
  });
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  return { total, top: [...self].sort((a, b) => b[1] - a[1]) };
}
