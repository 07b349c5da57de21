#!/usr/bin/env node
// Serves the demo (www/) and the built package (pkg/) on 127.0.0.1 with the right MIME types (.mjs and .wasm)
// and cross-origin isolation headers (which let onnxruntime-web use threads where the machine has cores).
import { createServer } from "node:http";
import { createReadStream, statSync } from "node:fs";
import { dirname, extname, join, normalize, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const port = Number(process.env.PORT || process.argv[2] || 8080);
const host = process.env.HOST || "127.0.0.1";
const types = {
  ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css",
  ".json": "application/json", ".wasm": "application/wasm", ".onnx": "application/octet-stream",
  ".gguf": "application/octet-stream",
  ".png": "image/png", ".svg": "image/svg+xml", ".ts": "text/plain", ".txt": "text/plain",
};
// Nothing else of the repository is exposed (bench: `npm run bench`; adapters: the demo's in-browser LLM uses loci/llm).
const served = ["www", "pkg", "pkg-sync", "adapters", "bench"];

/**
 * Serves on `listenPort`; `extra` top-level folders are exposed too (the reliability and end-to-end tests serve
 * `tests`), and `headers` are added to every response (the end-to-end test's Content-Security-Policy).
 */
export function serve(listenPort = port, extra = [], headers = {}) {
  const server = createServer((req, res) => {
    const url = new URL(req.url, "http://localhost");
    let path = decodeURIComponent(url.pathname);
    if (path === "/" || path === "/index.html") {
      res.writeHead(302, { Location: "/www/" });
      return res.end();
    }
    if (path.endsWith("/")) path += "index.html";
    const file = normalize(join(root, path));
    const top = file.slice(root.length + 1).split(sep)[0];
    let stat;
    try { stat = statSync(file); } catch { stat = null; }
    if (!file.startsWith(root + sep) || ![...served, ...extra].includes(top) || !stat || !stat.isFile()) {
      res.writeHead(404, { "Content-Type": "text/plain" });
      return res.end("not found");
    }
    res.writeHead(200, {
      "Content-Type": types[extname(file)] || "application/octet-stream",
      "Content-Length": stat.size,
      "Cross-Origin-Opener-Policy": "same-origin",
      "Cross-Origin-Embedder-Policy": "require-corp",
      "Cache-Control": "no-cache",
      ...headers,
    });
    createReadStream(file).pipe(res);
  });
  return new Promise((ok) => server.listen(listenPort, host, () => ok(server)));
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const server = await serve();
  console.log(`loci demo: http://${host}:${server.address().port}/www/`);
}
