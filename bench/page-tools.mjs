// Shared by the benchmark pages: the self-hosted model files, and latency summaries.

/** `Memory.open`'s `embedder` for pages served by scripts/serve.mjs (WASM: the same device on every machine). */
export const embedder = { device: "wasm", modelUrl: "/www/assets/model/model.onnx",
  tokenizerUrl: "/www/assets/model/tokenizer.json", ortUrl: "/www/assets/ort/" };

export const quantile = (xs, q) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
};

export const summary = (xs) => ({ p50: quantile(xs, 0.5), p95: quantile(xs, 0.95), n: xs.length });

/** Milliseconds `f` took. */
export async function timed(f) {
  const t = performance.now();
  await f();
  return performance.now() - t;
}
