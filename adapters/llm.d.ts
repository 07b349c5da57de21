import type { LlmCallback } from "../pkg/loci.js";

/**
 * What each helper returns: an `LlmCallback` for `memory.setLlm(fn)` (or `Memory.open({ llm })`), with the model's
 * real context window as `contextTokens`.
 */
export type InBrowserLlm = LlmCallback & { contextTokens: number };

/** The speed of one call, from the runtime's own timings where it gives them (wllama, WebLLM), else the clock. */
export interface LlmCallStats {
  /** Tokens of the prompt (null where the runtime does not count them: Chrome's model). */
  promptTokens: number | null;
  /** Time to read the prompt (to the first token of the reply), ms. */
  promptMs: number;
  promptTokensPerSecond: number | null;
  outputTokens: number | null;
  outputMs: number;
  outputTokensPerSecond: number | null;
  totalMs: number;
  /** A JSON reply (loci's answers, pruning and distillation ask for JSON). */
  json: boolean;
  /** `"stop"`, `"length"` (the output cap), … or null where the runtime does not say. */
  finishReason: string | null;
}

/** The part of `@wllama/wllama`'s `Wllama` the helper uses. */
export interface WllamaLike {
  createChatCompletion(options: any): Promise<unknown>;
  getLoadedContextInfo(): { n_ctx: number };
  isModelLoaded?(): boolean;
}

export interface FromWllamaOptions {
  /** The window loci sizes prompts to: at most the loaded context's `n_ctx` (the default). */
  contextTokens?: number;
  /** After each call: its speed (tokens per second of the prompt and of the reply). */
  onStats?: (stats: LlmCallStats) => void;
  /** Added to every request: sampling (`top_k`, `top_p`, `seed`, …). loci's own fields are not replaced. */
  params?: Record<string, unknown>;
}

/**
 * A loaded wllama (`await wllama.loadModelFromUrl(gguf, { n_ctx })`) as loci's LLM: streamed chat completions
 * (`onText` hears the answer as it is written), JSON replies constrained by llama.cpp's grammar from loci's schema,
 * the caller's abort signal, and a prompt over `n_ctx` reported as `LLM_CONTEXT_EXCEEDED` (loci sends it smaller).
 * Wrong arguments (no model loaded, an unknown option) throw a `LociError` of code `INVALID_INPUT`.
 */
export declare function fromWllama(wllama: WllamaLike, options?: FromWllamaOptions): InBrowserLlm;

/** The part of a WebLLM engine (`MLCEngine`, `WebWorkerMLCEngine`) the helper uses. */
export interface WebLLMEngineLike {
  chat: { completions: { create(request: any): Promise<unknown> } };
  interruptGenerate?(): unknown;
  modelId?: string | string[];
  chatOpts?: { context_window_size?: number } | { context_window_size?: number }[];
}

export interface FromWebLLMOptions {
  /** Which loaded model answers (when several are loaded). */
  model?: string;
  /** The window: by default the model's `context_window_size`, read from `chatOpts` or the app config. */
  contextTokens?: number;
  /** Where the model's record is (default: the engine's own, WebLLM's `prebuiltAppConfig` unless set). */
  appConfig?: { model_list: { model_id: string; overrides?: { context_window_size?: number } }[] };
  onStats?: (stats: LlmCallStats) => void;
}

/**
 * A loaded WebLLM engine (WebGPU) as loci's LLM: streamed chat completions with usage, JSON replies with loci's
 * schema, an abort that interrupts the generation, and WebLLM's `ContextWindowSizeExceededError` reported as
 * `LLM_CONTEXT_EXCEEDED`.
 */
export declare function fromWebLLM(engine: WebLLMEngineLike, options?: FromWebLLMOptions): InBrowserLlm;

/** A Prompt API session (Chrome's `LanguageModel` instance), as far as the helper uses it. */
export interface LanguageModelSessionLike {
  promptStreaming(input: any, options?: { signal?: AbortSignal; responseConstraint?: unknown }): ReadableStream<string> | AsyncIterable<string>;
  clone(options?: { signal?: AbortSignal }): Promise<LanguageModelSessionLike>;
  destroy?(): void;
  /** The window (Chrome since the rename); `inputQuota` before it. */
  contextWindow?: number;
  inputQuota?: number;
}

/** Chrome's `LanguageModel` factory (`globalThis.LanguageModel`), as far as the helper uses it. */
export interface LanguageModelFactoryLike {
  create(options?: any): Promise<LanguageModelSessionLike>;
  availability?(options?: any): Promise<string>;
}

export interface FromPromptApiOptions {
  /** The window (default: the session's `contextWindow`). */
  contextTokens?: number;
  /** Given to every `LanguageModel.create` (e.g. `expectedInputs`, `expectedOutputs`). */
  createOptions?: Record<string, unknown>;
  /** The model's download, 0–1, when the browser has to fetch it first. */
  onDownloadProgress?: (loaded: number) => void;
  onStats?: (stats: LlmCallStats) => void;
}

/**
 * Chrome's built-in model (the Prompt API) as loci's LLM. Given `LanguageModel`, each call gets a fresh session
 * (loci's system message first in its `initialPrompts`); given a session, each call prompts a clone of it. JSON
 * replies are constrained with `responseConstraint`; a `QuotaExceededError` is reported as `LLM_CONTEXT_EXCEEDED`.
 * Rejects with `UNSUPPORTED` when the browser says the model is unavailable.
 */
export declare function fromPromptApi(
  source: LanguageModelFactoryLike | LanguageModelSessionLike,
  options?: FromPromptApiOptions,
): Promise<InBrowserLlm>;
