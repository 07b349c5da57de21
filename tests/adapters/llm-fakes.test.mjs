// `fromWebLLM` and `fromPromptApi` (loci/llm) against fakes that behave as the runtimes are documented to, since
// neither runs here (WebLLM needs WebGPU; Chrome's built-in model is not in Debian's Chromium):
// - WebLLM 0.2.x (`@mlc-ai/web-llm`, its `MLCEngineInterface` and `ChatCompletionRequest` types and the checks of
//   its `postInitAndCheckFields`): `engine.chat.completions.create(request)` with `stream: true` resolves to an
//   async iterable of `chat.completion.chunk`s (`choices[0].delta.content`), then a chunk with `finish_reason`, then
//   with `stream_options.include_usage` a chunk with no choices and `usage` (`extra.prefill_tokens_per_s`,
//   `extra.decode_tokens_per_s`); a system message anywhere but first throws `SystemMessageOrderError`, a last message
//   not from the user `MessageOrderError`, `stream_options` without `stream` `InvalidStreamOptionsError`;
//   `response_format: { type: "json_object", schema: string }`; `interruptGenerate()` ends the stream with
//   `finish_reason: "abort"`; a prompt over `context_window_size` throws `ContextWindowSizeExceededError`. The window
//   is in `chatOpts` (a web worker engine keeps what `reload` got) or the model's record in the app config.
// - The Prompt API (webmachinelearning/prompt-api, Chrome's `LanguageModel`): `availability()`; `create({
//   initialPrompts, monitor, signal })` where a system message may only come first (else a TypeError) and `monitor`
//   hears `downloadprogress` events (`loaded`, 0–1); `promptStreaming(input, { signal, responseConstraint })` is a
//   ReadableStream of text pieces, refusing a system message (`NotSupportedError`) and erroring with a
//   `QuotaExceededError` over the window; `contextWindow` (`inputQuota` before Chrome renamed it); `clone()`,
//   `destroy()`.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { fromPromptApi, fromWebLLM, fromWllama } from "../../adapters/llm.js";

const words = (messages) => messages.map((m) => (typeof m === "string" ? m : m.content)).join(" ").split(/\s+/).filter(Boolean).length;
const named = (name, message) => Object.assign(new Error(message), { name });
const tick = () => new Promise((ok) => setTimeout(ok, 2));

/** A WebLLM engine as its docs and checks describe it; `reply` is what the model writes. */
function fakeWebLLM({ reply = "Biscuit.", contextWindow = 4096, worker = false, finish = "stop" } = {}) {
  const engine = {
    requests: [],
    interrupted: 0,
    interruptGenerate() { engine.interrupted++; engine.stop = true; },
    chat: { completions: { create: async (request) => {
      engine.requests.push(structuredClone(request));
      request.messages.forEach((m, i) => { if (m.role === "system" && i !== 0) throw named("SystemMessageOrderError", "System prompt should always be the first message in `messages`."); });
      if (request.messages.at(-1).role !== "user") throw named("MessageOrderError", "Last message should be from either `user` or `tool`.");
      if (request.stream_options && !request.stream) throw named("InvalidStreamOptionsError", "Only specify stream_options when stream=True.");
      if (request.response_format?.schema !== undefined && typeof request.response_format.schema !== "string") {
        throw named("InvalidResponseFormatError", "JSON schema must be a string");
      }
      if (!request.stream) throw new Error("the fake streams only");
      engine.stop = false;
      const base = { id: "chatcmpl-1", model: "SmolLM2-360M-Instruct-q4f16_1-MLC", object: "chat.completion.chunk", created: 1 };
      return (async function* generate() {
        const prompt = words(request.messages);
        // WebLLM prefills inside the generator: the error comes with the first chunk.
        if (prompt > contextWindow) throw named("ContextWindowSizeExceededError", `Prompt tokens exceed context window size: number of prompt tokens: ${prompt}; context window size: ${contextWindow}`);
        let written = 0;
        let reason = finish;
        for (const piece of reply.match(/.{1,3}/gs) ?? []) {
          await tick();
          if (engine.stop) { reason = "abort"; break; }
          written++;
          yield { ...base, choices: [{ index: 0, delta: { role: "assistant", content: piece }, finish_reason: null, logprobs: null }] };
        }
        yield { ...base, choices: [{ index: 0, delta: {}, finish_reason: reason, logprobs: null }] };
        if (request.stream_options?.include_usage) {
          yield { ...base, choices: [], usage: { prompt_tokens: prompt, completion_tokens: written, total_tokens: prompt + written,
            extra: { prefill_tokens_per_s: 321.5, decode_tokens_per_s: 45.25, e2e_latency_s: 0.1, time_to_first_token_s: 0.05 } } };
        }
      })();
    } } },
  };
  if (worker) {
    // A WebWorkerMLCEngine keeps the modelId and chatOpts it was reloaded with.
    engine.modelId = ["SmolLM2-360M-Instruct-q4f16_1-MLC"];
    engine.chatOpts = [{ context_window_size: contextWindow }];
  } else {
    // An MLCEngine keeps its app config (prebuiltAppConfig unless given one), whose records set the window.
    engine.appConfig = { model_list: [
      { model_id: "Llama-3.2-1B-Instruct-q4f16_1-MLC", overrides: { context_window_size: 4096 } },
      { model_id: "SmolLM2-360M-Instruct-q4f16_1-MLC", overrides: { context_window_size: contextWindow } },
    ] };
    engine.modelId = undefined;
  }
  return engine;
}

