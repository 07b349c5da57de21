// What tests/adapters/llm.test.mjs drives in the page (bundled with esbuild; loci itself is loaded from
// /pkg/loci.js): `fromWllama` over the real @wllama/wllama with a real GGUF model (SmolLM2-135M-Instruct, served
// from www/assets/llm/ as the demo serves it), on real memories (IndexedDB, the in-page embedder).
import { Wllama } from "@wllama/wllama";
import init, { Memory } from "../../pkg/loci.js";
import { fromWllama } from "../../adapters/llm.js";

const embedder = { device: "wasm", modelUrl: "/www/assets/model/model.onnx",
  tokenizerUrl: "/www/assets/model/tokenizer.json", ortUrl: "/www/assets/ort/" };
const GGUF = "/www/assets/llm/SmolLM2-135M-Instruct.Q4_1.gguf";
const N_CTX = 2048;
const DAY = 86_400_000;
const T0 = Date.UTC(2025, 4, 6, 18, 0);
const ASKED = T0 + 3 * DAY; // a fixed question date: the same prompt, so the same greedy answer, on any day
let wllama;
let llm;
const stats = [];

/** What a call that must fail threw: its name and code (or "did not throw"). */
async function rejection(fn) {
  try {
    await fn();
    return "did not throw";
  } catch (e) {
    return `${e?.name}/${e?.code}`;
  }
}

window.llmTest = {
  async load() {
    await init();
    const started = performance.now();
    const progress = [];
    wllama = new Wllama({ default: "/www/assets/wllama/wllama.wasm" }, { suppressNativeLog: true });
    // Off the CDN: wllama's fallback for browsers without JSPI/memory64 would fetch its compat build from one.
    wllama.setCompat(null);
    await wllama.loadModelFromUrl(GGUF, {
      n_ctx: N_CTX, n_threads: 1, n_gpu_layers: 0, useCache: false,
      progressCallback: ({ loaded, total }) => progress.push(total ? loaded / total : 0),
    });
    const loadMs = performance.now() - started;
    llm = fromWllama(wllama, { onStats: (s) => stats.push(s) });
    return {
      loadMs, contextTokens: llm.contextTokens, threads: wllama.getNumThreads(),
      progressEvents: progress.length, lastProgress: progress.at(-1),
      errors: {
        notLoaded: await rejection(() => fromWllama(new Wllama({ default: "/www/assets/wllama/wllama.wasm" }))),
        notAWllama: await rejection(() => fromWllama({})),
        tooLarge: await rejection(() => fromWllama(wllama, { contextTokens: N_CTX * 2 })),
        tooSmall: await rejection(() => fromWllama(wllama, { contextTokens: 100 })),
        unknownOption: await rejection(() => fromWllama(wllama, { nCtx: 1024 })),
      },
    };
  },

  /** A short chat over two sessions: the first tells a fact (the model replies through the helper, streamed), the
   * second asks for it through `memory.answer()`. A control memory without the first session is asked the same. */
  async chat() {
    const memory = await Memory.open({ name: "llm-test", embedder });
    await memory.forgetAll();
    memory.setLlm(llm);
    const first = "I adopted a puppy last week. My dog's name is Biscuit.";
    const heard = [];
    const replyStarted = performance.now();
    const reply = await llm({
      messages: [{ role: "system", content: "You are a friendly assistant. Reply in one short sentence." },
        { role: "user", content: first }],
      json: false, maxTokens: 40, temperature: 0, onText: (t) => heard.push(t),
    });
    const replyMs = performance.now() - replyStarted;
    await memory.addMessages([
      { role: "user", content: first, time: T0 },
      { role: "assistant", content: reply.text, time: T0 + 60_000 },
    ], { session: "puppy" });
    await memory.addMessages([
      { role: "user", content: "The weather was rainy all weekend, so I stayed home and read a novel.", time: T0 + DAY },
      { role: "assistant", content: "A quiet weekend with a book sounds lovely.", time: T0 + DAY + 60_000 },
    ], { session: "weekend" });
    const question = "What is my dog's name?";
    const answerStarted = performance.now();
    const streamed = [];
    const answer = await memory.answer(question, { k: 2, prune: "extractive", questionTime: ASKED, onText: (t) => streamed.push(t) });
    const answerMs = performance.now() - answerStarted;

    // The control: the same question to a memory that never heard of the dog.
    const control = await Memory.open({ name: "llm-test-control", embedder });
    await control.forgetAll();
    control.setLlm(llm);
    await control.addMessages([
      { role: "user", content: "The weather was rainy all weekend, so I stayed home and read a novel.", time: T0 + DAY },
      { role: "assistant", content: "A quiet weekend with a book sounds lovely.", time: T0 + DAY + 60_000 },
    ], { session: "weekend" });
    const controlAnswer = await control.answer(question, { k: 2, prune: "extractive", questionTime: ASKED });
    const llmStats = (await memory.stats()).llm.answer;
    await control.close();
    await memory.close();
    return {
      reply: reply.text, replyUsage: reply.usage, replyFinish: reply.finishReason ?? null, heard: heard.length,
      heardLast: heard.at(-1) ?? null, replyMs,
      answer: answer.answer, answerContext: answer.context, answerSessions: answer.sessions.map((s) => s.id),
      streamed: streamed.length, answerMs, answerStats: llmStats,
      controlAnswer: controlAnswer.answer, controlContext: controlAnswer.context,
      stats,
    };
  },

  /** The helper's own failures: a prompt over the loaded context is loci's LLM_CONTEXT_EXCEEDED (loci then sends it
   * smaller), and an aborted call stops (loci reports ABORTED). */
  async failures() {
    const long = Array.from({ length: 400 }, (_, i) => `Line ${i}: the harbour crate holds ${i * 7} lanterns.`).join("\n");
    const overflow = await rejection(() => llm({ messages: [{ role: "user", content: long }], json: false, maxTokens: 8 }));
    const controller = new AbortController();
    const started = performance.now();
    const pending = llm({ messages: [{ role: "user", content: "Count from one to two hundred, in words." }], json: false,
      maxTokens: 400, signal: controller.signal });
    setTimeout(() => controller.abort(), 1_500);
    let aborted;
    try {
      await pending;
      aborted = "did not throw";
    } catch (e) {
      aborted = e?.name;
    }
    // After an abort the model still answers the next call.
    const after = await llm({ messages: [{ role: "user", content: "Say hello." }], json: false, maxTokens: 8 });
    return { overflow, aborted, abortedAfterMs: performance.now() - started, after: after.text };
  },
};
window.ready = true;
