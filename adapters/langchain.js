// loci/langchain: a loci memory behind LangChain.js's interfaces.
//
//   LociRetriever: a BaseRetriever whose documents are recalled sessions (metadata: session id, rank, score,
//                  times, the ids of the turns that matched).
//   LociChatMessageHistory: a BaseChatMessageHistory of one session, stored in the memory (and so recallable).
import { BaseChatMessageHistory } from "@langchain/core/chat_history";
import { Document } from "@langchain/core/documents";
import { AIMessage, ChatMessage, HumanMessage, SystemMessage } from "@langchain/core/messages";
import { BaseRetriever } from "@langchain/core/retrievers";
import { checkMemory, checkOptions, checkSession, invalid, recallOptions } from "./shared.js";

const RETRIEVER_BASE = ["callbacks", "tags", "metadata", "verbose"];

/** Each session's block of a recall's `context` (`### Session <id> (<date>)` and its lines), by session id. */
function blocksBySession(context, sessions) {
  const blocks = context.split(/\n\n(?=### Session )/);
  const out = new Map();
  for (const s of sessions) {
    const block = blocks.find((b) => b.startsWith(`### Session ${s.id} (`));
    if (block !== undefined) out.set(s.id, block);
  }
  return out;
}

export class LociRetriever extends BaseRetriever {
  static lc_name() {
    return "LociRetriever";
  }

  lc_namespace = ["loci", "retrievers"];

  constructor(fields) {
    const where = "LociRetriever";
    const f = checkOptions(fields, where, ["memory", "k", "prune", "method", ...RETRIEVER_BASE]);
    checkMemory(f.memory, where, ["recall"]);
    const recall = recallOptions(f, where);
    const base = {};
    for (const key of RETRIEVER_BASE) if (f[key] !== undefined) base[key] = f[key];
    super(base); // not the memory: LangChain would serialize its fields
    this.memory = f.memory;
    this.recall = { ...recall, order: "rank" };
  }

  async _getRelevantDocuments(query) {
    if (typeof query !== "string") throw invalid("LociRetriever: the query must be a string");
    const r = await this.memory.recall(query, this.recall);
    const blocks = blocksBySession(r.context, r.sessions);
    const kept = new Map((r.kept ?? []).map((k) => [k.id, k.turnIds]));
    return r.sessions.map((s) => {
      const matched = [...new Set(s.units.flatMap((u) => u.turnIds))].sort((a, b) => a - b);
      const turnIds = kept.get(s.id) ?? matched;
      return new Document({
        id: s.id,
        pageContent: blocks.get(s.id) ?? s.units.map((u) => u.text).join("\n"),
        metadata: {
          sessionId: s.id,
          rank: s.rank,
          score: s.score,
          firstTime: s.firstTime,
          lastTime: s.lastTime,
          turnIds,
          unitIds: s.units.map((u) => u.id),
        },
      });
    });
  }
}

/** A LangChain message's role, as loci stores it. */
function roleOf(message) {
  const type = typeof message.getType === "function" ? message.getType() : message.type;
  switch (type) {
    case "human": return "user";
    case "ai": return "assistant";
    case "system": return "system";
    case "generic": return typeof message.role === "string" && message.role ? message.role : "user";
    case "tool": return "tool";
    default: return typeof type === "string" && type ? type : null;
  }
}

/** A LangChain message's text (string content, or the text of its content blocks). */
function textOf(message) {
  const { content } = message;
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content.filter((p) => p && p.type === "text" && typeof p.text === "string").map((p) => p.text).join("\n");
  }
  return null;
}

export class LociChatMessageHistory extends BaseChatMessageHistory {
  static lc_name() {
    return "LociChatMessageHistory";
  }

  lc_namespace = ["loci", "stores", "message"];

  constructor(fields) {
    const where = "LociChatMessageHistory";
    const f = checkOptions(fields, where, ["memory", "session"]);
    checkMemory(f.memory, where, ["addMessages", "sessionTurns", "forget"]);
    checkSession(f.session, where, true);
    super({ session: f.session });
    this.memory = f.memory;
    this.session = f.session;
  }

  /** The session's turns, oldest first: user → HumanMessage, assistant → AIMessage, system → SystemMessage, any
   * other speaker → ChatMessage with that role. Each message's id is its turn's id. */
  async getMessages() {
    const turns = await this.memory.sessionTurns(this.session);
    return turns.map((t) => {
      const fields = { content: t.text, id: String(t.id) };
      switch (t.speaker) {
        case "user": return new HumanMessage(fields);
        case "assistant": return new AIMessage(fields);
        case "system": return new SystemMessage(fields);
        default: return new ChatMessage({ ...fields, role: t.speaker });
      }
    });
  }

  async addMessage(message) {
    await this.addMessages([message]);
  }

  /** One `addMessages` call of the memory: all are stored, or none (a wrong message rejects the batch). */
  async addMessages(messages) {
    if (!Array.isArray(messages)) throw invalid("LociChatMessageHistory.addMessages: messages must be an array");
    const inputs = messages.map((m, i) => {
      const role = m && typeof m === "object" ? roleOf(m) : null;
      const content = role ? textOf(m) : null;
      if (!role || content === null) {
        throw invalid(`LociChatMessageHistory.addMessages: message ${i} is not a LangChain message with text content`);
      }
      return { role, content };
    });
    if (inputs.length) await this.memory.addMessages(inputs, { session: this.session });
  }

  async addUserMessage(message) {
    await this.addMessage(new HumanMessage(message));
  }

  async addAIMessage(message) {
    await this.addMessage(new AIMessage(message));
  }

  /** Forgets the session (its turns leave the memory: recall no longer finds them). */
  async clear() {
    try {
      await this.memory.forget({ session: this.session });
    } catch (error) {
      if (error?.code !== "NOT_FOUND") throw error; // an empty history is already clear
    }
  }
}
