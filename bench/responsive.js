// The chat while distillation thinks: addMessages and recall on a memory whose background jobs wait on a slow LLM
// (the scripted server answering each call after a few seconds), against the same calls on an idle memory, in the
// same page and alternating call by call so that both see the same machine. Both memories are opened with
// `distill`; the idle one has no LLM, so its jobs only queue.
import init, { Memory } from "/pkg/loci.js";
import { chatTurns, questions } from "./turns.mjs";
import { embedder, summary, timed } from "./page-tools.mjs";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

window.responsive = async ({ llmUrl, model, rounds, window: w, historyTurns, pauseMs, answers }) => {
  await init();
  for (const name of ["responsive-idle", "responsive-busy"]) await Memory.deleteDatabase(name);
  const idle = await Memory.open({ name: "responsive-idle", embedder, distill: { window: w } });
  const distillErrors = [];
  let jobsReported = 0;
  const busy = await Memory.open({
    name: "responsive-busy", embedder, distill: { window: w },
    llm: { baseUrl: llmUrl, model, timeoutMs: 600_000 },
    onProgress: (e) => {
      if (e.phase !== "distill") return;
      if (e.error) distillErrors.push(e.error.code); else jobsReported++;
    },
  });
  // A history both memories share, in sessions of 20 turns; on the busy one it queues distillation at once.
  const history = chatTurns(historyTurns, 3);
  for (let i = 0; i < history.length; i += 20) {
    const session = { session: `h${i / 20}` };
    await idle.addMessages(history.slice(i, i + 20), session);
    await busy.addMessages(history.slice(i, i + 20), session);
  }
  await sleep(500); // the background runner is now waiting on its first LLM call
  const live = chatTurns(rounds * 2, 5);
  const qs = questions(rounds, 13);
  const t = { add: { idle: [], busy: [] }, recall: { idle: [], busy: [] } };
  let busyRounds = 0;
  for (let i = 0; i < rounds; i++) {
    const pair = live.slice(2 * i, 2 * i + 2);
    const order = i % 2 ? [["idle", idle], ["busy", busy]] : [["busy", busy], ["idle", idle]];
    for (const [kind, m] of order) t.add[kind].push(await timed(() => m.addMessages(pair, { session: "live" })));
    for (const [kind, m] of order) t.recall[kind].push(await timed(() => m.recall(qs[i], { k: 3 })));
    if ((await busy.stats()).distill.jobs > 0) busyRounds++;
    await sleep(pauseMs); // a user types between messages
  }
  const stats = await busy.stats();
  const llm = stats.llm;
  const llmCalls = ["segment", "narrate", "merge", "predict", "distill", "consolidate"]
    .reduce((n, p) => n + llm[p].calls, 0);
  await idle.close();
  // Answers on a model that serves one request at a time: while a background job waits on it (busy), then on the
  // same memory reopened with its jobs held (idle: `autoRun: false`). The answer must not queue behind the job.
  const answerTimes = { busy: [], idle: [] };
  let answersBusy = 0;
  for (let i = 0; i < answers; i++) {
    if ((await busy.stats()).distill.jobs > 0) answersBusy++;
    answerTimes.busy.push(await timed(() => busy.answer(qs[i % qs.length])));
    await sleep(2_000); // the runner takes its next job's call meanwhile
  }
  await busy.close();
  const held = await Memory.open({
    name: "responsive-busy", embedder, distill: { window: w, autoRun: false },
    llm: { baseUrl: llmUrl, model, timeoutMs: 600_000 },
  });
  for (let i = 0; i < answers; i++) answerTimes.idle.push(await timed(() => held.answer(qs[i % qs.length])));
  await held.close();
  return {
    answer: { idle: summary(answerTimes.idle), busy: summary(answerTimes.busy) }, answersBusy,
    add: { idle: summary(t.add.idle), busy: summary(t.add.busy) },
    recall: { idle: summary(t.recall.idle), busy: summary(t.recall.busy) },
    busyRounds, rounds, llmCalls, jobsReported, distillErrors,
    episodes: stats.distill.episodes, facts: stats.distill.factsActive, jobsLeft: stats.distill.jobs,
  };
};
