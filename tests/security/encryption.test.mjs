// Encryption at rest through the JS API, in headless Chromium (Debian's, driven by playwright-core), with the real
// embedder and IndexedDB:
// 1. A canary conversation goes into a plaintext memory and into an encrypted one. The raw IndexedDB contents of
//    both are read back (every key and value of every store, as bytes): the canary strings and 24-byte runs of the
//    canary's int8 vector codes (taken from the plaintext memory) are found in the plaintext one, so the scan works,
//    and counted in the encrypted one (expected: 0). Recall still finds the canary there.
// 2. A wrong passphrase, and none, are BAD_KEY and change nothing, also in a second tab that follows the first.
// 3. changePassphrase interrupted: the renderer is crashed (CDP Page.crash) at once, after 150 ms, and after it
//    resolved. Each time exactly one of the two passphrases opens the memory afterwards, with nothing lost.
// 4. Tamper: two session records swap their sealed contents and a byte of the vector chunk flips. The memory opens,
//    reports exactly those records set aside, and what was not touched still reads back.
//
//   node tests/security/encryption.test.mjs [--json PATH]
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { serve } from "../../scripts/serve.mjs";
import { launchChromium, reliabilityTab } from "../reliability/harness.mjs";

const argv = process.argv.slice(2);
const jsonPath = argv.includes("--json") ? argv[argv.indexOf("--json") + 1] : null;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const CANARY = "zebra-canary-7731";
const SESSIONS = ["trip-to-quince-lane", "health-notes-canary", "bank-details-canary"];
const PASS = ["correct horse battery staple", "a second passphrase, after the change"];

const server = await serve(0, ["tests"]);
const origin = `http://127.0.0.1:${server.address().port}`;
const browser = await launchChromium();

const tab = (context) => reliabilityTab(context, origin);

/** Opens memory `name` with `encryption` (or none); resolves to "ok" or the error's code. */
const open = (page, name, encryption) => page.evaluate(async ([name, encryption]) => {
  try {
    await window.reliability.open(name, encryption ? { encryption } : {});
    return "ok";
  } catch (e) {
    return e.code ?? String(e);
  }
}, [name, encryption]);

const close = (page) => page.evaluate(() => window.memory.close());

/** The canary conversation: three sessions of two exchanges, every turn naming the canary. */
const addCanary = (page) => page.evaluate(async ([canary, sessions]) => {
  const time = Date.UTC(2024, 4, 1);
  for (const [s, session] of sessions.entries()) {
    for (let i = 0; i < 2; i++) {
      const t = time + (s * 10 + i) * 3_600_000;
      await window.memory.addMessages([
        { speaker: "user", content: `${canary}: my locker code at the ${session} place is ${4000 + s * 10 + i}`, time: t },
        { speaker: "assistant", content: `Noted, ${canary} locker ${4000 + s * 10 + i} for ${session}.`, time: t + 1000 },
      ], { session });
    }
  }
}, [CANARY, SESSIONS]);

