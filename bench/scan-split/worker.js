import { kernel, fill, scan } from "./common.js";
let k, h;
onmessage = async (e) => {
  const m = e.data;
  if (m.ping) { postMessage({ pong: true }); return; }
  if (m.init) { k = await kernel(); h = fill(k, m.from, m.rows); postMessage({ ready: true }); return; }
  const s = scan(k, h, m.q, m.qScale).slice();
  postMessage({ scores: s }, [s.buffer]);
};
