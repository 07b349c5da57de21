// One wasm-bindgen-test browser suite (`cargo test --target wasm32-unknown-unknown --test NAME`), with the test
// server kept from stalling, and run again when its page never started all the same.
//
// Why: wasm-bindgen-test-runner's own test server (rouille on tiny_http 0.12) loses wakeups in its thread pool. The
// pool starts with 4 threads, and each keep-alive connection keeps one for as long as the browser holds it. When
// connections arrive faster than the woken threads get the lock, the pool still counts them as idle, queues the next
// connection and wakes nobody: nobody serves it until a thread is freed. Chromium opens ~6 connections at once for
// the page's module imports and keeps them, so one import waits until Chromium drops an idle socket (300 s), the
// harness never starts, and the suite fails with "Failed to detect test as having been run". It failed a CI run so.
// Measured here (bench/test-server-stall.mjs): with both cores busy beside the suite, 2 of 8 pages stalled; 8
// connections opened at once to a fresh server left some unanswered on 8 of 30 servers.
//
// The fix from outside: a connection opened and closed at once, while every thread is busy, gets a new thread,
// which then takes the next queued connection. So the server is knocked on twice a second while the suite runs
// (after the 8 connections, 3 knocks left some unanswered on 4 of 30 servers, 8 knocks on none; the suite with the
// knocks: 0 of 6 pages stalled). Should a page still not start within `startLimitMs` of being visited, the suite is
// stopped and started again, up to `attempts` times. A suite whose tests ran is never retried, whatever its result.
import { spawn } from "node:child_process";
import { connect, createServer } from "node:net";

const HARNESS_STARTED = /^running \d+ tests?$/m;
const PAGE_VISITED = /Running headless tests in/;

/** Resolves to the suite's exit status; a page that never started is started again, `attempts` times in all. */
export async function runBrowserSuite({
  name, env, cwd, startLimitMs = 60_000, attempts = 3, knockEveryMs = 500, log = console.log,
}) {
  for (let attempt = 1; attempt <= attempts; attempt++) {
    const address = `127.0.0.1:${await freePort()}`;
    const { status, stalled } = await runOnce({
      name, env: { ...env, WASM_BINDGEN_TEST_ADDRESS: address }, cwd, startLimitMs, knockEveryMs,
    });
    if (!stalled) return status;
    log(`\n!!! ${name}: the test page did not start within ${startLimitMs / 1000} s (no "running N tests": `
      + `a module request to wasm-bindgen-test-runner's server stalled)${attempt < attempts ? "; starting the suite again" : `, ${attempts} times: giving up`}`);
  }
  return 1;
}

/** Starts the scripted OpenAI-compatible server the browser LLM tests talk to; resolves to its base URL. */
export async function startTestLlmServer(root) {
  const child = spawn("node", ["tests/llm-server/server.mjs", "0"], { cwd: root, stdio: ["ignore", "pipe", "inherit"] });
  const port = await new Promise((ok, fail) => {
    child.stdout.on("data", (d) => { const m = /READY (\d+)/.exec(String(d)); if (m) ok(m[1]); });
    child.on("exit", (code) => fail(new Error(`test LLM server exited (${code})`)));
  });
  process.on("exit", () => child.kill());
  return `http://127.0.0.1:${port}/v1`;
}

/** Starts the sync tests' WebDAV server (rclone behind a CORS proxy); resolves to its base URL. */
export async function startTestWebDavServer(root) {
  const child = spawn("node", ["tests/webdav-server/server.mjs", "0"], { cwd: root, stdio: ["ignore", "pipe", "inherit"] });
  const port = await new Promise((ok, fail) => {
    child.stdout.on("data", (d) => { const m = /READY (\d+)/.exec(String(d)); if (m) ok(m[1]); });
    child.on("exit", (code) => fail(new Error(`test WebDAV server exited (${code})`)));
  });
  process.on("exit", () => child.kill());
  return `http://127.0.0.1:${port}`;
}

/** A port free now, for the test server (the runner picks its own otherwise, and does not say which). */
function freePort() {
  return new Promise((ok, fail) => {
    const probe = createServer().once("error", fail).listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => ok(port));
    });
  });
}

/** Opens and closes a connection to the test server every `everyMs` (see the top of this file); returns a stop. */
function knockOnTheTestServer(address, everyMs) {
  if (!everyMs) return () => {}; // bench/test-server-stall.mjs measures the suite without the knocks too
  const [host, port] = address.split(":");
  const timer = setInterval(() => {
    const socket = connect(Number(port), host);
    socket.on("connect", () => socket.destroy()).on("error", () => { /* not listening yet, or gone */ });
  }, everyMs);
  return () => clearInterval(timer);
}

function runOnce({ name, env, cwd, startLimitMs, knockEveryMs }) {
  return new Promise((settle) => {
    const stopKnocking = knockOnTheTestServer(env.WASM_BINDGEN_TEST_ADDRESS, knockEveryMs);
    // Its own process group, so that a stalled run is stopped with the chromedriver and Chromium it started.
    // LOCI_SUITE_FILTER: run only the suite's tests whose names contain it (while working on one).
    const filter = process.env.LOCI_SUITE_FILTER ? ["--", process.env.LOCI_SUITE_FILTER] : [];
    // With the feature `sync` (its tests are in browser_sync): one build of the crate for every suite.
    const child = spawn("cargo", ["test", "--target", "wasm32-unknown-unknown", "--features", "sync", "--test", name, ...filter], {
      cwd, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"], detached: true,
    });
    const killGroup = () => { try { process.kill(-child.pid, "SIGKILL"); } catch { /* already gone */ } };
    process.on("exit", killGroup);
    let seen = "";
    let started = false;
    let stalled = false;
    let timer = null;
    const watch = (out) => (chunk) => {
      out.write(chunk);
      if (started) return;
      seen = (seen + chunk).slice(-8192);
      if (HARNESS_STARTED.test(seen)) {
        started = true;
        clearTimeout(timer);
      } else if (!timer && PAGE_VISITED.test(seen)) {
        timer = setTimeout(() => { stalled = true; killGroup(); }, startLimitMs);
      }
    };
    child.stdout.on("data", watch(process.stdout));
    child.stderr.on("data", watch(process.stderr));
    child.on("error", () => { stopKnocking(); settle({ status: 1, stalled: false }); });
    child.on("exit", (code, signal) => {
      stopKnocking();
      clearTimeout(timer);
      process.off("exit", killGroup);
      // cargo is gone; what it started (the runner, chromedriver, Chromium) must not outlive it.
      if (stalled) killGroup();
      settle({ status: signal ? 1 : code, stalled });
    });
  });
}
