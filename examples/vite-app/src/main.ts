import init, { Memory, type LociError } from "loci";

const byId = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const status = byId<HTMLParagraphElement>("status");
const input = (id: string) => byId<HTMLInputElement>(id);
// Every loci failure is an Error with a stable `code`.
const show = (e: unknown) => { status.textContent = `${(e as LociError).code ?? "ERROR"}: ${(e as Error).message}`; };

try {
  await init();
  // The embedder's files are served from public/assets/ (copy-assets.mjs): loci's default URLs, spelled out.
  const memory = await Memory.open({
    name: "vite-example",
    embedder: { modelUrl: "/assets/model/model.onnx", tokenizerUrl: "/assets/model/tokenizer.json", ortUrl: "/assets/ort/" },
    onProgress: (e) => { status.textContent = `Loading: ${e.phase}…`; },
  });
  status.textContent = "Ready.";
  byId<HTMLFieldSetElement>("controls").disabled = false;

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
