// A scripted OpenAI-compatible chat-completions server for loci's tests (native and browser). No dependencies.
//
//   node tests/llm-server/server.mjs [port] [--exit-with-stdin]   (or PORT=…; 0 = any free port) → "READY <port>"
//
// Endpoints:
//   POST /v1/chat/completions   (any path ending in /chat/completions) — answers with the next scripted step, or
//                               in the default mode (below) when the script is empty.
//   POST /__script              body: [step, …] or {steps: [step, …]} — replaces the queue of steps.
//   POST /__reset               empties the queue and the log, and resets the config.
//   POST /__config              body: {contextTokens?, latencyMs?, slots?, pieceMs?, refuse?, reasoning?} — a model's
//                               limits, for every later request (pieceMs: a streamed reply's pieces come this far
//                               apart; with wholeAfterPieces: true, a reply not streamed comes when its last piece
//                               would have):
//                               contextTokens: a request whose prompt (≈ 4 characters per token, + 4 per message)
//                               plus its max_tokens exceeds this gets 400 "… exceeds the available context size …"
//                               (llama.cpp's wording); latencyMs: every answer waits this long (a slow model);
//                               slots: at most this many requests are worked on at once, the others wait in line
//                               (llama.cpp serves one by default); a request whose client went away leaves its slot.
//                               refuse: ["max_tokens", "temperature", "frequency_penalty"] — a request that has one
//                               of them gets the 400 OpenAI's reasoning models give (the first in that order, their
//                               wording, `param` and `code`); a temperature of 1 is taken.
//                               reasoning: {tokens, style: "hidden" | "think"} — a reasoning model, which thinks
//                               `tokens` tokens (4 characters each) before it answers, within the request's cap
//                               (`max_completion_tokens` or `max_tokens`): "hidden" spends them out of sight and
//                               counts them in `usage.completion_tokens_details.reasoning_tokens` (OpenAI); "think"
//                               writes them into the content inside <think>…</think> (DeepSeek-R1 on a plain
//                               server). A cap that does not hold thoughts and answer cuts the reply there,
//                               finish_reason "length".
//   GET  /__log                 every request received on the chat endpoint: {path, headers, body, at}.
//   GET  /__sent                every reply sent whole (its last byte written), in order: {phase, at}, where phase
//                               is the distillation step the request's system prompt asks for ("segment", "narrate",
//                               "merge", "predict", "distill", "consolidate") or "other".
//   GET  /__wait?phase=P&count=N&timeoutMs=T   answers {sent: n} once N replies of phase P were sent whole (at
//                               once if they already were), or 408 after T ms (default 30,000): a test that must
//                               act right after a step's reply (crash the page as the step commits) waits here.
//   GET  /__health              "ok".
//   GET  /__fixture/locomo/N    {sampleId, conversation, questions} of LoCoMo sample N, read from ../shared/data/locomo (or
//                               $LOCI_LOCOMO) at request time, for browser tests that cannot read files (the data
//                               is never committed); 404 when it is not there.
// Steps (each consumed by one request; `times: n` repeats a step n times; `delayMs` waits before answering):
//   {reply: "text", usage?: {prompt_tokens, completion_tokens} | null}   200 with that message content
//   {raw: "text"}            the same (for model output that is not JSON: "not json", "{\"trunc"…)
//   {fenced: {...}}          content = prose + ```json fence around the object + prose
//   {cut: n}                 the default-mode reply cut after n characters, finish_reason "length" (a model that
//                            rambled to its token cap)
//   {status: 429, retryAfter: 1, message?}   an error status (any), with Retry-After when given
//   {hang: true}             never answers (the client must time out)
//   {drop: true}             destroys the connection without an HTTP response
//   {body: "..."}            200 with this raw HTTP body (a malformed completion)
//   {body400: {...}}         400 with this body (an error exactly as some server words it)
//   {rejectResponseFormat: true}   400 "response_format is not supported" if the request has response_format,
//                            else answers in the default mode
// Default mode (no script): answers from the prompt, deterministically. It reads the <memory>…</memory> block and
// the "Question:" line of the last user message and picks memory lines sharing a word (≥ 4 letters) with the
// question: QDP prompts (asking for {"keep"}) get those lines' ids, expansion prompts ({"queries"}) get the question
// cut at commas and "and", answer prompts ({"answer"}) get the first such
// line's text, judge prompts ({"label"}) get CORRECT when the generated answer contains the gold answer's words;
// anything else gets the matching lines echoed. Distillation prompts (asking for {"groups"}, {"episodes"},
// {"merges"}, {"predictions"}, {"facts"}, {"decisions"}) get schema-valid replies derived from the memory block:
// groups of 5 lines, narratives that retell the lines, merges when titles share two words, facts from long
// statements, MERGE when a fact's words overlap an existing one's by half, CONFLICT when the same speaker's do by 40%
// (see distillReply).
// CORS: any origin; Authorization and Content-Type allowed; Retry-After exposed.

