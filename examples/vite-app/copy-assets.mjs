// Copies the files loci loads at run time into the folder the app serves (docs/guides/hosting.md), where loci's
// defaults look for them: onnxruntime-web's from the installed dependency, the model and tokenizer from LOCI_MODEL_DIR
// (default: the loci repository's www/assets/model/, filled by its `npm run setup`). Usage: node copy-assets.mjs DIR
import { copyFileSync, existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";

const out = process.argv[2] ?? "assets";
const ortDist = join("node_modules", "onnxruntime-web", "dist");
const modelDir = process.env.LOCI_MODEL_DIR ?? join("..", "..", "www", "assets", "model");
const files = [
  // The CPU build (classic script for the page, .mjs for a worker), then the WebGPU build `device: "auto"` may pick.
  ...["ort.wasm.min.js", "ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm",
    "ort.webgpu.min.js", "ort.webgpu.min.mjs", "ort-wasm-simd-threaded.asyncify.mjs",
    "ort-wasm-simd-threaded.asyncify.wasm"].map((f) => [join(ortDist, f), join(out, "ort", f)]),
  ...["model.onnx", "tokenizer.json"].map((f) => [join(modelDir, f), join(out, "model", f)]),
];
for (const [from, to] of files) {
  if (!existsSync(from)) {
    console.error(`missing ${from}: run \`npm install\` here, and \`npm run setup\` in the loci repository ` +
      "(or set LOCI_MODEL_DIR to a folder with model.onnx and tokenizer.json)");
    process.exit(1);
  }
  mkdirSync(join(to, ".."), { recursive: true });
  copyFileSync(from, to);
}
console.log(`copied ${files.length} files into ${out}/`);
