/** Options of `Memory.open`. */
export interface OpenOptions {
  /** One IndexedDB database per name (`loci:<name>`); one opener at a time per browser profile. */
  name: string;
  embedder?: EmbedderOptions;
  /** The user's LLM: an OpenAI-compatible endpoint or an async function. Needed by `answer()` and `prune: "llm"`. */
  llm?: LlmOptions | LlmCallback;
  /** Turns per embedded unit: `"pair"` (default, the papers' setting) or `"single"`. Fixed per database. */
  unitMode?: "pair" | "single";
  /** Longest accepted message, in characters (default 200,000: a pasted document is a normal message). */
  maxMessageChars?: number;
  /** Without an explicit session, a pause longer than this starts a new session (default 30). */
  sessionGapMinutes?: number;
  /** How each write commits (default `"strict"`: acknowledged means on disk). */
  durability?: Durability;
  /**
   * Withhold stored messages that give instructions to an AI ("ignore previous instructions…", a chat template's
   * markup) from every prompt loci writes: `recall().context`, pruning, `answer()`, distillation (default `true`;
   * docs/SECURITY.md). The memory keeps them as said. `false` for an app whose users store prompts as content.
   */
  screenMemory?: boolean;
  /**
   * Nemori distillation: turns are queued (durably, with the turns) for segmentation into episodes and facts. The
   * jobs run in the background with the configured LLM as soon as a window fills (and resume after a reload);
   * `flush()` also segments what is still buffered and waits for every job. `true` takes the defaults. With it on,
   * `recall()` and `answer()` combine sessions, episodes and facts unless `prune` is given.
   */
  distill?: boolean | DistillOptions;
  /** Open phases, one `{ phase: "distill", … }` event per distillation job run, and a background run's error. The
   * background phases (`"distill"`, `"embedded"`, `"embed"`) happen in the tab that leads, and every tab following
   * it hears them too (with `error` as a `LociError`). */
  onProgress?: (event: ProgressEvent | DistillProgressEvent) => void;
  /**
   * Encryption at rest (off by default): every record is sealed with AES-256-GCM (WebCrypto). A new memory opened
   * with it is created encrypted; an encrypted memory needs it (`BAD_KEY` without it or with a wrong one). A
   * passphrase is stretched with PBKDF2-SHA256 (600,000 iterations); a `CryptoKey` (AES-GCM, encrypt + decrypt,
   * may be non-extractable) is used as it is. Never stored.
   */
  encryption?: EncryptionOptions;
}

export type EncryptionOptions = { passphrase: string } | { key: CryptoKey };

/** Distillation settings (defaults: the Nemori paper's). */
export interface DistillOptions {
  /** Buffered turns of a session that trigger segmentation (default 20, 2–200). */
  window?: number;
  /** Episodes offered as merge candidates (default 5). */
  mergeCandidates?: number;
  /** Facts a new episode may evoke for prediction (default 10). */
  predictFacts?: number;
  /** Nearest facts a new fact is consolidated against (default 5). */
  consolidateCandidates?: number;
  /** Failures before a job is parked (default 5). A rate limit (429) is not one: the job waits as long as the
   * endpoint's `Retry-After` asks (at least its backoff) and tries again. */
  maxAttempts?: number;
  /** First retry delay after a failure, doubling per attempt (default 2,000). */
  backoffMs?: number;
  /** Longest retry delay (default 300,000). */
  maxBackoffMs?: number;
  /** Output cap per distillation call, over each step's own cap for what it asks (default: the step's own). */
  maxTokens?: number;
  /** Run queued jobs in the background as soon as they are due (default true); `false`: only `flush()` runs them. */
  autoRun?: boolean;
}

/**
 * How IndexedDB commits each write. `"strict"` (default): an acknowledged write is on disk, and survives a power
 * loss or an OS crash. `"relaxed"` (Chrome's own default): it survives a tab or browser crash, but a power loss or an
 * OS crash in the seconds after a write can lose it. See docs/BENCHMARKS.md for what strict costs.
 */
export type Durability = "strict" | "relaxed";