import http from "node:http";
import { readFile } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const LOCOMO = process.env.LOCI_LOCOMO ??
  resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "shared", "data", "locomo", "locomo10.json");

const port = Number(process.argv.slice(2).find((a) => /^[0-9]+$/.test(a)) ?? process.env.PORT ?? 0);
let queue = [];
let log = [];
let config = {};
const sockets = new Set();
// Replies sent whole, by distillation step (see /__sent, /__wait), and the waits on them.
let sent = [];
let sentWaits = [];
const PHASES = [['{"groups"', "segment"], ['{"episodes"', "narrate"], ['{"merges"', "merge"],
  ['{"predictions"', "predict"], ['{"facts"', "distill"], ['{"decisions"', "consolidate"]];
function phaseOf(request) {
  const system = (request.messages ?? []).filter((m) => m.role === "system").map((m) => m.content).join("\n");
  return PHASES.find(([key]) => system.includes(key))?.[1] ?? "other";
}
const sentCount = (phase) => sent.filter((s) => s.phase === phase).length;
function noteSent(phase) {
  sent.push({ phase, at: Date.now() });
  sentWaits = sentWaits.filter((w) => !w.check());
}

const STOP = new Set(["what", "when", "where", "which", "who", "whom", "whose", "why", "how", "does", "did", "have",
  "has", "had", "with", "that", "this", "from", "about", "into", "they", "their", "there", "were", "would", "could",
  "should", "will", "your", "been", "being", "than", "then", "them", "some", "kind"]);

function words(text) {
  return (text.toLowerCase().match(/[a-z0-9]{4,}/g) ?? []).filter((w) => !STOP.has(w));
}

function cors(res) {
  res.setHeader("Access-Control-Allow-Origin", "*");
  res.setHeader("Access-Control-Allow-Methods", "POST, GET, OPTIONS");
  res.setHeader("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Test-Header");
  res.setHeader("Access-Control-Expose-Headers", "Retry-After");
  res.setHeader("Access-Control-Max-Age", "600");
}

function send(res, status, body, headers = {}) {
  const text = typeof body === "string" ? body : JSON.stringify(body);
  res.writeHead(status, { "Content-Type": "application/json", ...headers });
  res.end(text);
}

function promptTokens(request) {
  return (request.messages ?? []).reduce((n, m) => n + Math.ceil(String(m.content ?? "").length / 4) + 4, 0);
}

function completion(content, request, usage, finishReason = "stop") {
  const promptChars = (request.messages ?? []).reduce((n, m) => n + String(m.content ?? "").length, 0);
  const body = {
    id: `chatcmpl-test-${log.length}`,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: request.model ?? "test",
    choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: finishReason }],
  };
  if (usage !== null) {
    body.usage = usage ?? {
      prompt_tokens: Math.ceil(promptChars / 4),
      completion_tokens: Math.ceil(content.length / 4),
      total_tokens: Math.ceil(promptChars / 4) + Math.ceil(content.length / 4),
    };
  }
  return body;
}

const REFUSALS = {
  max_tokens: { message: "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
    type: "invalid_request_error", param: "max_tokens", code: "unsupported_parameter" },
  temperature: { message: "Unsupported value: 'temperature' does not support 0 with this model. Only the default (1) value is supported.",
    type: "invalid_request_error", param: "temperature", code: "unsupported_value" },
  frequency_penalty: { message: "Unsupported parameter: 'frequency_penalty' is not supported with this model.",
    type: "invalid_request_error", param: "frequency_penalty", code: "unsupported_parameter" },
};

