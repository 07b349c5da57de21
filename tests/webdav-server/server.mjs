// A WebDAV server for loci's sync tests in the browser: Debian's `rclone serve webdav` (1.60, installed by
// `npm run setup`) over a fresh folder, behind a proxy that adds what a page on another origin needs (CORS: rclone
// 1.60 sends none) and what a test needs to look at the stored bytes. No dependencies.
//
//   node tests/webdav-server/server.mjs [port] [--exit-with-stdin]   (0 = any free port) → "READY <port>"
//
//   any method, any path      passed to rclone as it came (the Host too: rclone checks a MOVE's Destination
//                             against it), with `Access-Control-Allow-*` added; OPTIONS (a CORS preflight) answered
//                             here with 204.
//   GET /__canary?needle=S    {hits, files, bytes}: how many times S occurs, as UTF-8 or UTF-16 (LE and BE), in the
//                             names and contents of every file the server stores (what a sync test asserts is 0).
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { createServer, request } from "node:http";
import { createConnection } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

const port = Number(process.argv[2] ?? process.env.PORT ?? 0);
const root = mkdtempSync(join(tmpdir(), "loci-webdav-"));

/** A port free now, for rclone (1.60 does not say which port it took for :0). */
function freePort() {
  return new Promise((ok, fail) => {
    const probe = createServer().once("error", fail).listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => ok(port));
    });
  });
}

const davPort = await freePort();
const rclone = spawn("rclone", ["serve", "webdav", "--log-level", "ERROR", "--addr", `127.0.0.1:${davPort}`, root], {
  stdio: ["ignore", "ignore", "inherit"],
});
rclone.on("error", (e) => {
  console.error(`rclone did not start (${e.message}): npm run setup installs it (apt install rclone)`);
  process.exit(1);
});
rclone.on("exit", (code) => {
  if (!stopping) {
    console.error(`rclone serve webdav exited (${code})`);
    process.exit(1);
  }
});
let stopping = false;
function stop() {
  stopping = true;
  rclone.kill();
  rmSync(root, { recursive: true, force: true });
}
process.on("exit", stop);
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => process.exit(0));
if (process.argv.includes("--exit-with-stdin")) {
  process.stdin.resume();
  process.stdin.on("end", () => process.exit(0));
}

// Wait until rclone listens.
for (let tries = 0; ; tries++) {
  const up = await new Promise((ok) => {
    const socket = createConnection(davPort, "127.0.0.1", () => { socket.end(); ok(true); });
    socket.on("error", () => ok(false));
  });
  if (up) break;
  if (tries > 200) { console.error("rclone serve webdav did not listen"); process.exit(1); }
  await new Promise((ok) => setTimeout(ok, 50));
}

const CORS = {
  "access-control-allow-origin": "*",
  "access-control-allow-methods": "GET, PUT, DELETE, MKCOL, MOVE, PROPFIND, OPTIONS",
  "access-control-allow-headers": "Authorization, Content-Type, Depth, Destination, Overwrite",
  "access-control-max-age": "600",
};

function files(dir, out = []) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) files(path, out);
    else out.push(path);
  }
  return out;
}

function count(haystack, needle) {
  let hits = 0;
  for (let at = haystack.indexOf(needle); at !== -1; at = haystack.indexOf(needle, at + 1)) hits++;
  return hits;
}

function canary(needle) {
  const forms = [Buffer.from(needle, "utf8"), Buffer.from(needle, "utf16le"), Buffer.from(needle, "utf16le").swap16()];
  let hits = 0, bytes = 0;
  const stored = files(root);
  for (const path of stored) {
    const content = readFileSync(path);
    bytes += content.length;
    const name = Buffer.from(path.slice(root.length), "utf8");
    for (const form of forms) hits += count(content, form) + count(name, form);
  }
  return { hits, files: stored.length, bytes };
}

const server = createServer((req, res) => {
  if (req.method === "OPTIONS") {
    res.writeHead(204, CORS).end();
    return;
  }
  const url = new URL(req.url, "http://localhost");
  if (url.pathname === "/__canary") {
    res.writeHead(200, { ...CORS, "content-type": "application/json" });
    res.end(JSON.stringify(canary(url.searchParams.get("needle") ?? "")));
    return;
  }
  const upstream = request({ host: "127.0.0.1", port: davPort, method: req.method, path: req.url, headers: req.headers },
    (answer) => {
      res.writeHead(answer.statusCode, { ...answer.headers, ...CORS });
      answer.pipe(res);
    });
  upstream.on("error", (e) => res.writeHead(502, CORS).end(String(e)));
  req.pipe(upstream);
});
server.listen(port, "127.0.0.1", () => console.log(`READY ${server.address().port}`));