/** Where the model assets are (defaults: a self-hosted layout relative to the page), and how the model runs. */
export interface EmbedderOptions {
  /** Default `assets/model/model.onnx` (all-MiniLM-L6-v2 int8). */
  modelUrl?: string;
  /** Default `assets/model/tokenizer.json`. */
  tokenizerUrl?: string;
  /** onnxruntime-web's `dist/` files; default `assets/ort/`. Never a CDN unless you say so. */
  ortUrl?: string;
  /** `"mjs"` (default) or `"js"` for servers that send `.mjs` with a wrong MIME type. onnxruntime-web ships only
   * `ort-wasm-simd-threaded.mjs` (and `.asyncify.mjs`): with `"js"`, host copies of them named `.js`. */
  ortWrapperExt?: "mjs" | "js";
  /** `"auto"` (WebGPU only on a hardware adapter that passes a parity self-test), `"wasm"` or `"webgpu"`. */
  device?: "auto" | "wasm" | "webgpu";
  /** Tokens per embedding window (default 256). */
  maxTokens?: number;
  /** Windows per model call (default 16, at most 256). */
  batchSize?: number;
  /** Windows embedded per message at most (default 64, ~55,000 characters whole; a longer message is stored whole
   * and embedded through 64 windows spread over it). */
  maxWindows?: number;
  /** Expected SHA-256 (hex) of the model; default the int8 all-MiniLM-L6-v2's. `null` skips the check. */
  modelSha256?: string | null;
  /** Expected SHA-256 (hex) of the tokenizer; default that model's `tokenizer.json`. `null` skips the check. */
  tokenizerSha256?: string | null;
  /** Keep the model and tokenizer in Cache Storage (default true). */
  cache?: boolean;
  /**
   * onnxruntime-web's CPU threads (1–16). Default: one per core, at most 4, in a cross-origin isolated page
   * (`Cross-Origin-Opener-Policy: same-origin` and `Cross-Origin-Embedder-Policy: require-corp`); elsewhere one, as
   * threads need isolation. Fixed per page at first open.
   */
  threads?: number;
  /**
   * Compute the model in onnxruntime-web's own Web Worker (its proxy mode), so that the page's thread stays free
   * while a long message is embedded (default true; WASM only, and only where loci runs in a page: in a Web Worker
   * it computes there). The worker is `ort.wasm.min.js` from `ortUrl`: a Content-Security-Policy must allow it
   * (`worker-src 'self'` when self-hosted, as the threads need too). Fixed per page at first open.
   */
  worker?: boolean;
}

/** An OpenAI-compatible chat-completions endpoint. The key lives in memory only. */
export interface LlmOptions {
  /** E.g. `https://api.openai.com/v1`; requests go to `${baseUrl}/chat/completions`. */
  baseUrl: string;
  model: string;
  apiKey?: string;
  headers?: Record<string, string>;
  /**
   * Per request (default 60,000); for an answer heard as it is written (`onText`), per wait for the reply to start
   * or go on, so that a long answer that keeps coming is not cut.
   */
  timeoutMs?: number;
  /** Requests in flight at once (default 4). */
  maxConcurrency?: number;
  /** Retries on network errors, 429 and 5xx (default 4). */
  maxRetries?: number;
  /**
   * The model's context window in tokens, prompt and reply (default 4,096; at least 512). Every prompt loci sends
   * is sized to fit it: long quoted texts are cut, segmentation takes fewer turns. Give the real value (e.g. 2,048
   * for a small WebLLM model, 128,000 for gpt-4o-mini) so prompts are neither cut needlessly nor refused.
   */
  contextTokens?: number;
  /**
   * Fields added to every request body, for what a server takes besides the protocol's: e.g.
   * `{ reasoning_effort: "low" }` (OpenAI's reasoning models think less and answer sooner), `{ chat_template_kwargs:
   * { enable_thinking: false } }` (Qwen3 on vLLM or llama.cpp), `{ seed: 1 }`. The fields loci sets itself (`model`,
   * `messages`, `stream`, `max_tokens`, `temperature`, `response_format`, …) are not replaced.
   */
  extraBody?: Record<string, unknown>;
}

/**
 * Any model behind a function: WebLLM, Chrome's built-in AI, an SDK. Its window is `fn.contextTokens` when set
 * (default 4,096; at least 512). Return `finishReason: "length"` when the model stopped at `maxTokens`: loci then
 * asks again. Throw an error with `code: "LLM_CONTEXT_EXCEEDED"` when the prompt does not fit the model: loci sends
 * it again, smaller (any other error is `LLM_UNAVAILABLE`). `loci/llm` makes one from wllama, WebLLM or Chrome's
 * Prompt API.
 */
