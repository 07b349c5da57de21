// The repository served on 127.0.0.1 (scripts/serve.mjs) and Debian's headless Chromium, for the bench scripts.
import { chromium } from "playwright-core";
import { serve } from "../scripts/serve.mjs";

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
