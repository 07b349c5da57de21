import type { LanguageModelMiddleware } from "ai";
import type { LociError, Memory, RecallMethod } from "../pkg/loci.js";

export interface LociMemoryOptions {
  /** Sessions recalled before each call (default 3). */
  k?: number;
  /** Pruning of the recalled sessions (default `"none"`; `"llm"` needs `memory.setLlm`). */
  prune?: "none" | "extractive" | "llm" | "llm-spans";
  /** Recall method (default `"hybrid"`). */
  method?: RecallMethod;
  /** The session the turns are stored in (default: loci's, a pause of 30 minutes starts a new one). */
  session?: string;
  /** Store the user's message and the reply after each call (default true). */
  store?: boolean;
  /**
   * Where loci's own failures go (a recall or a store that failed). Given, the call goes on without memory (or its
   * turns unstored); without it, the call fails with the `LociError` (a stream gets it as an `error` part).
   */
  onError?: (error: LociError) => void;
}

/**
 * A language-model middleware for the Vercel AI SDK (`wrapLanguageModel({ model, middleware: lociMemory(memory) })`):
 * recalls with the last user message before each call and puts the evidence before it, fenced as data (as
 * `answer()` does), and stores the user's message and the reply after the call (a streamed reply when it ends).
 * Wrong options reject at once with a `LociError` of code `INVALID_INPUT`.
 */
export declare function lociMemory(memory: Memory, options?: LociMemoryOptions): LanguageModelMiddleware;
