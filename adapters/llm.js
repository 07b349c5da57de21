// `loci/llm`: in-browser models as loci's LLM callback (`memory.setLlm(fn)`), each with its real window as
// `fn.contextTokens` so that loci sizes every prompt to the model. Nothing here loads a model or fetches anything:
// the app loads wllama, WebLLM or Chrome's model its own way and hands the loaded runtime over.
import { checkOptions, invalid, lociError } from "./shared.js";

/** loci refuses a window under this (src/llm/callback.rs): a smaller one cannot hold an answer's prompt. */
const MIN_CONTEXT = 512;

function checkContext(n, where, what) {
  if (!Number.isInteger(n) || n < MIN_CONTEXT) {
    throw invalid(`${where}: ${what} must be an integer of at least ${MIN_CONTEXT} tokens (got ${n})`);
  }
  return n;
}

/** The window given in the options (at most the runtime's, when that is known), else the runtime's. */
function windowOf(options, fromRuntime, where, what) {
  if (options.contextTokens !== undefined) {
    const n = checkContext(options.contextTokens, where, "`contextTokens`");
    if (fromRuntime !== undefined && n > fromRuntime) {
      throw invalid(`${where}: \`contextTokens\` (${n}) is larger than ${what} (${fromRuntime})`);
    }
    return n;
  }
  if (fromRuntime === undefined) {
    throw invalid(`${where}: the model's context window could not be read from the runtime: pass \`contextTokens\``);
  }
  return checkContext(fromRuntime, where, what);
}

function checkCallback(f, where, name) {
  if (f !== undefined && typeof f !== "function") throw invalid(`${where}: \`${name}\` must be a function`);
}

/** loci's "the prompt is too long for this model": loci sends it again, smaller (src/llm/fit.rs). */
function contextExceeded(where, cause) {
  const error = lociError("LLM_CONTEXT_EXCEEDED", `${where}: ${cause?.message ?? cause}`);
  error.cause = cause;
  return error;
}

// What llama.cpp's server says when a prompt does not fit its context (wllama runs that server in the page).
const LLAMA_CPP_OVERFLOW = /exceeds? the available context size|context size|context_size|exceed_context|kv cache is full|n_ctx/i;

/** A reply's speed, from the runtime's own timings where it gives them, else from the clock. */
function clockStats(started, firstAt, endedAt, promptTokens, outputTokens) {
  const promptMs = (firstAt ?? endedAt) - started;
  const outputMs = firstAt === undefined ? 0 : endedAt - firstAt;
  return {
    promptTokens, promptMs, promptTokensPerSecond: promptTokens && promptMs > 0 ? promptTokens / (promptMs / 1000) : null,
    outputTokens, outputMs, outputTokensPerSecond: outputTokens && outputMs > 0 ? outputTokens / (outputMs / 1000) : null,
    totalMs: endedAt - started,
  };
}

/** JSON replies: a schema loci gives, else any JSON object (the runtimes' own field shapes differ). */
const wantsJson = (json, schema) => json || schema !== undefined;

// ---------------------------------------------------------------------------------------------------------------
// wllama (llama.cpp compiled to WebAssembly, on the CPU or WebGPU): `createChatCompletion` speaks OpenAI's chat
// protocol, streamed through `onData`; its window is the loaded context's `n_ctx`.

const WLLAMA_OPTIONS = ["contextTokens", "onStats", "params"];

/** An OpenAI-style streamed reply read chunk by chunk (wllama and WebLLM both stream that shape): the text so far
 * (passed to `onText` as it grows), when its first token came, and what the last chunks say about its end. */
function streamedReply(onText) {
  const reply = { text: "", finishReason: undefined, usage: undefined, timings: undefined, firstAt: undefined };
  reply.add = (chunk) => {
    const choice = chunk?.choices?.[0];
    const delta = choice?.delta?.content;
    if (delta) {
      reply.firstAt ??= performance.now();
      reply.text += delta;
      onText?.(reply.text);
    }
    if (choice?.finish_reason) reply.finishReason = choice.finish_reason;
    if (chunk?.usage) reply.usage = chunk.usage;
    if (chunk?.timings) reply.timings = chunk.timings;
  };
  return reply;
}

/**
 * `fromWllama(wllama, { contextTokens?, onStats?, params? })`: a loaded `Wllama` as loci's LLM callback.
 * `params` are added to every request (sampling: `top_k`, `seed`…); loci's own fields are not replaced.
 */
