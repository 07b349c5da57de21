// `node bench/scan-kernel/drive.mjs`: loci's int8 scan in headless Chromium, one row at a time against two rows a
// pass (see README.md). Build the kernel first.
import { localBrowser } from "../local-browser.mjs";

const { origin, browser, close } = await localBrowser();
try {
  const page = await browser.newPage();
  await page.goto(`${origin}/bench/scan-kernel/index.html`);
  await page.waitForFunction(() => window.run);
  for (const rows of [100000, 10000, 100001]) console.log(JSON.stringify(await page.evaluate(([n]) => window.run(n, 40), [rows])));
} finally {
  await close();
}
