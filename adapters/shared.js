// What the adapters share: loci's error shape at the JS boundary, and checks of what they are given.

/** An `Error` named `LociError` with a stable `code`, as every rejection of loci's own calls is. */
export function lociError(code, message) {
  const error = new Error(message);
  error.name = "LociError";
  error.code = code;
  return error;
}

export const invalid = (message) => lociError("INVALID_INPUT", message);

/** A memory is anything with loci's `Memory` calls (a `Memory`, or one followed in another tab). */
export function checkMemory(memory, where, calls) {
  if (memory === null || typeof memory !== "object" || calls.some((c) => typeof memory[c] !== "function")) {
    throw invalid(`${where}: \`memory\` must be an open loci Memory (one with ${calls.map((c) => `${c}()`).join(", ")})`);
  }
}

/** Refuses options this adapter does not know (a typo must not be silently ignored). */
export function checkOptions(options, where, known) {
  if (options === undefined) return {};
  if (options === null || typeof options !== "object" || Array.isArray(options)) {
    throw invalid(`${where}: options must be an object`);
  }
  const unknown = Object.keys(options).filter((key) => !known.includes(key));
  if (unknown.length) throw invalid(`${where}: unknown option${unknown.length > 1 ? "s" : ""} ${unknown.map((u) => `\`${u}\``).join(", ")} (known: ${known.join(", ")})`);
  return options;
}

const PRUNES = ["none", "extractive", "llm", "llm-spans"];

/** The recall options an adapter passes on (`k`, `prune`, `method`), checked here so a wrong type fails at once. */
export function recallOptions(options, where) {
  const out = {};
  if (options.k !== undefined) {
    if (!Number.isInteger(options.k) || options.k < 1) throw invalid(`${where}: \`k\` must be a positive integer`);
    out.k = options.k;
  }
  if (options.prune !== undefined) {
    if (!PRUNES.includes(options.prune)) throw invalid(`${where}: \`prune\` must be one of ${PRUNES.map((p) => `"${p}"`).join(", ")}`);
    out.prune = options.prune;
  }
  if (options.method !== undefined) {
    if (typeof options.method !== "string") throw invalid(`${where}: \`method\` must be a string`);
    out.method = options.method;
  }
  return out;
}

export function checkSession(session, where, required = false) {
  if (session === undefined && !required) return;
  if (typeof session !== "string" || session.trim() === "") {
    throw invalid(`${where}: \`session\` must be a non-empty string`);
  }
}
