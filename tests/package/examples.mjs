// The apps in examples/ as a newcomer runs them, each from a temp copy of its files beside the tarball the package
// test packed (their package.json depends on `file:../loci-<version>.tgz`, so a version bump that leaves them behind
// fails here): `npm install` (from npm's cache, as the package test's own installs), the strict type check, the Vite
// app's `npm run build`, then each page in headless Chromium, used as a person would: two sessions remembered, then a
// question that shares no word with the right one must recall it.
import assert from "node:assert/strict";
import { execFile, execFileSync, spawn } from "node:child_process";
import { cpSync, mkdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";

const exec = (cmd, args, cwd, env = {}) => new Promise((ok, fail) => {
  execFile(cmd, args, { cwd, encoding: "utf8", env: { ...process.env, ...env } }, (error, stdout, stderr) => {
    if (error) fail(new Error(`${cmd} ${args.join(" ")} in ${cwd} failed:\n${stdout}${stderr}`));
    else ok(stdout);
  });
});

/** Copies examples/<name> as git would check it out (tracked and new files; no node_modules, dist or assets). */
function copyExample(root, work, name) {
  const dir = join(work, `example-${name}`);
  const files = execFileSync("git", ["ls-files", "--cached", "--others", "--exclude-standard", "-z", `examples/${name}`],
    { cwd: root, encoding: "utf8" }).split("\0").filter(Boolean);
  assert.ok(files.length > 0, `examples/${name} has files`);
  for (const f of files) {
    const to = join(dir, f.slice(`examples/${name}/`.length));
    mkdirSync(dirname(to), { recursive: true });
    cpSync(join(root, f), to);
  }
  return dir;
}

/** Remembers two sessions through the page's forms and asks a question; returns what the page shows. */
async function useThePage(browser, url) {
  const tab = await browser.newPage();
  const errors = [];
  tab.on("pageerror", (e) => errors.push(e.message));
  try {
    await tab.goto(url);
    const status = () => tab.textContent("#status");
    // "Ready." once open, or "<CODE>: <message>" when it failed.
    await tab.waitForFunction(() => /^(Ready\.|[A-Z_]+: )/.test(document.getElementById("status").textContent), null,
      { timeout: 120_000 });
    assert.equal(await status(), "Ready.", `${url} opened its memory (page errors: ${errors.join("; ")})`);
    for (const [session, message] of [["dog", "My dog Pixel loves the beach."], ["taxes", "The tax return is due in April."]]) {
      await tab.fill("#session", session);
      await tab.fill("#message", message);
      await tab.click("#add button");
      // This message's own report (the status still shows the last one's until then), or a failure.
      await tab.waitForFunction((s) => {
        const text = document.getElementById("status").textContent;
        return text === `Remembered in session ${s}.` || /^[A-Z_]+: /.test(text);
      }, session);
      assert.equal(await status(), `Remembered in session ${session}.`);
    }
    await tab.fill("#query", "What does my pet enjoy?");
    await tab.click("#ask button");
    await tab.waitForFunction(() => /^(Recalled |[A-Z_]+: )/.test(document.getElementById("status").textContent));
    assert.equal(await status(), "Recalled 1 session(s).");
    return await tab.textContent("#context");
  } finally {
    await tab.close();
  }
}

/** The recalled context must be the dog's session, as text under its date header, and nothing of the other. */
function assertRecalledTheDog(context, where) {
  assert.match(context, /^### Session dog \(/, `${where}: the context starts with the dog's session`);
  assert.ok(context.includes("My dog Pixel loves the beach."), `${where}: the context holds the message`);
  assert.ok(!context.includes("tax"), `${where}: the other session is not recalled`);
}

/**
 * `work` holds the packed tarball; `serveDir(dir)` is the package test's static server (not yet listening);
 * `browser` its Chromium. Returns the seconds taken.
 */
export async function checkExamples({ root, work, tarball, browser, serveDir }) {
  const started = Date.now();
  const env = { LOCI_MODEL_DIR: join(root, "www", "assets", "model") };
  const vite = copyExample(root, work, "vite-app");
  const plain = copyExample(root, work, "plain-esm");
  for (const dir of [vite, plain]) {
    const dep = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")).dependencies.loci;
    assert.equal(dep, `file:../${tarball}`, `${dir}: loci from the tarball \`npm pack\` makes`);
  }
  // The two installs side by side: they mostly wait on the disk.
  const install = ["install", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error"];
  await Promise.all([exec("npm", install, vite), exec("npm", install, plain)]);

  // Type checks as the examples' configs say, and strict there: the Vite app's `npm run build` is tsc then vite build;
  // the plain page's JS is checked through its jsconfig (the repository's tsc: the page itself needs none).
  assert.equal(JSON.parse(readFileSync(join(vite, "tsconfig.json"), "utf8")).compilerOptions.strict, true);
  const jsconfig = JSON.parse(readFileSync(join(plain, "jsconfig.json"), "utf8")).compilerOptions;
  assert.ok(jsconfig.strict && jsconfig.checkJs, "the plain page's JS is checked strictly");
  await Promise.all([
    exec("npm", ["run", "build", "--silent"], vite, env),
    exec("npm", ["run", "assets", "--silent"], plain, env)
      .then(() => exec(join(root, "node_modules", ".bin", "tsc"), ["-p", "jsconfig.json"], plain)),
  ]);

  const server = serveDir(join(vite, "dist"));
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  try {
    assertRecalledTheDog(await useThePage(browser, `http://127.0.0.1:${server.address().port}/index.html`), "examples/vite-app");
  } finally {
    server.close();
  }

  // The plain page through its own server (serve.mjs), as its README runs it.
  const child = spawn("node", ["serve.mjs"], { cwd: plain, env: { ...process.env, PORT: "0" }, stdio: ["ignore", "pipe", "inherit"] });
  try {
    const url = await new Promise((ok, fail) => {
      child.stdout.once("data", (d) => ok(String(d).trim()));
      child.once("exit", (code) => fail(new Error(`serve.mjs exited (${code})`)));
    });
    assertRecalledTheDog(await useThePage(browser, url), "examples/plain-esm");
  } finally {
    child.kill();
  }
  return (Date.now() - started) / 1000;
}