export type LlmCallback = ((request: {
  messages: { role: "system" | "user" | "assistant"; content: string }[];
  json: boolean;
  maxTokens?: number;
  temperature?: number;
  /** Asked for by free-text steps, where a small model tends to repeat itself; ignore it if the model has none. */
  frequencyPenalty?: number;
  schema?: unknown;
  signal?: AbortSignal;
  /** There when loci listens to the reply as it is written (a streamed answer): call it with the text so far as
   * the model writes, if the model streams. It stops working once the function returns. */
  onText?: (textSoFar: string) => void;
}) => Promise<{ text: string; usage?: { inputTokens: number; outputTokens: number }; finishReason?: string } | string>) & {
  /** The model's context window in tokens, prompt and reply. */
  contextTokens?: number;
};

export interface ProgressEvent {
  /** `"indexed"`: after open resolved, the lexical index is built (a recall before it finishes the build itself).
   * `"closed"`: the memory closed itself because it lost its database (see `reason`); later calls get `CLOSED`.
   * `"quarantined"`: stored records that did not decode were set aside (`count`, `detail`; see
   * `stats().quarantined`); the rest opened.
   * `"tab"`: `detail` `"following"` (another tab holds the memory; calls are forwarded to it) or `"leading"`
   * (this tab holds it: at open, or when the tab it followed went).
   * `"embedded"`: a long message's other windows are embedded and recall uses them all, or the message was
   * forgotten before they were (`pending`: units still waiting). `addMessages` embeds a few windows of a long text (over ~3,500 characters) before it resolves and
   * the rest in the background, a model call at a time. `"embed"` with `error`: that background run stopped (the
   * unit stays pending; the next `addMessages`, or the next open, goes on). */
  phase: "tokenizer" | "model" | "runtime" | "storage" | "quarantined" | "ready" | "indexed" | "closed" | "tab"
    | "embedded" | "embed" | string;
  detail?: string;
  /** With `"embedded"`: units whose windows are still being embedded in the background. */
  pending?: number;
  /** With `"embed"`: why the background embedding stopped. */
  error?: LociError;
  /** With `"quarantined"`: how many records were set aside. */
  count?: number;
  /** With `"tokenizer"` and `"model"` (`detail` is the URL): bytes read so far, of `total` when the server says. */
  loaded?: number;
  total?: number;
  /** With `"tokenizer"` and `"model"`: `true` when the file came from Cache Storage, not the network. */
  cached?: boolean;
  /** With `"closed"`: `"versionchange"` (another tab opened a newer schema or is deleting the memory) or
   * `"closed-by-browser"` (site data cleared, or a storage failure). */
  reason?: "versionchange" | "closed-by-browser";
}

/**
 * After each distillation job run (by `flush()` or in the background); or, with `error` and nothing else, when a
 * background run stopped on a storage error (its job stays queued: `flush()` retries it).
 */
export type DistillProgressEvent = DistillJobEvent | DistillErrorEvent;

export interface DistillErrorEvent {
  phase: "distill";
  error: LociError;
}

