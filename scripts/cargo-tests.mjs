// The native test binaries cargo builds, for scripts that run them directly (beside other work, with no cargo
// holding the lock on target/ meanwhile).
import { spawnSync } from "node:child_process";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** What the native tests are built with, by every script (a build with other features would compile the crate again). */
export const TEST_FEATURES = ["--features", "loci/sync"];

/** Builds the native test targets `args` (`cargo test --no-run …`, its diagnostics shown) and returns their
 * binaries as `[{ name, kind: "lib" | "bin" | "test", executable }]` in cargo's order, or `null` if the build failed. */
export function testBinaries(args = []) {
  // Always with the feature `sync` (its tests need it): every caller shares one build of the crate.
  const built = spawnSync("cargo", ["test", "--no-run", "--message-format=json-render-diagnostics", ...args, ...TEST_FEATURES],
    { cwd: root, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], maxBuffer: 1 << 28 });
  if (built.status !== 0) return null;
  const order = ["lib", "bin", "test"];
  return built.stdout.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l))
    .filter((m) => m.reason === "compiler-artifact" && m.executable && m.profile?.test)
    .map((m) => ({ name: m.target.name, kind: m.target.kind.some((k) => k.endsWith("lib")) ? "lib" : m.target.kind[0],
      executable: m.executable }))
    // cargo's order: the library's unit tests, the binaries', then the test files by name
    .sort((a, b) => order.indexOf(a.kind) - order.indexOf(b.kind) || a.name.localeCompare(b.name));
}
