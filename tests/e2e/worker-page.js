// Starts tests/e2e/worker.js (a module worker running loci) and exposes what it reports.
const worker = new Worker("worker.js", { type: "module" });
window.workerResult = new Promise((resolve) => {
  worker.onmessage = (e) => resolve(e.data);
  worker.onerror = (e) => resolve({ error: e.message || "worker failed to start" });
});
