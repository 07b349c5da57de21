// What the Playwright tests that drive tests/reliability/page.html share: Debian's headless Chromium, and a tab of a
// browser context with the page loaded (`window.reliability`; `window.ack` is a binding the page calls).
import { chromium } from "playwright-core";

export const launchChromium = () => chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
});

/** A tab of `context` with the reliability page of `origin` loaded; `onAck` receives the page's acknowledgements. */
export async function reliabilityTab(context, origin, onAck = () => {}) {
  const page = await context.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.exposeBinding("ack", (_, i) => onAck(i));
  await page.goto(`${origin}/tests/reliability/page.html`);
  await page.waitForFunction(() => window.reliability);
  return page;
}
