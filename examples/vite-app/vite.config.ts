import { defineConfig } from "vite";

export default defineConfig({
  // The dev server's dependency pre-bundling moves loci's JS away from its .wasm (found through
  // `new URL("loci_bg.wasm", import.meta.url)`): serve the package as it is installed. `vite build` needs no help.
  optimizeDeps: { exclude: ["loci"] },
});