/** Chrome's `LanguageModel` as the Prompt API describes it. */
function fakeLanguageModel({ availability = "available", contextWindow = 6144, legacyQuota = false, reply = "Biscuit" } = {}) {
  const log = { created: [], prompts: [], destroyed: 0, downloads: 0 };
  const makeSession = (initialPrompts) => {
    const session = {
      destroyed: false,
      initialPrompts,
      contextUsage: words(initialPrompts),
      promptStreaming(input, options = {}) {
        if (session.destroyed) throw new DOMException("The session was destroyed.", "InvalidStateError");
        const list = typeof input === "string" ? [{ role: "user", content: input }] : input;
        if (list.some((m) => m.role === "system")) throw new DOMException("system role is only allowed in initialPrompts", "NotSupportedError");
        log.prompts.push({ input: structuredClone(input), responseConstraint: options.responseConstraint, hasSignal: !!options.signal });
        const needed = session.contextUsage + words(list);
        const pieces = (options.responseConstraint ? JSON.stringify({ answer: reply }) : reply).match(/.{1,2}/gs);
        return new ReadableStream({
          async pull(controller) {
            if (needed > (legacyQuota ? session.inputQuota : session.contextWindow)) {
              return controller.error(new DOMException("The input is too large.", "QuotaExceededError"));
            }
            await tick();
            if (options.signal?.aborted) return controller.error(new DOMException("aborted", "AbortError"));
            const piece = pieces.shift();
            if (piece === undefined) controller.close();
            else controller.enqueue(piece); // deltas, as Chrome streams since the spec changed from whole texts
          },
        });
      },
      async clone(options = {}) {
        if (options.signal?.aborted) throw new DOMException("aborted", "AbortError");
        const copy = makeSession(session.initialPrompts);
        log.created.push({ clone: true, initialPrompts: copy.initialPrompts });
        return copy;
      },
      destroy() { session.destroyed = true; log.destroyed++; },
    };
    if (legacyQuota) session.inputQuota = contextWindow;
    else session.contextWindow = contextWindow;
    return session;
  };
  const factory = {
    log,
    async availability() { return availability; },
    async create(options = {}) {
      if (options.signal?.aborted) throw new DOMException("aborted", "AbortError");
      const prompts = options.initialPrompts ?? [];
      prompts.forEach((m, i) => { if (m.role === "system" && i !== 0) throw new TypeError("A system prompt may only be the first of initialPrompts."); });
      if (availability === "downloadable" && options.monitor) {
        const monitor = new EventTarget();
        options.monitor(monitor);
        for (const loaded of [0, 0.5, 1]) monitor.dispatchEvent(Object.assign(new Event("downloadprogress"), { loaded }));
        log.downloads++;
      }
      log.created.push({ initialPrompts: structuredClone(prompts), expectedInputs: options.expectedInputs });
      return makeSession(prompts);
    },
  };
  return factory;
}

async function rejection(fn) {
  try {
    await fn();
    return "did not throw";
  } catch (e) {
    return `${e?.name}/${e?.code}`;
  }
}

