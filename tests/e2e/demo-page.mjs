// What the demo's browser tests share: Debian's Chromium driven by playwright-core (no browser download), and the
// few steps every test takes on the demo page.
import { chromium } from "playwright-core";

/** Headless Chromium without the background traffic a test must not see; `args` are added to its flags. */
export const launchChromium = (args = []) => chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-quic", ...args],
});

/** The demo has opened its memory. */
export const ready = (page) => page.waitForFunction(() => window.loci && window.loci.memory, null, { timeout: 120_000 });

/** The status line starts with `prefix` (within `timeout` ms). */
export const statusStarts = (page, prefix, timeout = 120_000) => page.waitForFunction(
  (p) => document.querySelector("#status").textContent.startsWith(p), prefix, { timeout });

/** Sends `text` and resolves to the bot's reply once the status says "Replied" (within `timeout` ms). */
export async function chat(page, text, timeout = 60_000) {
  const before = await page.locator("#transcript li.bot").count();
  await page.fill("#message", text);
  await page.click("#send");
  // The reply, or the error the status shows instead (failing at once, not at the timeout).
  await page.waitForFunction((n) => document.querySelectorAll("#transcript li.bot").length > n
    || document.querySelector("#status").classList.contains("error"), before, { timeout });
  await page.waitForFunction(() => document.querySelector("#status").textContent.startsWith("Replied")
    || document.querySelector("#status").classList.contains("error"), null, { timeout });
  const status = await page.textContent("#status");
  if (!status.startsWith("Replied")) throw new Error(`no reply to ${JSON.stringify(text.slice(0, 80))}: ${status}`);
  return page.locator("#transcript li.bot").last().textContent();
}
