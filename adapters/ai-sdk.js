// loci/ai-sdk: long-term memory for any Vercel AI SDK language model, as a middleware.
//
//   const model = wrapLanguageModel({ model: provider("…"), middleware: lociMemory(memory, { k: 3 }) });
//
// Before each call it recalls with the last user message and puts the evidence into the prompt the way `answer()`
// does: the memory fenced in `<memory>…</memory>` (any fence inside it defused) before the user's message, and a
// system message saying it is data, never instructions (both from the wasm's `memoryPrompt`). After the call it
// stores the user's message and the model's reply (a streamed reply when its stream ends). Nothing else is sent
// anywhere: the provider makes the only request.
import { memoryPrompt } from "../pkg/loci.js";
import { checkMemory, checkOptions, checkSession, invalid, recallOptions } from "./shared.js";

const WHERE = "lociMemory";
const KNOWN = ["k", "prune", "method", "session", "store", "onError"];

/** The text of a prompt message's text parts. */
const textOf = (message) => (Array.isArray(message.content) ? message.content : [])
  .filter((p) => p && p.type === "text" && typeof p.text === "string").map((p) => p.text).join("\n");

/** @type {(memory: import("../pkg/loci.js").Memory, options?: import("./ai-sdk.js").LociMemoryOptions) => any} */
export function lociMemory(memory, options) {
  checkMemory(memory, WHERE, ["recall", "addMessages"]);
  const opts = checkOptions(options, WHERE, KNOWN);
  const recall = recallOptions(opts, WHERE);
  checkSession(opts.session, WHERE);
  if (opts.store !== undefined && typeof opts.store !== "boolean") throw invalid(`${WHERE}: \`store\` must be a boolean`);
  if (opts.onError !== undefined && typeof opts.onError !== "function") throw invalid(`${WHERE}: \`onError\` must be a function`);
  const store = opts.store !== false;
  // What each transformed call must store, found again by its params object (the one wrapGenerate/wrapStream get).
  const calls = new WeakMap();

  // An error of loci's own (recall, store): to `onError` when given (the call goes on without memory), else thrown.
  const failed = (error) => {
    if (!opts.onError) throw error;
    try { opts.onError(error); } catch { /* the handler's own failure is not the call's */ }
  };

  async function remember(call, reply) {
    if (!store || !call) return;
    const messages = [];
    if (call.user) messages.push({ role: "user", content: call.user });
    if (reply.trim()) messages.push({ role: "assistant", content: reply });
    if (!messages.length) return;
    try {
      await memory.addMessages(messages, opts.session === undefined ? {} : { session: opts.session });
    } catch (error) {
      failed(error);
    }
  }

  return {
    specificationVersion: "v4",
    async transformParams({ params }) {
      const prompt = Array.isArray(params.prompt) ? params.prompt : [];
      const last = prompt.length - 1;
      let at = last;
      while (at >= 0 && prompt[at].role !== "user") at--;
      const question = at >= 0 ? textOf(prompt[at]) : "";
      // The user's message is stored only when it is the one this call answers (not again on a tool step).
      const call = { user: at === last ? question : "" };
      let next = prompt;
      if (question.trim()) {
        let context = "";
        try {
          // The call's abort signal cancels the recall too (an `llm` prune's call included).
          const signal = params.abortSignal ? { signal: params.abortSignal } : {};
          context = (await memory.recall(question, { ...recall, ...signal })).context;
        } catch (error) {
          if (error?.code === "ABORTED") throw error; // the caller's own abort, not a failure of memory
          failed(error);
        }
        if (context.trim()) {
          const { system, memory: fenced } = memoryPrompt(context);
          const content = [...prompt[at].content];
          const first = content.findIndex((p) => p && p.type === "text");
          if (first >= 0) content[first] = { ...content[first], text: `${fenced}\n\n${content[first].text}` };
          else content.unshift({ type: "text", text: fenced });
          next = prompt.map((m, i) => (i === at ? { ...m, content } : m));
          // The rule goes after the prompt's own system messages (some providers take them only at the start).
          let lead = 0;
          while (lead < next.length && next[lead].role === "system") lead++;
          next = [...next.slice(0, lead), { role: "system", content: system }, ...next.slice(lead)];
        }
      }
      const transformed = { ...params, prompt: next };
      calls.set(transformed, call);
      return transformed;
    },
    async wrapGenerate({ doGenerate, params }) {
      const result = await doGenerate();
      const reply = (result.content ?? []).filter((p) => p.type === "text").map((p) => p.text).join("");
      await remember(calls.get(params), reply);
      return result;
    },
    async wrapStream({ doStream, params }) {
      const { stream, ...rest } = await doStream();
      const call = calls.get(params);
      let reply = "";
      const tee = new TransformStream({
        transform(part, controller) {
          if (part && part.type === "text-delta" && typeof part.delta === "string") reply += part.delta;
          controller.enqueue(part);
        },
        // The stream ended whole (an aborted or failed one never gets here: nothing half-said is remembered).
        async flush(controller) {
          try {
            await remember(call, reply);
          } catch (error) {
            controller.enqueue({ type: "error", error });
          }
        },
      });
      return { stream: stream.pipeThrough(tee), ...rest };
    },
  };
}
