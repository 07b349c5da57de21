/** Options of `Memory.open`. */
export interface OpenOptions {
  /** One IndexedDB database per name (`loci:<name>`); one opener at a time per browser profile. */
  name: string;
  embedder?: EmbedderOptions;
  /** The user's LLM: an OpenAI-compatible endpoint or an async function. Needed by `answer()` and `prune: "llm"`. */
  llm?: LlmOptions | LlmCallback;
  /** Turns per embedded unit: `"pair"` (default, the papers' setting) or `"single"`. Fixed per database. */
  unitMode?: "pair" | "single";
  /** Longest accepted message, in characters (default 32,000). */
  maxMessageChars?: number;
  /** Without an explicit session, a pause longer than this starts a new session (default 30). */
  sessionGapMinutes?: number;
  onProgress?: (event: ProgressEvent) => void;
}

/** Where the model assets are (defaults: a self-hosted layout relative to the page). */
export interface EmbedderOptions {
  /** Default `assets/model/model.onnx` (all-MiniLM-L6-v2 int8). */
  modelUrl?: string;
  /** Default `assets/model/tokenizer.json`. */
  tokenizerUrl?: string;
  /** onnxruntime-web's `dist/` files; default `assets/ort/`. Never a CDN unless you say so. */
  ortUrl?: string;
  /** `"mjs"` (default) or `"js"` for servers that send `.mjs` with a wrong MIME type. */
  ortWrapperExt?: "mjs" | "js";
  /** `"auto"` (WebGPU only on a hardware adapter that passes a parity self-test), `"wasm"` or `"webgpu"`. */
  device?: "auto" | "wasm" | "webgpu";
  /** Tokens per embedding window (default 256). */
  maxTokens?: number;
  /** Windows per model call (default 16). */
  batchSize?: number;
}

/** An OpenAI-compatible chat-completions endpoint. The key lives in memory only. */
export interface LlmOptions {
  /** E.g. `https://api.openai.com/v1`; requests go to `${baseUrl}/chat/completions`. */
  baseUrl: string;
  model: string;
  apiKey?: string;
  headers?: Record<string, string>;
  /** Per request (default 60,000). */
  timeoutMs?: number;
  /** Requests in flight at once (default 4). */
  maxConcurrency?: number;
  /** Retries on network errors, 429 and 5xx (default 4). */
  maxRetries?: number;
}

/** Any model behind a function: WebLLM, Chrome's built-in AI, an SDK. */
export type LlmCallback = (request: {
  messages: { role: "system" | "user" | "assistant"; content: string }[];
  json: boolean;
  maxTokens?: number;
  temperature?: number;
  schema?: unknown;
  signal?: AbortSignal;
}) => Promise<{ text: string; usage?: { inputTokens: number; outputTokens: number } } | string>;

export interface ProgressEvent {
  phase: "tokenizer" | "model" | "runtime" | "storage" | "ready" | string;
  detail?: string;
}

/** A message to remember. Other fields (OpenAI's `name`, `tool_calls`, …) are ignored. */
export interface MessageInput {
  role?: string;
  speaker?: string;
  content: string;
  /** ISO-8601 text or epoch milliseconds; default: now. */
  time?: string | number;
  /** A description of an image shared with the message. */
  caption?: string;
}

export interface AddOptions {
  session?: string;
}

export interface AddReport {
  session: string;
  turnIds: number[];
  unitsEmbedded: number;
}

export type RecallMethod = "hybrid" | "tir" | "bm25" | "turn-mean" | `tir-sum-${number}`;

export interface RecallOptions {
  /** Sessions to return (default 3). */
  k?: number;
  unitsPerSession?: number;
  /** Order of sessions in `context` (default `"chronological"`). */
  order?: "chronological" | "rank";
  /** Default `"hybrid"` (dense + lexical); `"tir"` is the papers' Turn Isolation Retrieval. */
  method?: RecallMethod;
  /** `"none"` (default for recall), `"extractive"` (no LLM) or `"llm"` (query-driven pruning; default for answer). */
  prune?: "none" | "extractive" | "llm";
  /** Extractive pruning: share of tokens to keep (default 0.5). */
  budget?: number;
  /** When the question is asked (for relative dates); default now. */
  questionTime?: string | number;
  /** Output cap of the answer call. */
  maxTokens?: number;
  signal?: AbortSignal;
}

export interface RecalledUnit {
  id: number;
  score: number;
  turnIds: number[];
  text: string;
}

export interface RecalledSession {
  id: string;
  rank: number;
  score: number;
  firstTime: number;
  lastTime: number;
  units: RecalledUnit[];
}

export interface Usage {
  inputTokens: number;
  outputTokens: number;
  /** True when the endpoint did not report usage and loci estimated it. */
  estimated: boolean;
}

export interface Spent {
  calls: number;
  usage: Usage;
  latencyMs: number;
}

export interface KeptSession {
  id: string;
  rank: number;
  turnIds: number[];
}

export interface RecallResult {
  query: string;
  sessions: RecalledSession[];
  /** The sessions (pruned when asked) as clean text under date headers: put it in a prompt as data. */
  context: string;
  contextTokens: number;
  device: "wasm" | "webgpu" | "cpu";
  /** Present when `prune` was given. */
  prune?: "none" | "extractive" | "llm";
  unprunedTokens?: number;
  kept?: KeptSession[];
  spent?: Spent;
}

export interface AnswerResult {
  question: string;
  answer: string;
  sessions: RecalledSession[];
  kept: KeptSession[];
  context: string;
  contextTokens: number;
  unprunedTokens: number;
  prune: "none" | "extractive" | "llm";
  spent: Spent;
}

export interface PhaseCounters {
  calls: number;
  inputTokens: number;
  outputTokens: number;
  latencyMs: number;
  errors: number;
  estimated: boolean;
}

export interface Stats {
  sessions: number;
  turns: number;
  units: number;
  vectors: number;
  dim: number;
  model: string;
  device: "wasm" | "webgpu" | "cpu";
  unitMode: "pair" | "single";
  vectorBytes: number;
  llm: { prune: PhaseCounters; answer: PhaseCounters };
  [more: string]: unknown;
}

export interface Session {
  id: string;
  firstTime: number;
  lastTime: number;
  turnCount: number;
  title?: string;
}

export interface Turn {
  id: number;
  session: string;
  seq: number;
  speaker: string;
  text: string;
  caption?: string;
  time: number;
  ingested: number;
}

export interface MemoryExport {
  format: "loci-memory-export";
  version: number;
  exportedAt: number;
  model: string;
  sessions: { id: string; title?: string; turns: { speaker: string; text: string; caption?: string; time: number }[] }[];
}

export interface ImportReport {
  sessionsImported: number;
  sessionsSkipped: number;
  turnsImported: number;
}

/** Every rejection is an `Error` named `LociError` with one of these codes. */
export type LociErrorCode =
  | "INVALID_INPUT" | "MODEL_MISMATCH" | "SCHEMA_MISMATCH" | "EMBEDDER_FAILED" | "ASSET_FAILED" | "STORAGE_FAILED"
  | "QUOTA_EXCEEDED" | "BLOCKED_BY_OTHER_TAB" | "CLOSED" | "NOT_FOUND" | "LLM_UNAVAILABLE" | "LLM_RATE_LIMITED"
  | "LLM_REJECTED" | "LLM_BAD_REPLY" | "ABORTED" | "TIMEOUT" | string;

export interface LociError extends Error {
  name: "LociError";
  code: LociErrorCode;
}
