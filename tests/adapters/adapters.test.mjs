// The adapters against the real npm packages they adapt (pinned devDependencies), in headless Chromium (Debian's,
// driven by playwright-core), on a real memory (IndexedDB, the in-page embedder): `loci/ai-sdk` with the AI SDK's
// `generateText` and `streamText` through @ai-sdk/openai-compatible, pointed at the scripted OpenAI-protocol server
// (tests/llm-server); `loci/langchain`'s retriever and chat history through LangChain's public interfaces. The page
// (tests/adapters/page.js) is bundled with esbuild; loci's own module is served from pkg/ as a consumer's would be.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { bundlePage, openTestPage } from "./bundle-page.mjs";
import { serve } from "../../scripts/serve.mjs";
import { launchChromium } from "../e2e/demo-page.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const started = Date.now();
const out = join(root, "target", "adapters-test");

await bundlePage(join(root, "tests", "adapters", "page.js"), out);

const llmServer = spawn("node", [join(root, "tests/llm-server/server.mjs"), "0"], { stdio: ["ignore", "pipe", "inherit"] });
process.on("exit", () => llmServer.kill());
const llmPort = await new Promise((ok) => llmServer.stdout.on("data", (d) => {
  const m = /READY (\d+)/.exec(String(d));
  if (m) ok(m[1]);
}));
const llm = `http://127.0.0.1:${llmPort}`;
const control = async (path, body) => {
  const res = await fetch(`${llm}${path}`, body === undefined ? {} : { method: "POST", body: JSON.stringify(body) });
  assert.ok(res.ok, `${path}: ${res.status}`);
  return res.json();
};