export function fromWllama(wllama, options) {
  const where = "fromWllama";
  const opts = checkOptions(options, where, WLLAMA_OPTIONS);
  if (!wllama || typeof wllama.createChatCompletion !== "function" || typeof wllama.getLoadedContextInfo !== "function") {
    throw invalid(`${where}: \`wllama\` must be a Wllama instance (@wllama/wllama)`);
  }
  if (typeof wllama.isModelLoaded === "function" && !wllama.isModelLoaded()) {
    throw invalid(`${where}: load a model first (wllama.loadModelFromUrl or wllama.loadModel)`);
  }
  checkCallback(opts.onStats, where, "onStats");
  if (opts.params !== undefined && (opts.params === null || typeof opts.params !== "object")) {
    throw invalid(`${where}: \`params\` must be an object`);
  }
  const nCtx = wllama.getLoadedContextInfo()?.n_ctx;
  const contextTokens = windowOf(opts, Number.isInteger(nCtx) ? nCtx : undefined, where, "the loaded context (n_ctx)");

  const llm = async ({ messages, json, schema, maxTokens, temperature, frequencyPenalty, signal, onText }) => {
    const reply = streamedReply(onText);
    const started = performance.now();
    const request = { ...opts.params, messages, stream: true, abortSignal: signal, onData: reply.add };
    if (maxTokens !== undefined) request.max_tokens = maxTokens;
    if (temperature !== undefined) request.temperature = temperature;
    if (frequencyPenalty !== undefined) request.frequency_penalty = frequencyPenalty;
    // llama.cpp turns a JSON schema into a grammar: even a 135M model then writes the JSON loci asks for.
    if (schema !== undefined) request.response_format = { type: "json_schema", json_schema: { name: "reply", schema } };
    else if (json) request.response_format = { type: "json_object" };
    try {
      await wllama.createChatCompletion(request);
    } catch (e) {
      if (signal?.aborted) throw e;
      if (e?.type === "kv_cache_full" || LLAMA_CPP_OVERFLOW.test(String(e?.message ?? e))) throw contextExceeded(where, e);
      throw e;
    }
    const { text, finishReason, usage, timings, firstAt } = reply;
    const endedAt = performance.now();
    const promptTokens = usage?.prompt_tokens ?? timings?.prompt_n ?? null;
    const outputTokens = usage?.completion_tokens ?? timings?.predicted_n ?? null;
    if (opts.onStats) {
      const stats = timings
        ? {
          promptTokens: timings.prompt_n, promptMs: timings.prompt_ms, promptTokensPerSecond: timings.prompt_per_second,
          outputTokens: timings.predicted_n, outputMs: timings.predicted_ms,
          outputTokensPerSecond: timings.predicted_per_second, totalMs: endedAt - started,
        }
        : clockStats(started, firstAt, endedAt, promptTokens, outputTokens);
      opts.onStats({ ...stats, json: wantsJson(json, schema), finishReason: finishReason ?? null });
    }
    return {
      text,
      ...(promptTokens !== null && outputTokens !== null ? { usage: { inputTokens: promptTokens, outputTokens } } : {}),
      ...(finishReason ? { finishReason } : {}),
    };
  };
  llm.contextTokens = contextTokens;
  return llm;
}

// ---------------------------------------------------------------------------------------------------------------
// WebLLM (MLC, WebGPU): `engine.chat.completions.create` speaks OpenAI's chat protocol, streamed as an async
// iterable of chunks (usage in the last one with `stream_options.include_usage`); `interruptGenerate()` stops a
// reply. Its window is the model's `context_window_size`: from `chatOpts` given to `reload` (a web worker engine
// keeps them), else the model's record in the app config (WebLLM's prebuilt records set it).

const WEBLLM_OPTIONS = ["model", "contextTokens", "appConfig", "onStats"];

function webllmWindow(engine, opts, model) {
  const chatOpts = Array.isArray(engine.chatOpts) ? engine.chatOpts : [engine.chatOpts];
  const ids = Array.isArray(engine.modelId) ? engine.modelId : [engine.modelId];
  const index = model === undefined ? 0 : Math.max(0, ids.indexOf(model));
  const fromChatOpts = chatOpts[index]?.context_window_size;
  if (Number.isInteger(fromChatOpts) && fromChatOpts > 0) return fromChatOpts;
  // WebLLM's engine keeps its app config in a field of its own (not part of its typed interface): the option first.
  const appConfig = opts.appConfig ?? engine.appConfig;
  const id = model ?? ids[0];
  const record = appConfig?.model_list?.find?.((m) => m.model_id === id);
  const fromRecord = record?.overrides?.context_window_size;
  return Number.isInteger(fromRecord) && fromRecord > 0 ? fromRecord : undefined;
}