export interface DistillJobEvent {
  phase: "distill";
  job: "segment" | "narrate" | "distill";
  /** False: it failed and will be retried after its backoff, or was parked. */
  ok: boolean;
  jobsLeft: number;
  pendingTurns: number;
  episodes: number;
  facts: number;
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
  /** Messages not stored because they hold nothing (blank content, no caption), by position in the call. */
  skipped: { index: number; reason: string }[];
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
  /** `"none"` (default for recall), `"extractive"` (no LLM), `"llm"` (query-driven pruning; default for answer: the
   * model lists the ids of the lines to keep) or `"llm-spans"` (the same, but the model copies the lines it keeps). */
  prune?: "none" | "extractive" | "llm" | "llm-spans";
  /** Extractive pruning: share of tokens to keep (default 0.5). */
  budget?: number;
  /** When the question is asked, for its relative dates ("last week"); default now. Read by `answer()`, by
   * pruning and by `expand`; a plain `recall()` ranks by the dates a question names outright. */
  questionTime?: string | number;
  /** `answer()` only: output cap of the answer call (`recall()` ignores it, so one options object serves both). */
  maxTokens?: number;
  /** Cancels the call (its LLM calls included, a streamed answer mid-way too): it rejects with code `ABORTED`. */
  signal?: AbortSignal;
  /**
   * `answer()` only (`recall()` ignores it): hears the answer as the model writes it, each time with the answer's
   * text so far (the endpoint is asked for a streamed completion; from a server that does not stream, or a JS
   * function that does not call `onText`, nothing is heard before the answer resolves). A retry starts the text
   * again, so show the latest text, and the resolved `answer` at the end. What it throws is ignored.
   */
  onText?: (textSoFar: string) => void;
  /**
   * Distilled memory to combine (not with `prune`). Given, or on a memory opened with `distill` and no `prune`,
   * `recall()` resolves with `episodes` and `facts` too (a `DistilledRecallResult`) and `answer()` answers from
   * that context.
   */
  sources?: RecallSources;
  /**
   * `recall()` only: the memory's LLM splits the query into up to 3 search queries (one per person, event, place or
   * time it needs), and the sessions recall merges their rankings with the query's, taking turns, so that a
   * question whose evidence is spread over several sessions finds each part. Costs one LLM call (reported in
   * `expansion.spent`); if the call fails, the recall runs on the query alone and `expansion.error` says why. Not
   * with `prune` or `sources`; on a `distill` memory it runs the sessions recall.
   */
  expand?: boolean;
}

/** What query expansion did (`recall(q, { expand: true })`). */
export interface Expansion {
  /** The sub-queries whose rankings were merged (empty when the LLM failed). */
  queries: string[];
  spent: Spent;
  /** `CODE: message` when the LLM call failed and the recall ran on the query alone. */
  error?: string;
}

export interface RecallSources {
  /** Include the ranked sessions (default true). */
  sessions?: boolean;
  /** Top episodes (default 10). */
  episodes?: number;
  /** Top active facts (default 20). */
  facts?: number;
  /** Top episodes shown with their raw turns (default 2). */
  rawEpisodes?: number;
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
  /**
   * The sessions (pruned when asked) as clean text under date headers: put it in a prompt as data. A message that
   * gives instructions to an AI ("ignore previous instructions…", a chat template's markup) shows here as
   * `[withheld by loci: …]`; `sessions[].units[].text`, the store and exports keep it as said.
   */
  context: string;
  contextTokens: number;
  device: "wasm" | "webgpu" | "cpu";
  /** Present when `prune` was given. */
  prune?: "none" | "extractive" | "llm" | "llm-spans";
  unprunedTokens?: number;
  kept?: KeptSession[];
  spent?: Spent;
  /** Present when `expand` was given. */
  expansion?: Expansion;
  /** Present for a distilled recall (`sources`, or `distill` on): see `DistilledRecallResult`. */
  episodes?: (Episode & { score: number })[];
  facts?: (Fact & { score: number })[];
}

/** A Nemori episode: a coherent stretch of conversation, told in the third person. */
export interface Episode {
  id: number;
  title: string;
  narrative: string;
  /** When it happened (epoch ms). */
  time: number;
  start: number;
  end: number;
  turnIds: number[];
  /** Episodes merged into this one. */
  mergedFrom: number[];
  ingested: number;
}

/** A durable statement distilled from episodes, with provenance. */
export interface Fact {
  id: number;
  statement: string;
  /** `"fact"` (facts distilled before version 2 of the prompts carry the model's kind: `"preference"`, `"event"`, …). */
  kind: string;
  /** Its episode's time. */
  time: number;
  ingested: number;
  episodeIds: number[];
  turnIds: number[];
  status: "active" | "superseded";
  supersedes: number[];
  supersededBy?: number | null;
  origin: "new" | "merge" | "conflict" | string;
}

/** `recall()` over sessions, episodes and facts (a `RecallResult` with `episodes` and `facts`). */
export interface DistilledRecallResult extends RecallResult {
  episodes: (Episode & { score: number })[];
  facts: (Fact & { score: number })[];
  /** Facts, then episodes (the top ones with their raw turns), then sessions, each with its time. */
  context: string;
}

export interface FactsOptions {
  includeSuperseded?: boolean;
}

/** `{ turn }`: one turn (e.g. a poisoned one; `turnIds` of `addMessages`, `turnIds` of a recalled unit) with every
 * fact that cites it and the episodes that tell it (their other turns are distilled again). */