function refusal(request) {
  const refused = (config.refuse ?? []).filter((p) => request[p] !== undefined && !(p === "temperature" && request[p] === 1));
  const first = Object.keys(REFUSALS).find((p) => refused.includes(p));
  return first && REFUSALS[first];
}

// `config.reasoning`: the model thinks before it answers, all within the request's cap (see the header).
function reasoned(body, request) {
  const r = config.reasoning;
  if (!r) return body;
  const cap = request.max_completion_tokens ?? request.max_tokens ?? Infinity;
  const choice = body.choices[0];
  const thought = "They want a JSON object such as {\"keep\": []}, so let me think. ".repeat(r.tokens).slice(0, r.tokens * 4);
  const hidden = r.style !== "think" ? r.tokens : 0;
  const full = r.style === "think" ? `<think>${thought}</think>\n\n${choice.message.content}` : choice.message.content;
  const room = Math.max(0, (cap - hidden) * 4);
  if (cap < hidden || full.length > room) {
    choice.message.content = full.slice(0, room);
    choice.finish_reason = "length";
  } else {
    choice.message.content = full;
  }
  if (body.usage) {
    body.usage.completion_tokens = Math.min(cap, hidden + Math.ceil(choice.message.content.length / 4));
    if (hidden) body.usage.completion_tokens_details = { reasoning_tokens: Math.min(cap, hidden) };
  }
  return body;
}

// A completion as the client asked for it: one JSON body, or with `stream: true` server-sent events as OpenAI sends
// them (the content in pieces of a few characters, `config.pieceMs` apart; the finish reason in the last piece; the
// usage in a chunk of its own when `stream_options.include_usage`; then `[DONE]`).
async function sendCompletion(res, request, body) {
  body = reasoned(body, request);
  if (request.stream !== true) {
    // `config.wholeAfterPieces`: a reply not streamed comes when all its pieces would have been written.
    const pieces = Math.ceil(body.choices[0].message.content.length / 5);
    if (config.wholeAfterPieces && config.pieceMs) await new Promise((r) => setTimeout(r, pieces * config.pieceMs));
    return send(res, 200, body);
  }
  res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
  const event = (choices, extra = {}) => {
    const chunk = { id: body.id, object: "chat.completion.chunk", created: body.created, model: body.model, choices, ...extra };
    res.write(`data: ${JSON.stringify(chunk)}\n\n`);
  };
  const content = body.choices[0].message.content;
  event([{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }]);
  const pieces = content.match(/[\s\S]{1,5}/g) ?? [];
  for (const piece of pieces) {
    if (res.destroyed) return;
    if (config.pieceMs) await new Promise((r) => setTimeout(r, config.pieceMs));
    event([{ index: 0, delta: { content: piece }, finish_reason: null }]);
  }
  event([{ index: 0, delta: {}, finish_reason: body.choices[0].finish_reason }]);
  if (request.stream_options?.include_usage && body.usage) event([], { usage: body.usage });
  res.end("data: [DONE]\n\n");
}

function defaultReply(request) {
  const messages = request.messages ?? [];
  const system = messages.filter((m) => m.role === "system").map((m) => m.content).join("\n");
  // The prompt's user message (a corrective retry appends another user message after the first reply).
  const users = messages.filter((m) => m.role === "user").map((m) => m.content);
  const user = users.find((u) => u.includes("<memory>")) ?? users[users.length - 1] ?? "";
  const memory = (user.match(/<memory>\n?([\s\S]*?)\n?<\/memory>/) ?? [])[1] ?? "";
  const question = (user.match(/^Question:\s*(.*)$/m) ?? [])[1] ?? "";
  const qWords = new Set(words(question));
  const lines = memory.split("\n").filter((l) => l.trim() && !l.startsWith("#"));
  const matching = lines.filter((l) => words(l.replace(/^\[[0-9.]+\]\s*/, "")).some((w) => qWords.has(w)));
  const distilled = distillReply(system, memory);
  if (distilled !== undefined) return JSON.stringify(distilled);
  if (system.includes('{"keep"')) {
    const ids = matching.map((l) => (l.match(/^\[([0-9]+\.[0-9]+)\]/) ?? [])[1]).filter(Boolean);
    return JSON.stringify({ keep: ids });
  }
  if (system.includes('{"queries"')) {
    // Query expansion: the question's parts, cut at commas and "and".
    const parts = question.split(/,|\band\b/).map((p) => p.replace(/[?.!]+$/, "").trim()).filter(Boolean);
    return JSON.stringify({ queries: parts.slice(0, 3) });
  }
  if (system.includes('{"answer"')) {
    const first = matching[0]?.replace(/^\[[0-9.]+\]\s*/, "");
    return JSON.stringify({ answer: first ?? "I don't know" });
  }
  if (system.includes('{"label"')) {
    const gold = (user.match(/^Gold answer:\s*(.*)$/m) ?? [])[1] ?? "";
    const generated = ((user.match(/<answer>([\s\S]*?)<\/answer>/) ?? [])[1] ?? "").toLowerCase();
    const goldWords = words(gold);
    const ok = goldWords.length > 0 && goldWords.every((w) => generated.includes(w));
    return JSON.stringify({ label: ok ? "CORRECT" : "WRONG" });
  }
  return matching.join("\n") || "I don't know";
}

