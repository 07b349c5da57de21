import { localBrowser } from "../local-browser.mjs";
const { origin, browser, close } = await localBrowser();
try {
  const page = await browser.newPage();
  await page.goto(`${origin}/bench/scan-split/index.html`);
  await page.waitForFunction(() => window.run);
  for (const N of [100000, 10000]) console.log(JSON.stringify(await page.evaluate(([n]) => window.run(n, 40), [N])));
} finally { await close(); }