const SCHEMA = { type: "object", required: ["answer"], properties: { answer: { type: "string" } } };
// loci's messages as an answer sends them: its system rule, then the fenced memory and the question.
const ANSWER = [
  { role: "system", content: "You answer questions about past conversations using only the memory you are given." },
  { role: "user", content: "<memory>\nuser: My dog's name is Biscuit.\n</memory>\n\nQuestion: What is my dog's name?" },
];

describe("fromWebLLM", () => {
  it("reads the window from the model's record, or from a web worker engine's chatOpts", () => {
    assert.equal(fromWebLLM(fakeWebLLM({ contextWindow: 2048 }), { model: "SmolLM2-360M-Instruct-q4f16_1-MLC" }).contextTokens, 2048);
    // Without `model`, the engine's first loaded model (here the app config's first record: an MLCEngine keeps no
    // loaded ids of its own, so a record is found only by `model` or `appConfig`).
    assert.equal(fromWebLLM(fakeWebLLM({ contextWindow: 1024, worker: true })).contextTokens, 1024);
    assert.equal(fromWebLLM(fakeWebLLM({ contextWindow: 2048 }), { contextTokens: 1536, model: "SmolLM2-360M-Instruct-q4f16_1-MLC" }).contextTokens, 1536);
    const own = { model_list: [{ model_id: "custom", overrides: { context_window_size: 8192 } }] };
    assert.equal(fromWebLLM(fakeWebLLM(), { model: "custom", appConfig: own }).contextTokens, 8192);
  });

  it("refuses what it cannot use, with loci's INVALID_INPUT", async () => {
    assert.equal(await rejection(() => fromWebLLM({})), "LociError/INVALID_INPUT");
    assert.equal(await rejection(() => fromWebLLM(fakeWebLLM(), { model: "unknown-model" })), "LociError/INVALID_INPUT", "no window to read");
    assert.equal(await rejection(() => fromWebLLM(fakeWebLLM({ worker: true, contextWindow: 2048 }), { contextTokens: 4096 })), "LociError/INVALID_INPUT");
    assert.equal(await rejection(() => fromWebLLM(fakeWebLLM({ worker: true }), { contextTokens: 100 })), "LociError/INVALID_INPUT");
    assert.equal(await rejection(() => fromWebLLM(fakeWebLLM({ worker: true }), { context: 100 })), "LociError/INVALID_INPUT");
    assert.equal(await rejection(() => fromWebLLM(fakeWebLLM({ worker: true }), { onStats: 1 })), "LociError/INVALID_INPUT");
  });

  it("streams a chat completion in WebLLM's shape: one system message first, JSON with the schema as a string, usage", async () => {
    const engine = fakeWebLLM({ worker: true, reply: '{"answer": "Biscuit"}' });
    const stats = [];
    const llm = fromWebLLM(engine, { onStats: (s) => stats.push(s) });
    const heard = [];
    const reply = await llm({
      messages: [{ role: "system", content: "Rule one." }, ...ANSWER],
      json: true, schema: SCHEMA, maxTokens: 64, temperature: 0, frequencyPenalty: 0.5, onText: (t) => heard.push(t),
    });
    const [sent] = engine.requests;
    // The usage is the engine's (the fake counts words): passed on, not estimated.
    assert.deepEqual(reply, { text: '{"answer": "Biscuit"}', usage: { inputTokens: words(sent.messages), outputTokens: 7 }, finishReason: "stop" });
    assert.ok(heard.length > 2 && heard.at(-1) === reply.text && heard.every((t) => reply.text.startsWith(t)), JSON.stringify(heard));
    assert.deepEqual(sent.messages.map((m) => m.role), ["system", "user"]);
    assert.equal(sent.messages[0].content, `Rule one.\n\n${ANSWER[0].content}`);
    assert.equal(sent.stream, true);
    assert.deepEqual(sent.stream_options, { include_usage: true });
    assert.deepEqual(sent.response_format, { type: "json_object", schema: JSON.stringify(SCHEMA) });
    assert.equal(sent.max_tokens, 64);
    assert.equal(sent.temperature, 0);
    assert.equal(sent.frequency_penalty, 0.5);
    assert.equal(sent.model, undefined, "one loaded model: none named");
    assert.equal(stats.length, 1);
    assert.equal(stats[0].outputTokensPerSecond, 45.25, "WebLLM's own decode speed");
    assert.equal(stats[0].promptTokensPerSecond, 321.5);
    assert.equal(stats[0].json, true);
    // Plain text: no response_format; JSON without a schema: json_object alone.
    await llm({ messages: ANSWER, json: false });
    assert.equal(engine.requests[1].response_format, undefined);
    await llm({ messages: ANSWER, json: true });
    assert.deepEqual(engine.requests[2].response_format, { type: "json_object" });
  });

  it("names the model when one of several is asked for, and passes a reply cut at its cap on as 'length'", async () => {
    const engine = fakeWebLLM({ finish: "length" });
    const llm = fromWebLLM(engine, { model: "SmolLM2-360M-Instruct-q4f16_1-MLC" });
    const reply = await llm({ messages: ANSWER, json: false, maxTokens: 4 });
    assert.equal(reply.finishReason, "length");
    assert.equal(engine.requests[0].model, "SmolLM2-360M-Instruct-q4f16_1-MLC");
  });

  it("interrupts the generation when loci aborts, and does not start when already aborted", async () => {
    const engine = fakeWebLLM({ worker: true, reply: "A long reply that goes on and on and on. ".repeat(20) });
    const llm = fromWebLLM(engine);
    const controller = new AbortController();
    const heard = [];
    const call = llm({ messages: ANSWER, json: false, signal: controller.signal, onText: (t) => {
      heard.push(t);
      if (heard.length === 3) controller.abort();
    } });
    const reply = await call; // WebLLM ends an interrupted stream quietly; loci hears the abort on its own signal
    assert.equal(engine.interrupted, 1);
    assert.ok(reply.text.length < 40, reply.text);
    assert.equal(reply.finishReason, undefined, "an interrupted reply is not passed on as finished");
    assert.equal(await rejection(() => llm({ messages: ANSWER, json: false, signal: controller.signal })), "AbortError/20");
    assert.equal(engine.requests.length, 1, "an aborted call never reaches the engine");
  });

  it("reports a prompt over the window as loci's LLM_CONTEXT_EXCEEDED (loci then sends it smaller)", async () => {
    const llm = fromWebLLM(fakeWebLLM({ worker: true, contextWindow: 600 }));
    const long = [{ role: "user", content: "word ".repeat(700) }];
    assert.equal(await rejection(() => llm({ messages: long, json: false })), "LociError/LLM_CONTEXT_EXCEEDED");
    // Any other failure is passed on as it is (loci reports it as LLM_UNAVAILABLE).
    assert.equal(await rejection(() => llm({ messages: [ANSWER[1], { role: "assistant", content: "x" }], json: false })), "MessageOrderError/undefined");
  });
});