// Distillation prompts (src/llm/prompts/distill.rs), recognised by the JSON they ask for, answered with
// schema-valid JSON derived from the fenced memory only, so the same prompt always gets the same reply.
function parseLine(l) {
  const m = l.match(/^\[([0-9.]+)\] \(([0-9-]+)[^)]*\) ([^:]+): (.*)$/);
  return m ? { label: m[1], date: m[2], speaker: m[3], text: m[4] } : null;
}

function sections(memory, header) {
  const out = [];
  for (const block of memory.split(/\n(?=## )/)) {
    const m = block.match(header);
    if (m) out.push({ n: Number(m[1]), head: m, body: block.split("\n").slice(1) });
  }
  return out;
}

function firstWords(text, n) {
  return text.split(/\s+/).filter(Boolean).slice(0, n).join(" ");
}

function distillReply(system, memory) {
  if (system.includes('{"groups"')) {
    const n = memory.split("\n").filter((l) => parseLine(l)).length;
    const groups = [];
    for (let i = 0; i < n; i += 5) groups.push([...Array(Math.min(5, n - i)).keys()].map((k) => i + k));
    return { groups };
  }
  if (system.includes('{"episodes"')) {
    return {
      episodes: sections(memory, /^## Group ([0-9]+)/).map(({ n, body }) => {
        const lines = body.map(parseLine).filter(Boolean);
        return {
          group: n,
          title: firstWords(lines[0]?.text ?? "Conversation", 6),
          narrative: lines.map((l) => `${l.speaker} said: ${l.text}`).join(" ").slice(0, 600),
          date: lines[0]?.date ?? "",
        };
      }),
    };
  }
  if (system.includes('{"merges"')) {
    return {
      merges: sections(memory, /^## New episode ([0-9]+)/).map(({ n, body }) => {
        const title = (body.find((l) => l.startsWith("Title: ")) ?? "").slice(7);
        const narrative = (body.find((l) => l.startsWith("Narrative: ")) ?? "").slice(11);
        const tWords = new Set(words(title));
        for (let i = 0; i < body.length; i++) {
          const c = body[i].match(/^### Candidate (E[0-9]+)/);
          if (!c) continue;
          const text = body[i + 1] ?? "";
          if (words(text.split(" ").slice(0, 6).join(" ")).filter((w) => tWords.has(w)).length >= 2) {
            return { episode: n, merge_with: c[1], title, narrative: `${text} ${narrative}`.slice(0, 1500) };
          }
        }
        return { episode: n, merge_with: null, title: "", narrative: "" };
      }),
    };
  }
  if (system.includes('{"predictions"')) {
    return {
      predictions: sections(memory, /^## Episode ([0-9]+)/).map(({ n, body }) => ({
        episode: n,
        prediction: body.filter((l) => l.startsWith("- ")).map((l) => l.slice(2)).join(" "),
      })),
    };
  }
  if (system.includes('{"facts"')) {
    const facts = [];
    for (const { n, body } of sections(memory, /^## Episode ([0-9]+):/)) {
      const prediction = (body.find((l) => l.startsWith("Prediction: ")) ?? "").slice(12);
      let kept = 0;
      // One entry per line, in order (the distill schema's shape); an empty fact for a line that states none.
      for (const l of body.map(parseLine).filter(Boolean)) {
        const statement = `${l.speaker} said: ${firstWords(l.text, 15)}`;
        const skip = kept >= 2 || l.text.includes("?") || l.text.split(/\s+/).length < 12 || prediction.includes(statement);
        facts.push({ line: l.label, statement: skip ? "" : statement });
        if (!skip) kept++;
      }
    }
    return { facts };
  }
  if (system.includes('{"decisions"')) {
    return {
      decisions: sections(memory, /^## New fact ([0-9]+): (.*)$/m).map(({ n, head, body }) => {
        const mine = new Set(words(head[2]));
        for (const l of body) {
          const c = l.match(/^- \[(F[0-9]+)\] (.*)$/);
          if (!c) continue;
          const theirs = new Set(words(c[2]));
          const shared = [...mine].filter((w) => theirs.has(w)).length;
          const union = new Set([...mine, ...theirs]).size;
          if (union > 0 && shared / union >= 0.5) {
            const statement = head[2].length >= c[2].length ? head[2] : c[2];
            return { fact: n, action: "MERGE", targets: [c[1]], statement };
          }
          // The same speaker saying something close but different: the newer statement updates the older one.
          const speaker = (s) => s.split(" said: ")[0];
          if (union > 0 && shared / union >= 0.4 && speaker(head[2]) === speaker(c[2])) {
            return { fact: n, action: "CONFLICT", targets: [c[1]], statement: head[2] };
          }
        }
        return { fact: n, action: "NEW", targets: [], statement: "" };
      }),
    };
  }
  return undefined;
}

