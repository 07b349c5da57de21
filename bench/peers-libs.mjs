// The peers' libraries, bundled by bench/run.mjs (esbuild) into bench/assets/peers-libs.js for the bench page.
export { create, insertMultiple, search } from "@orama/orama";
export { persist, restore } from "@orama/plugin-data-persistence";
export { PGlite } from "@electric-sql/pglite";
export { vector } from "@electric-sql/pglite-pgvector";
