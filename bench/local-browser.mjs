// The repository served on 127.0.0.1 (scripts/serve.mjs) and Debian's headless Chromium, for the bench scripts.
import { spawn } from "node:child_process";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { serve } from "../scripts/serve.mjs";

/** The scripted OpenAI-compatible server (tests/llm-server) on a free port, given `config` (`/__config`). */
export async function scriptedLlm(config = {}) {
  const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
  const child = spawn("node", [resolve(root, "tests/llm-server/server.mjs"), "0"], { stdio: ["ignore", "pipe", "inherit"] });
  const port = await new Promise((ok, fail) => {
    child.stdout.on("data", (d) => { const m = /READY (\d+)/.exec(String(d)); if (m) ok(m[1]); });
    child.on("exit", (code) => fail(new Error(`LLM server exited (${code})`)));
  });
  const origin = `http://127.0.0.1:${port}`;
  await fetch(`${origin}/__config`, { method: "POST", body: JSON.stringify(config) });
  return { origin, url: `${origin}/v1`, kill: () => child.kill() };
}

export async function localBrowser(extraArgs = []) {
  const server = await serve(0);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run", ...extraArgs],
  });
  return {
    origin: `http://127.0.0.1:${server.address().port}`,
    browser,
    close: async () => {
      await browser.close();
      server.close();
    },
  };
}

/**
 * Debian's headless Chromium on a profile directory on disk (a persistent context). A fresh Playwright context is
 * incognito: its IndexedDB lives in RAM, so neither durability nor a crash can be tried there.
 */
export function persistentBrowser(profile) {
  return chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
  });
}
