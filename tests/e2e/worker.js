// A memory inside a module worker: open (onnxruntime-web loaded without eval), remember, recall; reports the result
// and every CSP violation the worker saw.
import init, { Memory } from "/pkg/loci.js";

const violations = [];
self.addEventListener("securitypolicyviolation", (e) => violations.push(`${e.violatedDirective} ${e.blockedURI}`));
try {
  await init();
  await Memory.deleteDatabase("e2e-worker");
  const memory = await Memory.open({ name: "e2e-worker", embedder: { device: "wasm",
    modelUrl: "/www/assets/model/model.onnx", tokenizerUrl: "/www/assets/model/tokenizer.json", ortUrl: "/www/assets/ort/" } });
  await memory.addMessages([{ role: "user", content: "My physio is Dr. Okafor, she fixed my knee." },
    { role: "assistant", content: "Good to hear the knee is better." }], { session: "knee" });
  await memory.addMessages([{ role: "user", content: "We baked sourdough bread on Sunday." }], { session: "bread" });
  const recall = await memory.recall("Who is my physio?", { k: 1 });
  await memory.close();
  self.postMessage({ top: recall.sessions[0].id, violations });
} catch (e) {
  self.postMessage({ error: String(e && e.message || e), violations });
}