/** WebLLM wants one system message, first: loci's system messages are joined into it. */
function systemFirst(messages) {
  const system = messages.filter((m) => m.role === "system").map((m) => m.content);
  const rest = messages.filter((m) => m.role !== "system");
  return system.length ? [{ role: "system", content: system.join("\n\n") }, ...rest] : rest;
}

/**
 * `fromWebLLM(engine, { model?, contextTokens?, appConfig?, onStats? })`: a loaded WebLLM engine (`MLCEngine`,
 * `WebWorkerMLCEngine`, `CreateMLCEngine(...)`'s) as loci's LLM callback. `model` picks one of several loaded models.
 */
export function fromWebLLM(engine, options) {
  const where = "fromWebLLM";
  const opts = checkOptions(options, where, WEBLLM_OPTIONS);
  if (!engine || typeof engine.chat?.completions?.create !== "function") {
    throw invalid(`${where}: \`engine\` must be a WebLLM engine (one with chat.completions.create)`);
  }
  if (opts.model !== undefined && (typeof opts.model !== "string" || !opts.model)) {
    throw invalid(`${where}: \`model\` must be a model id`);
  }
  checkCallback(opts.onStats, where, "onStats");
  const contextTokens = windowOf(opts, webllmWindow(engine, opts, opts.model), where, "the model's context_window_size");

  const llm = async ({ messages, json, schema, maxTokens, temperature, frequencyPenalty, signal, onText }) => {
    const request = { messages: systemFirst(messages), stream: true, stream_options: { include_usage: true } };
    if (opts.model !== undefined) request.model = opts.model;
    if (maxTokens !== undefined) request.max_tokens = maxTokens;
    if (temperature !== undefined) request.temperature = temperature;
    if (frequencyPenalty !== undefined) request.frequency_penalty = frequencyPenalty;
    // WebLLM takes the schema as a string, under `json_object`.
    if (wantsJson(json, schema)) {
      request.response_format = schema === undefined ? { type: "json_object" } : { type: "json_object", schema: JSON.stringify(schema) };
    }
    if (signal?.aborted) throw signal.reason ?? new DOMException("aborted", "AbortError");
    const interrupt = () => { void engine.interruptGenerate?.(); };
    signal?.addEventListener("abort", interrupt, { once: true });
    const reply = streamedReply(onText);
    const started = performance.now();
    try {
      const chunks = await engine.chat.completions.create(request);
      for await (const chunk of chunks) reply.add(chunk);
    } catch (e) {
      if (signal?.aborted) throw e;
      if (e?.name === "ContextWindowSizeExceededError") throw contextExceeded(where, e);
      throw e;
    } finally {
      signal?.removeEventListener("abort", interrupt);
    }
    // An interrupted reply ends its stream quietly ("abort"): loci hears the abort from its own signal.
    const { text, finishReason, usage, firstAt } = reply;
    const endedAt = performance.now();
    if (opts.onStats) {
      const stats = clockStats(started, firstAt, endedAt, usage?.prompt_tokens ?? null, usage?.completion_tokens ?? null);
      // WebLLM measures its own speeds (usage.extra): they leave out the page's overhead.
      if (usage?.extra?.prefill_tokens_per_s) stats.promptTokensPerSecond = usage.extra.prefill_tokens_per_s;
      if (usage?.extra?.decode_tokens_per_s) stats.outputTokensPerSecond = usage.extra.decode_tokens_per_s;
      opts.onStats({ ...stats, json: wantsJson(json, schema), finishReason: finishReason ?? null });
    }
    return {
      text,
      ...(usage ? { usage: { inputTokens: usage.prompt_tokens, outputTokens: usage.completion_tokens } } : {}),
      ...(finishReason && finishReason !== "abort" ? { finishReason } : {}),
    };
  };
  llm.contextTokens = contextTokens;
  return llm;
}

// ---------------------------------------------------------------------------------------------------------------
// Chrome's Prompt API (`LanguageModel`, a built-in model): a session keeps its conversation, takes a system message
// only first in `initialPrompts`, and answers with `promptStreaming(input, { signal, responseConstraint })`, a
// stream of text pieces. Its window is `contextWindow` (`inputQuota` before Chrome renamed it). A prompt over it
// rejects with a `QuotaExceededError`.

const PROMPT_API_OPTIONS = ["contextTokens", "createOptions", "onDownloadProgress", "onStats"];

/** The session's window: `contextWindow`, or the older `inputQuota`. */
const sessionWindow = (s) => [s?.contextWindow, s?.inputQuota].find((n) => Number.isFinite(n) && n > 0);

