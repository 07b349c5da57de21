// @ts-check
import init, { Memory } from "loci";

const byId = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));
const status = byId("status");
const input = (/** @type {string} */ id) => /** @type {HTMLInputElement} */ (byId(id));
// Every loci failure is an Error with a stable `code`.
const show = (/** @type {any} */ e) => { status.textContent = `${e.code ?? "ERROR"}: ${e.message}`; };

try {
  await init();
  // The embedder's files are served from assets/ beside this page (copy-assets.mjs): loci's defaults.
  const memory = await Memory.open({
    name: "plain-esm-example",
    onProgress: (e) => { status.textContent = `Loading: ${e.phase}…`; },
  });
  status.textContent = "Ready.";
  /** @type {HTMLFieldSetElement} */ (byId("controls")).disabled = false;

  byId("add").addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const report = await memory.addMessages([{ role: "user", content: input("message").value }],
        { session: input("session").value || undefined });
      status.textContent = `Remembered in session ${report.session}.`;
      input("message").value = "";
    } catch (e) { show(e); }
  });

  byId("ask").addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      // The best session and its best exchanges, rendered as text for a prompt.
      const r = await memory.recall(input("query").value, { k: 1 });
      byId("context").textContent = r.context || "(nothing remembered yet)";
      status.textContent = `Recalled ${r.sessions.length} session(s).`;
    } catch (e) { show(e); }
  });
} catch (e) { show(e); }
