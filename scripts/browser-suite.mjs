// One wasm-bindgen-test browser suite (`cargo test --target wasm32-unknown-unknown --test NAME`), run again once
// when its test page never started.
//
// Why: wasm-bindgen-test-runner's own test server (rouille on tiny_http) now and then never answers one of the
// page's module requests. The page then waits ~5 minutes for that import, the harness never starts, and the suite
// fails after WASM_BINDGEN_TEST_TIMEOUT plus Chromium's 300 s with "Failed to detect test as having been run" and no
// test run at all. It failed a CI run that way. Here, with both cores kept busy beside the suite, 3 of 16 pages
// stalled (twice in a row once); the stalled page's resource timing showed the request (a snippet, no byte, ended
// by Chromium at 300 s) while the server answered the same URL at once to curl. So: when the harness has not printed
// its "running N tests" line within `startLimitMs` of the page being visited, the suite is stopped and started
// again, up to `attempts` times. A suite whose tests ran is never retried, whatever its result.
import { spawn } from "node:child_process";

const HARNESS_STARTED = /^running \d+ tests?$/m;
const PAGE_VISITED = /Running headless tests in/;

/** Resolves to the suite's exit status; a page that never started is started again, `attempts` times in all. */
export async function runBrowserSuite({ name, env, cwd, startLimitMs = 60_000, attempts = 3, log = console.log }) {
  for (let attempt = 1; attempt <= attempts; attempt++) {
    const { status, stalled } = await runOnce({ name, env, cwd, startLimitMs });
    if (!stalled) return status;
    log(`\n!!! ${name}: the test page did not start within ${startLimitMs / 1000} s (no "running N tests": `
      + `a module request to wasm-bindgen-test-runner's server stalled)${attempt < attempts ? "; starting the suite again" : `, ${attempts} times: giving up`}`);
  }
  return 1;
}

function runOnce({ name, env, cwd, startLimitMs }) {
  return new Promise((settle) => {
    // Its own process group, so that a stalled run is stopped with the chromedriver and Chromium it started.
    const child = spawn("cargo", ["test", "--target", "wasm32-unknown-unknown", "--test", name], {
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
    child.on("error", () => settle({ status: 1, stalled: false }));
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      process.off("exit", killGroup);
      // cargo is gone; what it started (the runner, chromedriver, Chromium) must not outlive it.
      if (stalled) killGroup();
      settle({ status: signal ? 1 : code, stalled });
    });
  });
}