async function readStream(stream, onPiece) {
  // A ReadableStream (Chrome's), or any async iterable of text pieces.
  if (typeof stream?.getReader === "function") {
    const reader = stream.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        onPiece(value);
      }
    } finally {
      reader.releaseLock();
    }
  }
  for await (const piece of stream) onPiece(piece);
}

/**
 * `await fromPromptApi(LanguageModel, { contextTokens?, createOptions?, onDownloadProgress?, onStats? })`: Chrome's
 * built-in model as loci's LLM callback. Given the `LanguageModel` factory, each call gets a fresh session whose
 * `initialPrompts` are loci's messages before the last (the system message first), `createOptions` added (e.g.
 * `expectedInputs`); a first session is made here to read the window (and download the model, reported to
 * `onDownloadProgress(loaded)`, 0–1). Given a session instead, each call prompts a `clone()` of it, loci's
 * system text put before the first user message (a session takes no system message after its creation).
 */
export async function fromPromptApi(source, options) {
  const where = "fromPromptApi";
  const opts = checkOptions(options, where, PROMPT_API_OPTIONS);
  checkCallback(opts.onStats, where, "onStats");
  checkCallback(opts.onDownloadProgress, where, "onDownloadProgress");
  if (opts.createOptions !== undefined && (opts.createOptions === null || typeof opts.createOptions !== "object")) {
    throw invalid(`${where}: \`createOptions\` must be an object`);
  }
  const isFactory = source && typeof source.create === "function";
  const isSession = source && typeof source.promptStreaming === "function" && typeof source.clone === "function";
  if (!isFactory && !isSession) {
    throw invalid(`${where}: pass Chrome's \`LanguageModel\` (globalThis.LanguageModel) or one of its sessions`);
  }
  const createOptions = opts.createOptions ?? {};
  let contextTokens;
  if (isFactory) {
    if (typeof source.availability === "function" && (await source.availability(createOptions)) === "unavailable") {
      throw lociError("UNSUPPORTED", `${where}: this browser's built-in model is unavailable (LanguageModel.availability())`);
    }
    const monitor = opts.onDownloadProgress
      ? (m) => m.addEventListener("downloadprogress", (e) => opts.onDownloadProgress(e.loaded))
      : undefined;
    const probe = await source.create({ ...createOptions, ...(monitor ? { monitor } : {}) });
    try {
      contextTokens = windowOf(opts, sessionWindow(probe), where, "the session's contextWindow");
    } finally {
      probe.destroy?.();
    }
  } else {
    contextTokens = windowOf(opts, sessionWindow(source), where, "the session's contextWindow");
  }

  const llm = async ({ messages, json, schema, signal, onText }) => {
    const system = messages.filter((m) => m.role === "system").map((m) => m.content).join("\n\n");
    const turns = messages.filter((m) => m.role !== "system");
    const last = turns.at(-1);
    let session;
    let input;
    try {
      if (isFactory) {
        const initialPrompts = [...(system ? [{ role: "system", content: system }] : []), ...turns.slice(0, -1)];
        session = await source.create({ ...createOptions, initialPrompts, ...(signal ? { signal } : {}) });
        input = last ? [last] : "";
      } else {
        session = await source.clone(signal ? { signal } : {});
        const withSystem = turns.map((m, i) => (i === turns.findIndex((t) => t.role === "user") && system
          ? { role: m.role, content: `${system}\n\n${m.content}` } : m));
        input = withSystem;
      }
    } catch (e) {
      if (signal?.aborted) throw e;
      if (e?.name === "QuotaExceededError") throw contextExceeded(where, e);
      throw e;
    }
    let text = "";
    let firstAt;
    const started = performance.now();
    try {
      const promptOptions = {};
      if (signal) promptOptions.signal = signal;
      // Chrome constrains the reply to a JSON schema; plain JSON is any object.
      if (wantsJson(json, schema)) promptOptions.responseConstraint = schema ?? { type: "object" };
      await readStream(session.promptStreaming(input, promptOptions), (piece) => {
        if (typeof piece !== "string" || !piece) return;
        firstAt ??= performance.now();
        text += piece;
        onText?.(text);
      });
    } catch (e) {
      if (signal?.aborted) throw e;
      if (e?.name === "QuotaExceededError") throw contextExceeded(where, e);
      throw e;
    } finally {
      session.destroy?.();
    }
    if (opts.onStats) {
      opts.onStats({ ...clockStats(started, firstAt, performance.now(), null, null), json: wantsJson(json, schema), finishReason: null });
    }
    return { text };
  };
  llm.contextTokens = contextTokens;
  return llm;
}