describe("fromPromptApi", () => {
  it("reads the window from a first session (contextWindow, or inputQuota before the rename) and destroys it", async () => {
    const lm = fakeLanguageModel({ contextWindow: 6144 });
    assert.equal((await fromPromptApi(lm)).contextTokens, 6144);
    assert.equal(lm.log.destroyed, 1, "the probe session is destroyed");
    assert.equal((await fromPromptApi(fakeLanguageModel({ contextWindow: 4096, legacyQuota: true }))).contextTokens, 4096);
    assert.equal((await fromPromptApi(fakeLanguageModel(), { contextTokens: 2048 })).contextTokens, 2048);
  });

  it("reports the model's download, and refuses an unavailable model with UNSUPPORTED", async () => {
    const progress = [];
    const lm = fakeLanguageModel({ availability: "downloadable" });
    await fromPromptApi(lm, { onDownloadProgress: (p) => progress.push(p), createOptions: { expectedInputs: [{ type: "text", languages: ["en"] }] } });
    assert.deepEqual(progress, [0, 0.5, 1]);
    assert.deepEqual(lm.log.created[0].expectedInputs, [{ type: "text", languages: ["en"] }]);
    assert.equal(await rejection(() => fromPromptApi(fakeLanguageModel({ availability: "unavailable" }))), "LociError/UNSUPPORTED");
    assert.equal(await rejection(() => fromPromptApi({})), "LociError/INVALID_INPUT");
    assert.equal(await rejection(() => fromPromptApi(fakeLanguageModel(), { contextTokens: 10_000 })), "LociError/INVALID_INPUT");
    assert.equal(await rejection(() => fromPromptApi(fakeLanguageModel(), { monitor: () => {} })), "LociError/INVALID_INPUT");
  });

  it("prompts a fresh session per call: the system message first in initialPrompts, the last message streamed", async () => {
    const lm = fakeLanguageModel();
    const stats = [];
    const llm = await fromPromptApi(lm, { onStats: (s) => stats.push(s) });
    const heard = [];
    const history = [...ANSWER.slice(0, 1), { role: "user", content: "Hi" }, { role: "assistant", content: "Hello!" }, ANSWER[1]];
    const reply = await llm({ messages: history, json: true, schema: SCHEMA, onText: (t) => heard.push(t) });
    assert.equal(reply.text, '{"answer":"Biscuit"}');
    assert.ok(heard.length > 2 && heard.at(-1) === reply.text, JSON.stringify(heard));
    const session = lm.log.created.at(-1);
    assert.deepEqual(session.initialPrompts.map((m) => m.role), ["system", "user", "assistant"]);
    const prompt = lm.log.prompts.at(-1);
    assert.deepEqual(prompt.input, [ANSWER[1]]);
    assert.deepEqual(prompt.responseConstraint, SCHEMA);
    assert.equal(lm.log.destroyed, 2, "the probe and the call's session are destroyed");
    assert.equal(stats.length, 1);
    assert.equal(stats[0].promptTokens, null, "the Prompt API does not count tokens");
    // JSON without a schema: any object; plain text: no constraint.
    await llm({ messages: ANSWER, json: true });
    assert.deepEqual(lm.log.prompts.at(-1).responseConstraint, { type: "object" });
    await llm({ messages: ANSWER, json: false });
    assert.equal(lm.log.prompts.at(-1).responseConstraint, undefined);
  });

  it("given a session, prompts a clone of it, loci's system text before the first user message", async () => {
    const lm = fakeLanguageModel();
    const base = await lm.create({ initialPrompts: [{ role: "system", content: "You are Pip, a cheerful assistant." }] });
    const llm = await fromPromptApi(base);
    assert.equal(llm.contextTokens, 6144);
    const reply = await llm({ messages: ANSWER, json: false });
    assert.equal(reply.text, "Biscuit");
    assert.equal(lm.log.created.at(-1).clone, true);
    const [first] = lm.log.prompts.at(-1).input;
    assert.equal(first.role, "user");
    assert.ok(first.content.startsWith(`${ANSWER[0].content}\n\n<memory>`), first.content);
    assert.equal(base.destroyed, false, "the app's own session is left as it was");
  });

  it("reports the quota exceeded as LLM_CONTEXT_EXCEEDED, and stops on abort", async () => {
    const lm = fakeLanguageModel({ contextWindow: 600 });
    const llm = await fromPromptApi(lm);
    assert.equal(await rejection(() => llm({ messages: [{ role: "user", content: "word ".repeat(700) }], json: false })), "LociError/LLM_CONTEXT_EXCEEDED");
    const controller = new AbortController();
    const call = llm({ messages: ANSWER, json: false, signal: controller.signal, onText: () => controller.abort() });
    assert.equal(await rejection(() => call), "AbortError/20");
    assert.equal(lm.log.prompts.at(-1).hasSignal, true);
    assert.equal(lm.log.destroyed, 3, "every call's session is destroyed, failed or not");
  });
});

describe("fromWllama (its checks; the model itself runs in tests/adapters/llm.test.mjs)", () => {
  const loaded = (nCtx) => ({ createChatCompletion: async () => {}, getLoadedContextInfo: () => ({ n_ctx: nCtx }), isModelLoaded: () => true });
  it("takes the loaded context's n_ctx as the window, and refuses a larger one", async () => {
    assert.equal(fromWllama(loaded(2048)).contextTokens, 2048);
    assert.equal(fromWllama(loaded(2048), { contextTokens: 1024 }).contextTokens, 1024);
    assert.equal(await rejection(() => fromWllama(loaded(2048), { contextTokens: 4096 })), "LociError/INVALID_INPUT");
    assert.equal(await rejection(() => fromWllama(loaded(256))), "LociError/INVALID_INPUT", "under loci's 512");
    assert.equal(await rejection(() => fromWllama({ ...loaded(2048), isModelLoaded: () => false })), "LociError/INVALID_INPUT");
  });
});
