//! The memory is never locked while an LLM thinks: a distillation job or an answer waiting on a model that hangs
//! leaves `addMessages`, `recall` and `stats` free, and its result is committed against the memory as it is then
//! (turns added meanwhile stay buffered, a session forgotten meanwhile wins, a closed memory drops a late result and
//! keeps the job queued). One thread, as in the page: a `LocalPool` runs the hung call and the calls made meanwhile;
//! the model is a channel the test answers when it chooses, and ignores its abort signal (the worst callback LLM).
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use async_trait::async_trait;
use futures::channel::mpsc::{unbounded, UnboundedReceiver, UnboundedSender};
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use futures::StreamExt;
use loci::distill::{DistillConfig, JobKind};
use loci::embed::OnnxRuntime;
use loci::error::{Error, Result};
use loci::llm::{Llm, LlmReply, LlmRequest, Usage};
use loci::memory::{AnswerOptions, JobOutcome, JobStep, Memory, MemoryConfig, RecallOptions, Shared};
use loci::store::MemStore;
use pollster::block_on;

/// A model that answers only when the test sends it a reply; it never looks at its abort signal.
struct GatedLlm {
    replies: futures::lock::Mutex<UnboundedReceiver<String>>,
    calls: Cell<usize>,
    prompts: RefCell<Vec<String>>,
}

#[async_trait(?Send)]
impl Llm for GatedLlm {
    async fn chat(&self, request: &LlmRequest) -> Result<LlmReply> {
        self.calls.set(self.calls.get() + 1);
        self.prompts.borrow_mut().push(request.messages.iter().map(|m| m.content.as_str()).collect());
        let text = self.replies.lock().await.next().await.ok_or_else(|| Error::LlmUnavailable("gone".into()))?;
        Ok(LlmReply {
            text,
            usage: Usage { input_tokens: 10, output_tokens: 5, estimated: false },
            latency_ms: 1.0,
            truncated: false,
        })
    }
}

fn gated() -> (Rc<GatedLlm>, UnboundedSender<String>) {
    let (tx, rx) = unbounded();
    let llm = GatedLlm { replies: futures::lock::Mutex::new(rx), calls: Cell::new(0), prompts: Default::default() };
    (Rc::new(llm), tx)
}

type Mem = Memory<MemStore, OnnxRuntime>;

const WINDOW: usize = 4;

fn open(store: MemStore, distill: bool) -> Mem {
    let config = MemoryConfig {
        distill: distill.then_some(DistillConfig { window: WINDOW, ..DistillConfig::default() }),
        ..Default::default()
    };
    block_on(Memory::open(store, common::embedder(config.embed), config)).expect("open")
}

const T0: f64 = 1_683_554_160_000.0; // 2023-05-08 13:56 UTC

fn lines(from: usize, n: usize) -> Vec<loci::types::MessageInput> {
    let texts = [
        "I adopted a puppy called Pixel last weekend.",
        "That's lovely! What breed is Pixel?",
        "A border collie, she already knows how to sit.",
        "Border collies are so clever. Do you take her hiking?",
        "Yes, we hiked to the glacier lake yesterday.",
        "Was the trail steep?",
        "Very, but Pixel ran ahead the whole way.",
        "Sounds like a great trip.",
    ];
    (from..from + n)
        .map(|i| loci::types::MessageInput {
            speaker: Some(if i % 2 == 0 { "Ana" } else { "Ben" }.into()),
            content: texts[i % texts.len()].into(),
            time: Some(loci::types::TimeInput::Millis(T0 + i as f64 * 60_000.0)),
            ..Default::default()
        })
        .collect()
}

/// Spawns `f` on the pool; the returned cell holds its result once it finished.
fn spawn<T: 'static>(pool: &LocalPool, f: impl std::future::Future<Output = T> + 'static) -> Rc<RefCell<Option<T>>> {
    let out = Rc::new(RefCell::new(None));
    let slot = out.clone();
    pool.spawner().spawn_local(async move { *slot.borrow_mut() = Some(f.await) }).expect("spawn");
    out
}

