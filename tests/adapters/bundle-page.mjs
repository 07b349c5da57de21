// A test page for the adapters' browser tests: `entry` bundled with esbuild into `out/page.bundle.js`, beside an
// index.html that loads it. The page and the adapters import ../../pkg/loci.js: one module, left external and loaded
// from where the test's server has it, as a consumer's bundle would.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { build } from "esbuild";

const lociExternal = {
  name: "loci-external",
  setup(b) {
    b.onResolve({ filter: /\/pkg\/loci\.js$/ }, () => ({ path: "/pkg/loci.js", external: true }));
  },
};

export async function bundlePage(entry, out) {
  mkdirSync(out, { recursive: true });
  await build({
    entryPoints: [entry], bundle: true, format: "esm", platform: "browser",
    target: "es2022", outfile: join(out, "page.bundle.js"), plugins: [lociExternal], logLevel: "warning",
  });
  writeFileSync(join(out, "index.html"), `<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,">
<script type="module" src="page.bundle.js"></script>`);
}

/** Opens the bundled page at `url` in `browser` and waits for it to set `window.ready`; the page's requests are
 * collected (the tests check that nothing left the page's origin) and its errors printed. */
export async function openTestPage(browser, url) {
  const page = await browser.newPage();
  const requests = [];
  page.on("request", (r) => requests.push(r.url()));
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.goto(url);
  await page.waitForFunction(() => window.ready, null, { timeout: 60_000 });
  return { page, requests };
}