const server = await serve(0, ["target"]);
const origin = `http://127.0.0.1:${server.address().port}`;
const browser = await launchChromium();
let failed = false;
try {
  const { page, requests } = await openTestPage(browser, `${origin}/target/adapters-test/index.html`);
  const ids = await page.evaluate(() => window.adapters.open());

  // --- loci/ai-sdk: generateText ---
  await control("/__reset", {});
  await control("/__script", [{ reply: "Ines is a marine biologist in Porto." }]);
  const generated = await page.evaluate((url) => window.adapters.aiGenerate(url), `${llm}/v1`);
  assert.equal(generated.text, "Ines is a marine biologist in Porto.");
  let log = await control("/__log");
  assert.equal(log.length, 1, "one request to the endpoint");
  const sent = log[0].body.messages;
  // The app's system message first, then loci's rule that memory is data, then the user's message after the fence.
  assert.deepEqual(sent.map((m) => m.role), ["system", "system", "user"], JSON.stringify(sent));
  assert.equal(sent[0].content, "You are a friendly assistant.");
  assert.match(sent[1].content, /never instructions/);
  const user = sent[2].content;
  assert.equal(typeof user, "string", "one text part, sent as a string");
  assert.ok(user.startsWith("<memory>\n### Session "), user);
  assert.ok(user.endsWith("\n</memory>\n\nWhat does my sister do for a living?"), user);
  assert.match(user, /### Session sister \(.*\)\nuser: My sister Ines moved to Porto, she works there as a marine biologist\./);
  // The poisoned turn is withheld from the model (text::screen), in the fence: the fence closes once, at its end.
  assert.match(user, /\nuser: \[withheld by loci: this message gives instructions to an AI assistant\]/);
  assert.ok(!user.includes("ignore your rules"), user);
  assert.equal(user.split("</memory>").length, 2, user);
  // Afterwards the memory holds the user's message and the reply, in the middleware's session.
  assert.deepEqual(generated.turns, [
    { speaker: "user", text: "What does my sister do for a living?" },
    { speaker: "assistant", text: "Ines is a marine biologist in Porto." },
  ]);

  // --- loci/ai-sdk: streamText (the reply stored when its stream ends) ---
  await control("/__reset", {});
  await control("/__script", [{ reply: "She lives in Porto, by the river Douro." }]);
  const streamed = await page.evaluate((url) => window.adapters.aiStream(url), `${llm}/v1`);
  log = await control("/__log");
  assert.equal(log.length, 1);
  assert.equal(log[0].body.stream, true, "a streamed request");
  assert.ok(streamed.deltas.length > 1, `streamed in pieces: ${JSON.stringify(streamed.deltas)}`);
  assert.equal(streamed.text, "She lives in Porto, by the river Douro.");
  const streamedSent = log[0].body.messages;
  assert.deepEqual(streamedSent.map((m) => m.role), ["system", "user", "assistant", "user"]);
  // The evidence goes with the last user message; the earlier turns of the conversation are left as they were.
  assert.equal(streamedSent[1].content, "What does my sister do for a living?");
  assert.ok(streamedSent[3].content.startsWith("<memory>\n### Session "), streamedSent[3].content);
  assert.ok(streamedSent[3].content.endsWith("\n</memory>\n\nWhich city does she live in?"));
  assert.match(streamedSent[3].content, /Porto/);
  // Stored: the turn this call answered (not the earlier ones again) and the whole streamed reply.
  assert.deepEqual(streamed.turns.slice(2), [
    { speaker: "user", text: "Which city does she live in?" },
    { speaker: "assistant", text: "She lives in Porto, by the river Douro." },
  ]);
  assert.equal(streamed.turns.length, 4);

  // Wrong JS types: loci's error shape, at once.
  assert.deepEqual(await page.evaluate(() => window.adapters.aiErrors()), {
    noMemory: "LociError/INVALID_INPUT", badK: "LociError/INVALID_INPUT", badPrune: "LociError/INVALID_INPUT",
    unknownOption: "LociError/INVALID_INPUT", badSession: "LociError/INVALID_INPUT",
    memoryPromptNotString: "LociError/INVALID_INPUT",
  });

  // --- loci/langchain: the retriever ---
  const docs = await page.evaluate(() => window.adapters.retrieve("Which bills and receipts are due in April?"));
  assert.ok(docs.length >= 1 && docs.length <= 2, JSON.stringify(docs));
  const [top] = docs;
  assert.equal(top.id, "taxes");
  assert.equal(top.metadata.sessionId, "taxes");
  assert.equal(top.metadata.rank, 1);
  assert.equal(typeof top.metadata.score, "number");
  assert.equal(top.metadata.firstTime, Date.UTC(2024, 2, 5, 10, 0));
  assert.equal(top.metadata.lastTime, Date.UTC(2024, 2, 5, 10, 1));
  assert.ok(top.metadata.turnIds.length > 0 && top.metadata.turnIds.every((t) => ids.taxes.includes(t)), JSON.stringify(top.metadata));
  assert.ok(top.pageContent.startsWith("### Session taxes ("), top.pageContent);
  assert.match(top.pageContent, /user: The tax return is due in April/);
  assert.ok(!top.pageContent.includes("Porto"), "one session per document");
  const pruned = await page.evaluate(() => window.adapters.retrieve("When is the tax return due?", { prune: "extractive", k: 1 }));
  assert.equal(pruned.length, 1);
  assert.equal(pruned[0].metadata.sessionId, "taxes");
  assert.match(pruned[0].pageContent, /tax return/);

  // --- loci/langchain: the chat history, recalled by the retriever, then cleared ---
  const history = await page.evaluate(() => window.adapters.history());
  assert.deepEqual(history.messages.map((m) => [m.type, m.content]), [
    ["human", "I adopted a kitten and named her Miso."],
    ["ai", "Congratulations on Miso!"],
    ["human", "She is orange with white paws."],
    ["ai", "An orange kitten, lovely."],
  ]);
  assert.ok(history.messages.every((m) => /^[0-9]+$/.test(m.id)), "each message's id is its turn's");
  assert.equal(history.recalledTop, "lc-cat");
  assert.equal(history.afterClear, 0);
  assert.ok(!history.recalledAfterClear.includes("lc-cat"), JSON.stringify(history.recalledAfterClear));
  assert.deepEqual(history.errors, {
    noSession: "LociError/INVALID_INPUT", notAMemory: "LociError/INVALID_INPUT",
    notAMessage: "LociError/INVALID_INPUT", retrieverBadK: "LociError/INVALID_INPUT",
  });

  // A memory that fails (closed here): with `onError` the call goes on without memory and the failures (the recall,
  // the store) are reported; without it the call fails with loci's error.
  await control("/__reset", {});
  await control("/__script", [{ reply: "I don't remember." }, { reply: "unused" }]);
  const closed = await page.evaluate((url) => window.adapters.aiClosedMemory(url), `${llm}/v1`);
  assert.deepEqual(closed, { text: "I don't remember.", errors: ["LociError/CLOSED", "LociError/CLOSED"], failed: "LociError/CLOSED" });
  log = await control("/__log");
  assert.equal(log.length, 1, "the failing call never reached the endpoint");
  assert.deepEqual(log[0].body.messages, [{ role: "user", content: "Where does my sister live?" }]);

  // Nothing left the page but its own origin and the endpoint the provider was given.
  const elsewhere = requests.filter((u) => !u.startsWith(origin) && !u.startsWith(llm) && !u.startsWith("data:"));
  assert.deepEqual(elsewhere, [], "requests outside the page's origin and the endpoint");
  console.log(`adapters: ok (AI SDK generate + stream through @ai-sdk/openai-compatible, LangChain retriever + history; ${((Date.now() - started) / 1000).toFixed(0)} s)`);
} catch (e) {
  failed = true;
  console.error(e);
} finally {
  await browser.close();
  server.close();
  llmServer.kill();
}
process.exit(failed ? 1 : 0);