fn run_job(
    pool: &LocalPool,
    shared: &Shared<MemStore, OnnxRuntime>,
    llm: &Rc<GatedLlm>,
) -> Rc<RefCell<Option<Result<JobStep>>>> {
    let (shared, llm) = (shared.clone(), llm.clone());
    spawn(pool, async move { shared.run_next_job(&*llm, T0 + 1e9, None, &mut |_| {}).await })
}

const SEGMENT_ALL: &str = r#"{"groups": [[0, 1, 2, 3]]}"#;

#[test]
fn a_job_waiting_on_the_model_leaves_the_memory_free_and_commits_against_what_happened_meanwhile() {
    let mut pool = LocalPool::new();
    let shared = Shared::new(open(MemStore::new(), true));
    block_on(async { shared.lock().await?.add_messages(&lines(0, WINDOW), Some("s1"), T0).await }).unwrap();
    let (llm, reply) = gated();

    let job = run_job(&pool, &shared, &llm);
    pool.run_until_stalled();
    assert_eq!(llm.calls.get(), 1, "the segmentation call is waiting on the model");
    assert!(job.borrow().is_none());

    // Meanwhile: the chat goes on.
    let s = shared.clone();
    let meanwhile = spawn(&pool, async move {
        let added = s.lock().await?.add_messages(&lines(WINDOW, WINDOW), Some("s1"), T0 + 1e6).await?;
        let recalled = s.lock().await?.recall("What breed is the puppy?", RecallOptions::default()).await?;
        let stats = s.lock().await?.stats();
        Ok::<_, Error>((added, recalled, stats))
    });
    pool.run_until_stalled();
    let (added, recalled, stats) =
        meanwhile.borrow_mut().take().expect("addMessages, recall and stats resolved").unwrap();
    assert_eq!(added.turn_ids.len(), WINDOW);
    assert_eq!(recalled.sessions[0].id, "s1");
    assert_eq!((stats.turns, stats.distill.pending_turns), (2 * WINDOW, 2 * WINDOW));
    assert!(job.borrow().is_none(), "the job still waits on the model");

    reply.unbounded_send(SEGMENT_ALL.into()).unwrap();
    pool.run_until_stalled();
    assert_eq!(job.borrow_mut().take().unwrap().unwrap(), JobStep::Ran(JobOutcome::Done));
    let m = block_on(shared.lock()).unwrap();
    let d = m.distilled();
    let first: Vec<u64> = added.turn_ids.iter().map(|t| t - WINDOW as u64).collect();
    assert_eq!(d.meta.pending, added.turn_ids, "the window consumed its turns; those added meanwhile stay buffered");
    let queue: Vec<&JobKind> = d.jobs.values().map(|j| &j.work).collect();
    assert_eq!(queue.len(), 2, "{queue:?}");
    assert!(matches!(queue[0], JobKind::Narrate { groups } if groups == &vec![first]), "{queue:?}");
    assert!(
        matches!(queue[1], JobKind::Segment { session, last: false } if session == "s1"),
        "the full window that arrived while the first was segmented is queued, after the narration: {queue:?}"
    );
}

#[test]
fn a_session_forgotten_while_its_episode_is_narrated_wins() {
    let mut pool = LocalPool::new();
    let shared = Shared::new(open(MemStore::new(), true));
    block_on(async { shared.lock().await?.add_messages(&lines(0, WINDOW), Some("s1"), T0).await }).unwrap();
    let (llm, reply) = gated();
    reply.unbounded_send(SEGMENT_ALL.into()).unwrap();
    let job = run_job(&pool, &shared, &llm);
    pool.run_until_stalled();
    assert_eq!(job.borrow_mut().take().unwrap().unwrap(), JobStep::Ran(JobOutcome::Done));

    let job = run_job(&pool, &shared, &llm); // narration of s1's window
    pool.run_until_stalled();
    assert_eq!(llm.calls.get(), 2);
    assert!(llm.prompts.borrow()[1].contains("border collie"), "{}", llm.prompts.borrow()[1]);
    let s = shared.clone();
    let forgot = spawn(&pool, async move { s.lock().await?.forget_session("s1").await });
    pool.run_until_stalled();
    forgot.borrow_mut().take().expect("forget resolved while the model thinks").unwrap();

    let narration = r#"{"episodes": [{"group": 1, "title": "Pixel the puppy", "narrative": "Ana adopted a border collie.", "date": "2023-05-08"}]}"#;
    reply.unbounded_send(narration.into()).unwrap();
    pool.run_until_stalled();
    assert_eq!(job.borrow_mut().take().unwrap().unwrap(), JobStep::Ran(JobOutcome::Discarded));
    let m = block_on(shared.lock()).unwrap();
    assert!(m.episodes().is_empty(), "nothing distilled from the forgotten session is committed");
    assert!(m.distilled().jobs.values().all(|j| !matches!(&j.work, JobKind::Narrate { .. })), "its job is gone");
    assert!(m.sessions().is_empty() && m.distilled().meta.pending.is_empty());
}