// The requests waiting for a slot (`config.slots`), and how many are being worked on.
let waiting = [];
let working = 0;

async function chat(req, res, request) {
  if (!config.slots) return answer(req, res, request);
  let state = "waiting"; // → "working" → "done"
  let start;
  const started = new Promise((resolve) => { start = resolve; });
  const take = () => { state = "working"; working++; start(); };
  const leave = () => {
    if (state === "working") { working--; next(); }
    if (state === "waiting") waiting = waiting.filter((t) => t !== take);
    state = "done";
  };
  res.on("close", leave); // answered, or the client went away (an aborted call) while waiting or worked on
  waiting.push(take);
  next();
  await started;
  try {
    await answer(req, res, request);
  } finally {
    if (res.writableEnded) leave();
  }
}

function next() {
  while (working < config.slots && waiting.length) waiting.shift()();
}

async function answer(req, res, request) {
  if (config.latencyMs) await new Promise((r) => setTimeout(r, config.latencyMs));
  if (config.contextTokens) {
    const needed = promptTokens(request) + (request.max_tokens ?? request.max_completion_tokens ?? 0);
    if (needed > config.contextTokens) {
      return send(res, 400, { error: { type: "exceed_context_size_error", message:
        `the request (${needed} tokens) exceeds the available context size (${config.contextTokens} tokens), try increasing it` } });
    }
  }
  const refused = refusal(request);
  if (refused) return send(res, 400, { error: refused });
  let step = queue.shift();
  if (step && step.times > 1) queue.unshift({ ...step, times: step.times - 1 });
  if (step?.delayMs) await new Promise((r) => setTimeout(r, step.delayMs));
  if (step?.cut !== undefined) {
    return sendCompletion(res, request, completion(defaultReply(request).slice(0, step.cut), request, undefined, "length"));
  }
  if (!step || (step.rejectResponseFormat && !request.response_format)) {
    return sendCompletion(res, request, completion(defaultReply(request), request));
  }
  if (step.hang) return; // never answer; the socket closes when the client gives up or the server stops
  if (step.drop) return req.socket.destroy();
  if (step.rejectResponseFormat) {
    return send(res, 400, { error: { message: "response_format is not supported by this server", type: "invalid_request_error" } });
  }
  if (step.status) {
    const headers = step.retryAfter !== undefined ? { "Retry-After": String(step.retryAfter) } : {};
    return send(res, step.status, { error: { message: step.message ?? `scripted status ${step.status}` } }, headers);
  }
  if (step.body !== undefined) return send(res, 200, step.body);
  if (step.body400 !== undefined) return send(res, 400, step.body400);
  if (step.fenced !== undefined) {
    const content = "Here is the JSON you asked for:\n```json\n" + JSON.stringify(step.fenced, null, 2) + "\n```\nAnything else?";
    return sendCompletion(res, request, completion(content, request, step.usage));
  }
  const content = step.reply ?? step.raw ?? "";
  return sendCompletion(res, request, completion(String(content), request, step.usage));
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

const server = http.createServer(async (req, res) => {
  cors(res);
  const path = new URL(req.url, "http://x").pathname;
  try {
    if (req.method === "OPTIONS") {
      res.writeHead(204);
      return res.end();
    }
    if (req.method === "GET" && path === "/__health") return send(res, 200, "ok");
    if (req.method === "GET" && path === "/__log") return send(res, 200, log);
    if (req.method === "GET" && path === "/__sent") return send(res, 200, sent);
    if (req.method === "GET" && path === "/__wait") {
      const q = new URL(req.url, "http://x").searchParams;
      const phase = q.get("phase") ?? "other";
      const count = Number(q.get("count") ?? 1);
      const wait = { check: () => {
        if (sentCount(phase) < count) return false;
        clearTimeout(wait.timer);
        send(res, 200, { sent: sentCount(phase) });
        return true;
      } };
      if (wait.check()) return;
      wait.timer = setTimeout(() => {
        sentWaits = sentWaits.filter((w) => w !== wait);
        send(res, 408, { error: { message: `${sentCount(phase)} of ${count} ${phase} replies sent` } });
      }, Number(q.get("timeoutMs") ?? 30_000));
      sentWaits.push(wait);
      return;
    }
    const fixture = /^\/__fixture\/locomo\/([0-9]+)$/.exec(path);
    if (req.method === "GET" && fixture) {
      let data;
      try {
        data = JSON.parse(await readFile(LOCOMO, "utf8"));
      } catch (e) {
        return send(res, 404, { error: { message: `${LOCOMO}: ${e.message}` } });
      }
      const sample = data[Number(fixture[1])];
      if (!sample) return send(res, 404, { error: { message: `no LoCoMo sample ${fixture[1]}` } });
      const questions = (sample.qa ?? []).map((q) => q.question);
      return send(res, 200, { sampleId: sample.sample_id, conversation: sample.conversation, questions });
    }
    if (req.method === "POST" && path === "/__config") {
      config = JSON.parse((await readBody(req)) || "{}");
      return send(res, 200, { ok: true, config });
    }
    if (req.method === "POST" && path === "/__reset") {
      queue = [];
      log = [];
      sent = [];
      config = {};
      return send(res, 200, { ok: true });
    }
    if (req.method === "POST" && path === "/__script") {
      const body = JSON.parse((await readBody(req)) || "[]");
      queue = Array.isArray(body) ? body : body.steps ?? [];
      return send(res, 200, { ok: true, steps: queue.length });
    }
    if (req.method === "POST" && path.endsWith("/chat/completions")) {
      const text = await readBody(req);
      let request;
      try {
        request = JSON.parse(text);
      } catch {
        return send(res, 400, { error: { message: "the request body is not JSON" } });
      }
      log.push({ path, headers: req.headers, body: request, at: Date.now() });
      const phase = phaseOf(request);
      res.on("finish", () => { if (res.statusCode === 200) noteSent(phase); });
      return await chat(req, res, request);
    }
    send(res, 404, { error: { message: `no route ${req.method} ${path}` } });
  } catch (e) {
    send(res, 500, { error: { message: String(e?.message ?? e) } });
  }
});

server.on("connection", (s) => {
  sockets.add(s);
  s.on("close", () => sockets.delete(s));
});

function stop() {
  server.close();
  for (const s of sockets) s.destroy();
  process.exit(0);
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
// With --exit-with-stdin, exit when stdin closes: a test runner that dies (and so closes the pipe) must not leave
// the server behind.
if (process.argv.includes("--exit-with-stdin")) {
  process.stdin.on("end", stop);
  process.stdin.resume();
}

server.listen(port, "127.0.0.1", () => {
  console.log(`READY ${server.address().port}`);
});
