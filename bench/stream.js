// When does the chat first hear the answer? The demo's sample conversation in a memory without distillation (so that
// nothing else calls the model), then `answer()` with `onText`: the time to the first text heard against the time to
// the whole answer, for a short question and one whose answer is long; then a stop at the first text heard (the
// demo's Stop button) and the answer asked after it.
import init, { Memory } from "/pkg/loci.js";
import { SAMPLE } from "/www/sample.js";
import { embedder } from "./page-tools.mjs";

const QUESTIONS = [
  ["short", "Who is Maya's physio?"],
  ["long", "Tell me everything you know about Maya's training plan, in detail."],
];

async function heardAnswer(m, question, options = {}) {
  const started = performance.now();
  let first = null;
  let updates = 0;
  const a = await m.answer(question, {
    k: 3, maxTokens: 200, ...options,
    onText: () => { updates++; first ??= performance.now() - started; },
  });
  return { first_ms: first, done_ms: performance.now() - started, updates, chars: a.answer.length, calls: a.spent.calls };
}

window.stream = async ({ llmUrl, model, rounds }) => {
  await init();
  await Memory.deleteDatabase("bench-stream");
  const m = await Memory.open({ name: "bench-stream", embedder, llm: { baseUrl: llmUrl, model, timeoutMs: 600_000 } });
  for (const s of SAMPLE) {
    await m.addMessages(s.messages.map(([speaker, content, time]) => ({ speaker, content, time })), { session: s.session });
  }
  await m.recall("warm-up", { k: 1 }); // the embedder's first run is not the answer's
  const asked = [];
  for (let round = 0; round < rounds; round++) {
    for (const [kind, q] of QUESTIONS) asked.push({ kind, round, ...(await heardAnswer(m, q)) });
  }
  const stop = new AbortController();
  const started = performance.now();
  let stopped;
  try {
    await m.answer(QUESTIONS[1][1], { k: 3, maxTokens: 200, signal: stop.signal, onText: () => stop.abort() });
    stopped = { code: "not stopped" };
  } catch (e) {
    stopped = { code: e.code, ms: performance.now() - started };
  }
  const afterStop = await heardAnswer(m, QUESTIONS[0][1]);
  await m.close();
  return { asked, stopped, afterStop };
};
