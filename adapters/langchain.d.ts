import { BaseChatMessageHistory } from "@langchain/core/chat_history";
import type { DocumentInterface } from "@langchain/core/documents";
import type { BaseMessage } from "@langchain/core/messages";
import { BaseRetriever, type BaseRetrieverInput } from "@langchain/core/retrievers";
import type { Memory, RecallMethod } from "../pkg/loci.js";

/** A recalled session's metadata. */
export interface LociDocumentMetadata {
  sessionId: string;
  /** 1 = best. */
  rank: number;
  score: number;
  /** Epoch milliseconds of the session's first and last turns. */
  firstTime: number;
  lastTime: number;
  /** The turns that matched (with `prune`, the turns kept), for `memory.forget({ turn })` or provenance. */
  turnIds: number[];
  unitIds: number[];
}

export interface LociRetrieverInput extends BaseRetrieverInput {
  memory: Memory;
  /** Sessions per query (default 3). */
  k?: number;
  prune?: "none" | "extractive" | "llm" | "llm-spans";
  method?: RecallMethod;
}

/**
 * A LangChain retriever over a loci memory: `invoke(query)` resolves to the best sessions, best first, one
 * `Document` each (its text: the session under its date header, pruned when asked; `id`: the session id).
 */
export declare class LociRetriever extends BaseRetriever<LociDocumentMetadata> {
  lc_namespace: string[];
  constructor(fields: LociRetrieverInput);
  _getRelevantDocuments(query: string): Promise<DocumentInterface<LociDocumentMetadata>[]>;
}

export interface LociChatMessageHistoryInput {
  memory: Memory;
  /** The loci session this history is. */
  session: string;
}

/** A LangChain chat history stored as one session of a loci memory (so what is said is recalled later). */
export declare class LociChatMessageHistory extends BaseChatMessageHistory {
  lc_namespace: string[];
  constructor(fields: LociChatMessageHistoryInput);
  getMessages(): Promise<BaseMessage[]>;
  addMessage(message: BaseMessage): Promise<void>;
  addMessages(messages: BaseMessage[]): Promise<void>;
  addUserMessage(message: string): Promise<void>;
  addAIMessage(message: string): Promise<void>;
  clear(): Promise<void>;
}
