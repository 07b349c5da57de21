export const DIM = 384;
export async function kernel() {
  const { instance } = await WebAssembly.instantiateStreaming(fetch(new URL("scan_kernel.wasm", import.meta.url)), {});
  return instance.exports;
}
// Deterministic rows: codes and scales of row r depend on r only.
export function fill(k, rowsFrom, rows) {
  const codes = k.alloc_bytes(rows * DIM), scales = k.alloc_bytes(rows * 4), out = k.alloc_bytes(rows * 4), q = k.alloc_bytes(DIM * 2);
  const mem = () => k.memory.buffer;
  const c = new Int8Array(mem(), codes, rows * DIM);
  let x = 12345;
  for (let r = 0; r < rows; r++) {
    let s = (rowsFrom + r) * 2654435761 >>> 0;
    for (let i = 0; i < DIM; i++) { s = (s * 1103515245 + 12345) >>> 0; c[r * DIM + i] = (s >>> 16) % 255 - 127; }
  }
  const sc = new Float32Array(mem(), scales, rows);
  for (let r = 0; r < rows; r++) sc[r] = 1 / (1 + ((rowsFrom + r) % 7));
  return { codes, scales, out, q, rows, mem };
}
export function scan(k, h, qv, qScale, rows = h.rows) {
  new Int16Array(h.mem(), h.q, DIM).set(qv);
  k.scan(h.codes, h.scales, rows, DIM, h.q, qScale, h.out);
  return new Float32Array(h.mem(), h.out, rows);
}