/** Every key and value of every store of database `name` as one byte string (strings as UTF-8 and UTF-16). */
const rawBytes = (page, name) => page.evaluate(async (name) => {
  const req = (r) => new Promise((ok, fail) => { r.onsuccess = () => ok(r.result); r.onerror = () => fail(r.error); });
  const db = await req(indexedDB.open(name));
  const parts = [];
  const utf8 = new TextEncoder();
  const add = (v) => {
    if (v === null || v === undefined) return;
    if (typeof v === "string") {
      parts.push(utf8.encode(v));
      parts.push(new Uint8Array(Uint16Array.from(v, (c) => c.charCodeAt(0)).buffer));
    } else if (typeof v === "number" || typeof v === "boolean") parts.push(utf8.encode(String(v)));
    else if (ArrayBuffer.isView(v)) parts.push(new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
    else if (v instanceof ArrayBuffer) parts.push(new Uint8Array(v));
    else if (Array.isArray(v)) v.forEach(add);
    else if (typeof v === "object") for (const [k, x] of Object.entries(v)) { add(k); add(x); }
  };
  for (const store of db.objectStoreNames) {
    const os = db.transaction(store).objectStore(store);
    const [keys, values] = await Promise.all([req(os.getAllKeys()), req(os.getAll())]);
    keys.forEach(add);
    values.forEach(add);
  }
  db.close();
  return Array.from(parts.flatMap((p) => Array.from(p)));
}, name);

/** The int8 codes of every vector a plaintext memory stores, as byte arrays. */
const plaintextCodes = (page, name) => page.evaluate(async (name) => {
  const req = (r) => new Promise((ok, fail) => { r.onsuccess = () => ok(r.result); r.onerror = () => fail(r.error); });
  const db = await req(indexedDB.open(name));
  const chunks = await req(db.transaction("vectors").objectStore("vectors").getAll());
  db.close();
  return chunks.map((c) => Array.from(new Uint8Array(c.codes.buffer, c.codes.byteOffset, c.codes.byteLength)));
}, name);

function occurrences(haystack, needle) {
  let n = 0;
  outer: for (let i = 0; i + needle.length <= haystack.length; i++) {
    for (let j = 0; j < needle.length; j++) if (haystack[i + j] !== needle[j]) continue outer;
    n++;
  }
  return n;
}

function canaryHits(bytes, codes) {
  const text = [CANARY, ...SESSIONS].reduce((n, s) => n + occurrences(bytes, [...Buffer.from(s)]), 0);
  let vectors = 0;
  for (const chunk of codes) for (let i = 0; i + 24 <= chunk.length; i += 24 * 16) vectors += occurrences(bytes, chunk.slice(i, i + 24)) > 0;
  return { text, vectors };
}

async function crashPage(context, page) {
  const cdp = await context.newCDPSession(page);
  cdp.send("Page.crash").catch(() => {});
  await new Promise((r) => page.once("crash", r));
  await page.close().catch(() => {});
}

const report = { canary_hits_at_rest: null, canary_hits_plaintext_control: null, bad_key_refusals: 0,
  rekey_interruptions: 0, rekey_outcomes: [], tampered_records: 0, tampered_records_detected: 0 };
let failed = false;
try {
  const context = await browser.newContext();
  let page = await tab(context);

  // 1. The same canary conversation in plaintext and encrypted.
  assert.equal(await open(page, "canary-plain"), "ok");
  await addCanary(page);
  await close(page);
  assert.equal(await open(page, "canary-enc", { passphrase: PASS[0] }), "ok");
  await addCanary(page);
  const found = await page.evaluate(async () => (await window.memory.recall("what is my locker code for the bank?", { k: 1 })).sessions[0].id);
  assert.equal(found, "bank-details-canary", "recall works on the encrypted memory");
  const turnsStored = await page.evaluate(async () => (await window.memory.stats()).turns);
  await close(page);
  const codes = await plaintextCodes(page, "loci:canary-plain");
  const control = canaryHits(await rawBytes(page, "loci:canary-plain"), codes);
  const atRest = canaryHits(await rawBytes(page, "loci:canary-enc"), codes);
  report.canary_hits_plaintext_control = control.text + control.vectors;
  report.canary_hits_at_rest = atRest.text + atRest.vectors;
  console.log(`canary: plaintext memory ${control.text} text + ${control.vectors} vector hits (the scan works); ` +
    `encrypted memory ${atRest.text} + ${atRest.vectors}`);
  assert.ok(control.text > 0 && control.vectors > 0, "the scan finds the canary in the plaintext memory");
  assert.equal(report.canary_hits_at_rest, 0, "no canary at rest in the encrypted memory");

  // 2. Wrong passphrase, none, and a passphrase for a plaintext memory.
  for (const [encryption, expected] of [[{ passphrase: "wrong" }, "BAD_KEY"], [null, "BAD_KEY"]]) {
    assert.equal(await open(page, "canary-enc", encryption), expected);
    report.bad_key_refusals++;
  }
  assert.equal(await open(page, "canary-plain", { passphrase: PASS[0] }), "INVALID_INPUT");
  assert.equal(await open(page, "canary-enc", { passphrase: PASS[0] }), "ok", "the right passphrase still opens it");
  assert.equal(await page.evaluate(async () => (await window.memory.stats()).turns), turnsStored);
  const doc = await page.evaluate(() => window.memory.export());
  assert.equal(doc.encrypted, false, "an export says it is plaintext");
  // A second tab follows this one: its key is checked all the same, although its calls run here.
  const second = await tab(context);
  assert.equal(await open(second, "canary-enc", { passphrase: "wrong" }), "BAD_KEY", "a follower's wrong key");
  report.bad_key_refusals++;
  assert.equal(await open(second, "canary-enc", { passphrase: PASS[0] }), "ok");
  assert.equal(await second.evaluate(() => window.memory.isLeader), false, "the second tab follows");
  const followed = await second.evaluate(async () => (await window.memory.recall("locker code for the trip", { k: 1 })).sessions[0].id);
  assert.equal(followed, "trip-to-quince-lane", "a follower recalls from the encrypted memory");
  await close(second);
  await second.close();
  await close(page);

  // 3. changePassphrase, interrupted by a renderer crash at three points.
  let current = 0;
  for (const delay of [0, 150, "after"]) {
    assert.equal(await open(page, "canary-enc", { passphrase: PASS[current] }), "ok");
    const change = page.evaluate(([a, b]) => { window.changed = window.memory.changePassphrase(a, b); }, [PASS[current], PASS[1 - current]]);
    await change;
    if (delay === "after") await page.evaluate(() => window.changed);
    else await sleep(delay);
    await crashPage(context, page);
    report.rekey_interruptions++;
    page = await tab(context);
    const outcomes = [];
    for (const p of PASS) outcomes.push(await open(page, "canary-enc", { passphrase: p }) === "ok" && (await close(page), true));
    assert.equal(outcomes.filter(Boolean).length, 1, `exactly one passphrase opens it after a crash (${delay}): ${outcomes}`);
    const opens = outcomes.indexOf(true);
    report.rekey_outcomes.push({ crash: delay === "after" ? "after it resolved" : `${delay} ms`, opens_with: opens === current ? "old" : "new" });
    if (delay === "after") assert.equal(opens, 1 - current, "once resolved, the new passphrase opens it");
    current = opens;
    assert.equal(await open(page, "canary-enc", { passphrase: PASS[current] }), "ok");
    assert.equal(await page.evaluate(async () => (await window.memory.stats()).turns), turnsStored, "nothing lost");
    await close(page);
  }
  console.log(`changePassphrase crashed ${report.rekey_interruptions} times: ${JSON.stringify(report.rekey_outcomes)}`);

  // 4. Tamper with the closed memory: swap two sessions' sealed contents, flip a byte of the vector chunk.
  const tampered = await page.evaluate(async () => {
    const req = (r) => new Promise((ok, fail) => { r.onsuccess = () => ok(r.result); r.onerror = () => fail(r.error); });
    const db = await req(indexedDB.open("loci:canary-enc"));
    const tx = db.transaction(["sessions", "vectors"], "readwrite");
    const sessions = tx.objectStore("sessions"), vectors = tx.objectStore("vectors");
    const [a, b] = await req(sessions.getAll());
    sessions.put({ id: a.id, c: b.c });
    sessions.put({ id: b.id, c: a.c });
    const [key] = await req(vectors.getAllKeys());
    const chunk = await req(vectors.get(key));
    chunk[40] ^= 0x10;
    vectors.put(chunk, key);
    await new Promise((ok) => (tx.oncomplete = ok));
    db.close();
    return [["sessions", a.id], ["sessions", b.id], ["vectors", String(key)]];
  });
  report.tampered_records = tampered.length;
  assert.equal(await open(page, "canary-enc", { passphrase: PASS[current] }), "ok", "a tampered memory still opens");
  const after = await page.evaluate(async () => {
    const stats = await window.memory.stats();
    const sessions = await window.memory.sessions();
    const turns = await Promise.all(sessions.map((s) => window.memory.sessionTurns(s.id)));
    return { quarantined: stats.quarantined.map((q) => [q.store, q.key, q.reason]), sessions: sessions.map((s) => s.id), turns: turns.map((t) => t.length) };
  });
  const detected = after.quarantined.filter(([store, key]) => tampered.some(([s, k]) => s === store && k === key));
  report.tampered_records_detected = detected.length;
  console.log(`tamper: ${report.tampered_records} records altered, ${report.tampered_records_detected} set aside ` +
    `(${after.quarantined.map((q) => q.join(": ")).join("; ")}); still readable: sessions ${after.sessions}, turns ${after.turns}`);
  assert.equal(after.quarantined.length, tampered.length, "only the tampered records are set aside");
  assert.equal(report.tampered_records_detected, report.tampered_records, "every tampered record is detected");
  assert.equal(after.sessions.length, 1, "the untouched session still reads");
  assert.deepEqual(after.turns, [4], "with its turns");
  await close(page);
  await context.close();
} catch (e) {
  failed = true;
  console.error(e);
} finally {
  await browser.close();
  server.close();
}
console.log(`encryption: ${JSON.stringify(report)}`);
if (jsonPath) writeFileSync(jsonPath, JSON.stringify(report, null, 2) + "\n");
process.exit(failed ? 1 : 0);
