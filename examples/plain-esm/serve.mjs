// A static server for this folder, with Node alone: any server works that sends .js/.mjs as JavaScript and .wasm as
// application/wasm (onnxruntime-web imports its .mjs as a module, which browsers refuse under another type).
import { createReadStream, statSync } from "node:fs";
import { createServer } from "node:http";
import { extname, join, normalize, sep } from "node:path";

const root = process.cwd();
const types = { ".html": "text/html", ".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm",
  ".json": "application/json", ".onnx": "application/octet-stream" };
const server = createServer((req, res) => {
  let file = normalize(join(root, decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname)));
  if (file.endsWith(sep)) file = join(file, "index.html");
  let found = file.startsWith(root + sep);
  try { found &&= statSync(file).isFile(); } catch { found = false; }
  if (!found) { res.writeHead(404).end(); return; }
  res.writeHead(200, { "Content-Type": types[extname(file)] ?? "application/octet-stream" });
  createReadStream(file).pipe(res);
});
server.listen(Number(process.env.PORT ?? 8000), "127.0.0.1", () => {
  console.log(`http://127.0.0.1:${server.address().port}/`);
});
