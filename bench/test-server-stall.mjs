// Reproduces the stall of wasm-bindgen-test-runner's test server that scripts/browser-suite.mjs works around
// (docs/BENCHMARKS.md, "A browser suite whose page never started"). Two checks:
//
//   node bench/test-server-stall.mjs server [--servers 10] [--knocks 0]
//     starts a fresh `NO_HEADLESS=1 wasm-bindgen-test-runner` each time, opens 8 connections to it at once and sends
//     one request on each, then knocks (opens and closes a connection) `--knocks` times, 300 ms apart; counts the
//     servers that left a connection unanswered for 3 s.
//   node bench/test-server-stall.mjs suite [--runs 10] [--knock-every-ms 500]
//     runs the `browser` suite through scripts/browser-suite.mjs with both cores kept busy beside it, and counts
//     the pages that did not start (`--knock-every-ms 0`: without the knocks, as before the fix).
//
// Both need the browser suite's test wasm (built by `npm test`, or by
// `cargo test --target wasm32-unknown-unknown --test browser --no-run`).
import { spawn } from "node:child_process";
import { connect } from "node:net";
import { readdirSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { runBrowserSuite, startTestLlmServer } from "../scripts/browser-suite.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const [mode, ...rest] = process.argv.slice(2);
const flag = (name, fallback) => {
  const at = rest.indexOf(`--${name}`);
  return at >= 0 ? Number(rest[at + 1]) : fallback;
};
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

function suiteWasm() {
  const deps = join(root, "target/wasm32-unknown-unknown/debug/deps");
  const found = readdirSync(deps).filter((f) => /^browser-[0-9a-f]+\.wasm$/.test(f))
    .map((f) => join(deps, f));
  if (!found.length) throw new Error("no browser suite wasm: cargo test --target wasm32-unknown-unknown --test browser --no-run");
  // The newest build, should several be there.
  return found.sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs)[0];
}

/** Resolves to whether the socket got any byte back within `ms`. */
function answered(socket, ms) {
  return new Promise((ok) => {
    const timer = setTimeout(() => ok(false), ms);
    socket.once("data", () => { clearTimeout(timer); ok(true); });
  });
}

async function serverCheck() {
  const servers = flag("servers", 10);
  const knocks = flag("knocks", 0);
  const wasm = suiteWasm();
  let stalled = 0;
  for (let i = 0; i < servers; i++) {
    const port = 8300 + i;
    const runner = spawn("wasm-bindgen-test-runner", [wasm], {
      env: { ...process.env, NO_HEADLESS: "1", WASM_BINDGEN_TEST_ADDRESS: `127.0.0.1:${port}` },
      stdio: ["ignore", "pipe", "ignore"],
    });
    await new Promise((ok) => runner.stdout.once("data", ok)); // "Interactive browsers tests are now available …"
    const sockets = await Promise.all(Array.from({ length: 8 }, () => new Promise((ok) => {
      const s = connect(port, "127.0.0.1", () => ok(s));
    })));
    const replies = sockets.map((s) => answered(s, 3000 + knocks * 300));
    for (const s of sockets) s.write("GET /run.js HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n");
    for (let k = 0; k < knocks; k++) {
      await sleep(300);
      const knock = connect(port, "127.0.0.1", () => knock.destroy());
    }
    const got = await Promise.all(replies);
    const unanswered = got.filter((g) => !g).length;
    if (unanswered) stalled++;
    console.log(`server ${i + 1}: ${unanswered} of 8 connections unanswered`);
    sockets.forEach((s) => s.destroy());
    runner.kill("SIGKILL");
  }
  console.log(`servers that left a connection unanswered: ${stalled} of ${servers} (${knocks} knocks)`);
}

async function suiteCheck() {
  const runs = flag("runs", 10);
  const knockEveryMs = flag("knock-every-ms", 500);
  const env = {
    CHROMEDRIVER: "/usr/bin/chromedriver",
    WASM_BINDGEN_TEST_TIMEOUT: "180",
    WASM_BINDGEN_TEST_WEBDRIVER_JSON: "tests/webdriver.json",
    LOCI_TEST_LLM_URL: await startTestLlmServer(root),
  };
  let pages = 0;
  let stalls = 0;
  for (let i = 1; i <= runs; i++) {
    const busy = [1, 2].map(() => spawn("sh", ["-c", "while :; do :; done"]));
    let gaveUp = false;
    const status = await runBrowserSuite({
      name: "browser", env, cwd: root, knockEveryMs,
      log: (line) => { stalls++; pages++; gaveUp = /giving up/.test(line); console.log(line); },
    });
    busy.forEach((b) => b.kill("SIGKILL"));
    if (!gaveUp) pages++; // the page that started
    console.log(`run ${i}: exit status ${status}`);
  }
  console.log(`pages that did not start: ${stalls} of ${pages} (knocks ${knockEveryMs ? `every ${knockEveryMs} ms` : "off"})`);
}

if (mode === "server") await serverCheck();
else if (mode === "suite") await suiteCheck();
else {
  console.error("usage: node bench/test-server-stall.mjs server [--servers N] [--knocks K] | suite [--runs N] [--knock-every-ms MS]");
  process.exit(2);
}
process.exit(0);
