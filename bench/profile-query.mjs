#!/usr/bin/env node
// `node bench/profile-query.mjs [TOKENS] [RUNS] [MODEL]`: where one query embedding spends its time inside
// onnxruntime-web. Loads MODEL (a path in the repository; default the shipped www/assets/model/model.onnx) into a plain onnxruntime-web session in headless
// Chromium (WASM backend, the thread count it picks), runs a TOKENS-long input (default 12, about a question) RUNS
// times (default 20) with its profiler on, and prints the median run and each operator type's time per run over the
// second half of the runs. `THREADS=N` sets onnxruntime-web's thread count (default: its own choice).
import { localBrowser } from "./local-browser.mjs";

const tokens = Number(process.argv[2] || 12);
const runs = Number(process.argv[3] || 20);
const model = `/${process.argv[4] || "www/assets/model/model.onnx"}`;
const threads = process.env.THREADS ? Number(process.env.THREADS) : null;
const { origin, browser, close } = await localBrowser();
try {
  const page = await browser.newPage();
  const lines = [];
  page.on("console", (m) => lines.push(m.text())); // onnxruntime-web prints its profile as JSON lines
  await page.goto(`${origin}/www/assets/model/tokenizer.json`); // any same-origin document without a page script
  const used = await page.evaluate(async ([n, runs, model, threads]) => {
    await new Promise((ok, err) => {
      const s = document.createElement("script");
      s.src = "/www/assets/ort/ort.wasm.min.js";
      s.onload = ok;
      s.onerror = err;
      document.head.append(s);
    });
    ort.env.wasm.wasmPaths = { mjs: "/www/assets/ort/ort-wasm-simd-threaded.mjs", wasm: "/www/assets/ort/ort-wasm-simd-threaded.wasm" };
    if (threads) ort.env.wasm.numThreads = threads;
    const session = await ort.InferenceSession.create(model, { executionProviders: ["wasm"], enableProfiling: true });
    const ids = BigInt64Array.from({ length: n }, (_, i) => (i === 0 ? 101n : i === n - 1 ? 102n : 2000n + BigInt(i)));
    const tensor = (data) => new ort.Tensor("int64", data, [1, n]);
    for (let i = 0; i < runs; i++) {
      await session.run({ input_ids: tensor(ids.slice()), attention_mask: tensor(new BigInt64Array(n).fill(1n)), token_type_ids: tensor(new BigInt64Array(n)) });
    }
    session.endProfiling();
    return ort.env.wasm.numThreads;
  }, [tokens, runs, model, threads]);
  const events = lines.map((l) => l.trim().replace(/,$/, "")).filter((l) => l.startsWith("{")).flatMap((l) => {
    try { return [JSON.parse(l)]; } catch { return []; }
  });
  const modelRuns = events.filter((e) => e.name === "model_run");
  const kept = modelRuns.slice(Math.floor(modelRuns.length / 2));
  const since = kept[0].ts;
  const byOp = new Map();
  for (const e of events) {
    if (e.cat !== "Node" || !e.name.endsWith("_kernel_time") || e.ts < since) continue;
    const op = e.args.op_name;
    const o = byOp.get(op) || { us: 0, nodes: 0 };
    o.us += e.dur;
    o.nodes += 1;
    byOp.set(op, o);
  }
  const durations = kept.map((e) => e.dur).sort((a, b) => a - b);
  const total = [...byOp.values()].reduce((a, o) => a + o.us, 0);
  console.log(`${tokens} tokens, ${used} onnxruntime-web thread(s): median run ${(durations[durations.length >> 1] / 1000).toFixed(2)} ms over the last ${kept.length} runs`);
  console.log("| operator | ms per run | share | nodes |\n|---|---|---|---|");
  for (const [op, o] of [...byOp].sort((a, b) => b[1].us - a[1].us).slice(0, 12)) {
    console.log(`| ${op} | ${(o.us / kept.length / 1000).toFixed(2)} | ${((100 * o.us) / total).toFixed(1)}% | ${o.nodes / kept.length} |`);
  }
} finally {
  await close();
}
process.exit(0);