#[test]
fn close_is_prompt_while_the_model_hangs_and_the_late_result_is_dropped() {
    let mut pool = LocalPool::new();
    let shared = Shared::new(open(MemStore::new(), true));
    block_on(async { shared.lock().await?.add_messages(&lines(0, WINDOW), Some("s1"), T0).await }).unwrap();
    let (llm, reply) = gated();
    let job = run_job(&pool, &shared, &llm);
    pool.run_until_stalled();
    assert_eq!(llm.calls.get(), 1);

    let closed = spawn(&pool, shared.close());
    pool.run_until_stalled();
    let store = closed.borrow_mut().take().expect("close resolved while the model still hangs").expect("a store");
    assert!(matches!(block_on(shared.lock()), Err(Error::Closed)));

    reply.unbounded_send(SEGMENT_ALL.into()).unwrap(); // the callback ignored its signal and answers late
    pool.run_until_stalled();
    assert!(matches!(job.borrow_mut().take().unwrap(), Err(Error::Closed)), "the late result is dropped");
    let reopened = open(store, true);
    let queue: Vec<&JobKind> = reopened.distilled().jobs.values().map(|j| &j.work).collect();
    assert!(matches!(queue.as_slice(), [JobKind::Segment { session, last: false }] if session == "s1"), "{queue:?}");
    assert!(reopened.episodes().is_empty());
}

#[test]
fn an_answer_waiting_on_the_model_leaves_the_memory_free_and_counts_what_it_spent() {
    let mut pool = LocalPool::new();
    let shared = Shared::new(open(MemStore::new(), false));
    block_on(async { shared.lock().await?.add_messages(&lines(0, WINDOW), Some("s1"), T0).await }).unwrap();
    let (llm, reply) = gated();
    let (s, l) = (shared.clone(), llm.clone());
    let answer =
        spawn(&pool, async move { s.answer("What breed is Pixel?", &AnswerOptions::default(), &*l, T0 + 1e9).await });
    pool.run_until_stalled();
    assert_eq!(llm.calls.get(), 1, "the pruning call is waiting on the model");

    let s = shared.clone();
    let meanwhile = spawn(&pool, async move {
        s.lock().await?.add_messages(&lines(WINDOW, 2), Some("s2"), T0 + 1e7).await?;
        s.lock().await?.recall("glacier lake", RecallOptions::default()).await
    });
    pool.run_until_stalled();
    assert!(meanwhile.borrow_mut().take().expect("resolved meanwhile").is_ok());

    reply.unbounded_send(r#"{"keep": ["1.3"]}"#.into()).unwrap();
    reply.unbounded_send(r#"{"answer": "A border collie."}"#.into()).unwrap();
    pool.run_until_stalled();
    let a = answer.borrow_mut().take().expect("answered").unwrap();
    assert_eq!(a.answer, "A border collie.");
    assert!(a.context.contains("border collie"), "the kept line: {}", a.context);
    assert!(a.context_tokens < a.unpruned_tokens, "pruned: the kept line and the best unit, not all four");
    let counters = block_on(shared.lock()).unwrap().stats().llm;
    assert_eq!((counters.prune.calls, counters.answer.calls), (1, 1), "spent while unlocked, counted at commit");
}