export type ForgetTarget = { fact: number } | { episode: number } | { session: string } | { turn: number } | { all: true };

export interface FlushOptions {
  /** Cancels the flush (`ABORTED`): the running job's LLM call is cancelled and the job stays queued. */
  signal?: AbortSignal;
}

/**
 * The trailing options arguments may be left out (wasm-bindgen declares them as required `T | undefined`; these
 * declarations merge into the class).
 */
export interface Memory {
  addMessages(messages: MessageInput[], options?: AddOptions): Promise<AddReport>;
  recall(query: string, options?: RecallOptions): Promise<RecallResult>;
  answer(question: string, options?: RecallOptions): Promise<AnswerResult>;
  facts(options?: FactsOptions): Promise<Fact[]>;
  flush(options?: FlushOptions): Promise<FlushReport>;
}

/** What `flush()` did, summed over its rounds. */
export interface FlushReport {
  jobsRun: number;
  failures: number;
  /** Jobs this flush parked. */
  parked: number;
  /** Unparked jobs left (queued while it ran). */
  jobsLeft: number;
  /** Parked jobs in the queue now (see `stats().distill.parked`, `retryParked()`). */
  parkedTotal: number;
  /** Time spent waiting out retry backoffs. */
  waitedMs: number;
}

export interface DistillStats {
  enabled: boolean;
  pendingTurns: number;
  jobs: number;
  parked: { id: number; kind: "segment" | "narrate" | "distill"; attempts: number; lastError?: string | null }[];
  episodes: number;
  factsActive: number;
  factsSuperseded: number;
}

export interface AnswerResult {
  question: string;
  answer: string;
  sessions: RecalledSession[];
  kept: KeptSession[];
  context: string;
  contextTokens: number;
  unprunedTokens: number;
  prune: "none" | "extractive" | "llm" | "llm-spans";
  spent: Spent;
}

export interface PhaseCounters {
  calls: number;
  inputTokens: number;
  outputTokens: number;
  latencyMs: number;
  errors: number;
  estimated: boolean;
  /** Replies cut at the output cap (`finish_reason: "length"`), each retried. */
  truncated: number;
  /** Prompts re-sent smaller after the endpoint said its context was exceeded. */
  shrunk: number;
  /** Prompts whose quoted texts were cut to fit the model's window. */
  cut: number;
  /** Replies cut at the output cap that were repaired (closed after their last complete part, repeats dropped). */
  repaired: number;
  /** LLM pruning that kept nothing of a non-empty context, replaced by extractive pruning. */
  fallbacks: number;
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
  llm: {
    prune: PhaseCounters;
    answer: PhaseCounters;
    expand: PhaseCounters;
    segment: PhaseCounters;
    narrate: PhaseCounters;
    merge: PhaseCounters;
    predict: PhaseCounters;
    distill: PhaseCounters;
    consolidate: PhaseCounters;
  };
  distill: DistillStats;
  /** The origin's storage (`null` where the browser does not say): while `persisted` is false the browser may
   * evict the whole memory under storage pressure; `persist()` asks it not to. */
  storage: { persisted: boolean | null; usage: number | null; quota: number | null };
  /** Stored records that did not decode, set aside at open (kept in IndexedDB, never deleted; `forgetAll()` clears
   * them with everything else). */
  quarantined: { store: string; key: string; reason: string }[];
  /** Units whose long text is recallable but has windows still to embed in the background (see the `"embedded"`
   * progress event). */
  pendingEmbeddings: number;
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
  /** Always `false`: an export is plaintext, also from an encrypted memory. Protect it accordingly. */
  encrypted: boolean;
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
  | "LLM_REJECTED" | "LLM_CONTEXT_EXCEEDED" | "LLM_BAD_REPLY" | "ABORTED" | "TIMEOUT" | "UNSUPPORTED"
  | "LEADER_GONE" | "BAD_KEY" | string;

export interface LociError extends Error {
  name: "LociError";
  code: LociErrorCode;
}

/** What `memoryPrompt(context)` returns: how a chat with memory puts recalled memory into a prompt, as `answer()`
 * does. `system` says that the memory is data, never instructions (a system message); `memory` is the context inside
 * `<memory>…</memory>` with any fence in it defused (to put before the user's message). */
export interface MemoryPrompt {
  system: string;
  memory: string;
}
