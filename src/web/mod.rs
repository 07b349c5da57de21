//! Web bindings: the JavaScript API (`Memory.open`, `addMessages`, `recall`, `stats`, `close`, and distillation:
//! `flush`, `episodes`, `facts`, `history`, `retryParked`, `forget`). A thin layer: it parses JS values into typed
//! Rust (a wrong type is a typed error, never a panic), and hands everything to [`crate::memory::Shared`]: the
//! memory behind one lock that is never held while an LLM thinks. Errors reach JS as `Error`s with a stable `code`.
//! Submodules: `tabs` (the exported `Memory`: the leading tab runs calls, the others forward them to it), `options`
//! (JS options → typed Rust), `open` (assets, runtime, tab lock), `jobs` (background distillation).
//!
//! Which recall `recall()` and `answer()` run: the distilled one (sessions + episodes + facts, no pruning) when
//! `sources` is given, or when the memory was opened with `distill` and no `prune` is asked; otherwise the sessions
//! recall (pruned when asked; `answer` prunes with the LLM by default). `sources` and `prune` together are refused.
//! `recall(q, { expand: true })` runs the sessions recall of the query and of the sub-queries the LLM splits it
//! into, whatever the memory's `distill`; with `prune` or `sources` it is refused.

use std::rc::Rc;

use js_sys::{Function, Promise, Reflect};
use serde::Deserialize;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::{future_to_promise, JsFuture};

use std::cell::RefCell;

use crate::assets;
use crate::distill::DistillConfig;
use crate::embed::{self, Device, EmbedConfig, Embedder, OnnxRuntime, OrtDist, WebBuild};
use crate::error::Error;
use crate::llm::callback::CallbackLlm;
use crate::llm::fetch::FetchTransport;
use crate::llm::openai::{OpenAiClient, OpenAiConfig};
use crate::llm::{AbortSignal, Llm, TextSink};
use crate::memory::{self, JobOutcome, JobStep, MemoryConfig, RecallOptions};
use crate::memory::{AnswerOptions, DistillProgress, DistilledRecallOptions, FlushReport, PruneOptions};
use crate::recall::prune::PruneMode;
use crate::recall::RecallMethod;
use crate::store::idb::{ConnectionWatch, IdbStore};
use crate::store::seal::KeySource;
use crate::text::WordPiece;
use crate::types::{parse_time, InputLimits, MessageInput, TimeInput, UnitMode};

type Core = memory::Memory<IdbStore, OnnxRuntime>;
type Shared = memory::Shared<IdbStore, OnnxRuntime>;

// The TypeScript types of the whole public API (options, results, errors), appended to the generated `loci.d.ts`.
#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = include_str!("../web_types.ts");
/// The sync API's types, only in a build that has it.
#[cfg(feature = "sync")]
#[wasm_bindgen(typescript_custom_section)]
const TS_SYNC_TYPES: &'static str = include_str!("../web_types_sync.ts");

/// The system rule and the fenced memory a chat puts around recalled memory (`recall().context`): what the
/// `loci/ai-sdk` middleware adds to a prompt, the way `answer()` does. Not a string: `INVALID_INPUT`.
#[wasm_bindgen(js_name = memoryPrompt, unchecked_return_type = "MemoryPrompt")]
pub fn memory_prompt(#[wasm_bindgen(unchecked_param_type = "string")] context: JsValue) -> Result<JsValue, JsValue> {
    let context =
        context.as_string().ok_or_else(|| js_error(Error::invalid("memoryPrompt: context must be a string")))?;
    let (system, memory) = crate::llm::prompts::chat_memory(&context);
    let out = js_sys::Object::new();
    Reflect::set(&out, &"system".into(), &system.into())?;
    Reflect::set(&out, &"memory".into(), &memory.into())?;
    Ok(out.into())
}

/// Converts a loci error into a JS `Error` with `name = "LociError"` and a stable `code`.
pub fn js_error(e: Error) -> JsValue {
    let err = js_sys::Error::new(&e.to_string());
    err.set_name("LociError");
    let _ = Reflect::set(&err, &"code".into(), &e.code().into());
    err.into()
}

fn to_js<T: serde::Serialize>(v: &T) -> Result<JsValue, JsValue> {
    v.serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(|e| js_error(Error::invalid(format!("encoding a result: {e}"))))
}

mod jobs;
mod open;
mod options;
mod storage;
#[cfg(feature = "sync")]
mod sync;
mod tabs;

use jobs::*;
use open::*;
use options::*;
pub use tabs::Memory;

/// The open memory of the tab that leads (see [`tabs`]): what `Memory`'s calls run on, here or forwarded from
/// another tab.
pub(crate) struct Leader {
    shared: Shared,
    name: String,
    device_reason: String,
    release_lock: Function,
    llm: Rc<RefCell<Option<Rc<dyn Llm>>>>,
    tokenizer: Rc<WordPiece>,
    /// The open's `onProgress`, also told about distillation jobs (`phase: "distill"`).
    on_progress: Option<Function>,
    /// Whether the memory was opened with `distill` (routes recall and answer, see the module docs).
    distill: bool,
    jobs: JobRunner,
    /// Embeds the rest of long texts in the background.
    embeds: EmbedRunner,
    /// Syncs, on `memory.sync()` and in the background (feature `sync`).
    #[cfg(feature = "sync")]
    sync: sync::SyncRunner,
}

/// Encodes items that carry a `vector` (episodes, facts, scored ones) without it: vectors stay inside loci.
fn to_js_without_vectors<T: serde::Serialize>(v: &T, what: &str) -> Result<JsValue, Error> {
    let out = to_js(v).map_err(|_| Error::invalid(format!("encoding {what}")))?;
    strip_vectors(&out);
    Ok(out)
}

fn strip_vectors(v: &JsValue) {
    if let Some(a) = v.dyn_ref::<js_sys::Array>() {
        a.for_each(&mut |x, _, _| strip_vectors(&x));
    } else if v.is_object() {
        let _ = Reflect::delete_property(v.unchecked_ref::<js_sys::Object>(), &"vector".into());
        for field in ["episodes", "facts"] {
            if let Ok(inner) = Reflect::get(v, &field.into()) {
                if js_sys::Array::is_array(&inner) {
                    strip_vectors(&inner);
                }
            }
        }
    }
}

/// What `flush()` resolves to: the totals of every round it ran.
#[derive(serde::Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct JsFlushReport {
    jobs_run: usize,
    failures: usize,
    parked: usize,
    /// Unparked jobs left (0 unless the memory was closed, or jobs were queued during the last round).
    jobs_left: usize,
    /// Jobs parked in the queue after this flush (all of them, also from earlier flushes).
    parked_total: usize,
    /// Time spent waiting out retry backoffs.
    waited_ms: f64,
}

impl JsFlushReport {
    fn add(&mut self, outcome: &JobOutcome) {
        let mut r = FlushReport::default();
        r.add(outcome);
        self.jobs_run += r.jobs_run;
        self.failures += r.failures;
        self.parked += r.parked;
    }
}

fn spawn<F>(fut: F) -> Promise
where
    F: std::future::Future<Output = Result<JsValue, Error>> + 'static,
{
    future_to_promise(async move { fut.await.map_err(js_error) })
}

/// The calls behind `Memory`'s (documented there), run in the leading tab.
/// The calls behind `Memory`'s (documented there), run in the leading tab.
impl Leader {
    pub fn device_reason(&self) -> String {
        self.device_reason.clone()
    }

    pub fn add_messages(&self, messages: JsValue, options: JsValue) -> Promise {
        let shared = self.shared.clone();
        let jobs = self.jobs.clone();
        let embeds = self.embeds.clone();
        spawn(async move {
            if !js_sys::Array::is_array(&messages) {
                return Err(Error::invalid(
                    "`messages` must be an array of { role | speaker, content, time?, caption? }",
                ));
            }
            let messages: Vec<MessageInput> = from_js(messages, "messages")?;
            check_keys(&options, &["session"], "addMessages options")?;
            let opts: AddOptions = if options.is_undefined() || options.is_null() {
                AddOptions::default()
            } else {
                from_js(options, "addMessages options")?
            };
            let mut core = shared.lock().await?;
            let report = core.add_messages(&messages, opts.session.as_deref(), js_sys::Date::now()).await?;
            drop(core);
            jobs.start(); // distillation of a full window goes on after this call resolves
            embeds.start(); // and the embedding of a long text's other windows
            to_js(&report).map_err(|_| Error::invalid("encoding the report"))
        })
    }

    pub fn recall(&self, query: JsValue, options: JsValue) -> Promise {
        let shared = self.shared.clone();
        let llm = self.llm.borrow().clone();
        let distill_on = self.distill;
        let jobs = self.jobs.clone();
        spawn(async move {
            let query = query.as_string().ok_or_else(|| Error::invalid("the query must be a string"))?;
            let opts = JsRecallOptions::parse(&options, "recall options")?;
            let ro = opts.recall_options()?;
            let distilled = opts.distilled(distill_on)?;
            let signal = abort_signal(&options)?;
            if opts.expand()? {
                // The LLM splits the query without the memory's lock; recall then merges the sub-queries' rankings.
                let llm = llm.ok_or_else(|| {
                    Error::LlmUnavailable("`expand` needs an LLM: pass `llm` to Memory.open or call setLlm()".into())
                })?;
                let asked = opts.question_time.as_ref().map(parse_time).transpose()?.unwrap_or_else(js_sys::Date::now);
                let _first = jobs.foreground(); // the chat before background distillation
                let result = shared.recall_expanded(&query, ro, &*llm, asked, signal).await?;
                return to_js(&result).map_err(|_| Error::invalid("encoding the result"));
            }
            if opts.prune.is_some() {
                // Pruning may call the LLM: read, then prune without the memory's lock.
                let po = opts.prune_options(PruneMode::None, signal)?;
                let _first = (po.mode.uses_llm() && llm.is_some()).then(|| jobs.foreground());
                let result = shared.recall_pruned(&query, ro, &po, llm.as_deref(), js_sys::Date::now()).await?;
                return to_js(&result).map_err(|_| Error::invalid("encoding the result"));
            }
            let mut core = shared.lock().await?;
            if let Some(sources) = distilled {
                let result = core.recall_distilled(&query, sources).await?;
                let out = to_js_without_vectors(&result, "the result")?;
                let device = to_js(&core.device()).map_err(|_| Error::invalid("encoding the result"))?;
                let _ = Reflect::set(&out, &"device".into(), &device);
                return Ok(out);
            }
            let result = core.recall(&query, ro).await?;
            to_js(&result).map_err(|_| Error::invalid("encoding the result"))
        })
    }

    pub fn answer(&self, question: JsValue, options: JsValue) -> Promise {
        let shared = self.shared.clone();
        let llm = self.llm.borrow().clone();
        let distill_on = self.distill;
        let jobs = self.jobs.clone();
        spawn(async move {
            let question = question.as_string().ok_or_else(|| Error::invalid("the question must be a string"))?;
            let llm = llm.ok_or_else(|| {
                Error::LlmUnavailable("answer() needs an LLM: pass `llm` to Memory.open or call setLlm()".into())
            })?;
            let opts = JsRecallOptions::parse(&options, "answer options")?;
            if opts.expand == Some(true) {
                return Err(Error::invalid("`expand` is an option of recall(), not of answer()"));
            }
            let distilled = opts.distilled(distill_on)?;
            let defaults = AnswerOptions::default();
            let answer_options = AnswerOptions {
                recall: opts.recall_options()?,
                prune: opts.prune_options(defaults.prune.mode, abort_signal(&options)?)?,
                max_tokens: opts.max_tokens.or(defaults.max_tokens),
                on_text: text_sink(&options)?,
            };
            let now = js_sys::Date::now();
            let _first = jobs.foreground(); // the chat before background distillation
            let result = match distilled {
                Some(sources) => shared.answer_distilled(&question, sources, &answer_options, &*llm, now).await?,
                None => shared.answer(&question, &answer_options, &*llm, now).await?,
            };
            to_js(&result).map_err(|_| Error::invalid("encoding the answer"))
        })
    }

    pub fn set_llm(&self, llm: JsValue) -> Result<(), JsValue> {
        let parsed = parse_llm(&llm, Some(&self.tokenizer)).map_err(js_error)?;
        *self.llm.borrow_mut() = parsed;
        self.jobs.start();
        Ok(())
    }

    pub fn has_llm(&self) -> bool {
        self.llm.borrow().is_some()
    }

    pub fn stats(&self) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let stats = {
                let core = shared.lock().await?;
                to_js(&core.stats()).map_err(|_| Error::invalid("encoding stats"))?
            };
            let storage = to_js(&storage::state().await).map_err(|_| Error::invalid("encoding stats"))?;
            let _ = Reflect::set(&stats, &"storage".into(), &storage);
            Ok(stats)
        })
    }

    pub fn persist(&self) -> Promise {
        spawn(async move { storage::persist().await.map(JsValue::from) })
    }

    pub fn sessions(&self) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let core = shared.lock().await?;
            to_js(&core.sessions()).map_err(|_| Error::invalid("encoding sessions"))
        })
    }

    pub fn session_turns(&self, session: String) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let core = shared.lock().await?;
            to_js(&core.session_turns(&session)).map_err(|_| Error::invalid("encoding turns"))
        })
    }

    pub fn export(&self) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let core = shared.lock().await?;
            to_js(&core.export(js_sys::Date::now())).map_err(|_| Error::invalid("encoding the export"))
        })
    }

    pub fn import(&self, document: JsValue) -> Promise {
        let shared = self.shared.clone();
        let embeds = self.embeds.clone();
        spawn(async move {
            let doc: memory::Export = match document.as_string() {
                Some(text) => serde_json::from_str(&text).map_err(|e| Error::invalid(format!("import: {e}")))?,
                None => from_js(document, "import")?,
            };
            let mut core = shared.lock().await?;
            let report = core.import(&doc, js_sys::Date::now(), |_, _| {}).await;
            drop(core);
            embeds.start(); // also after a failure: what was imported before it stays
            let report = report?;
            to_js(&report).map_err(|_| Error::invalid("encoding the report"))
        })
    }

    pub fn flush(&self, options: JsValue) -> Promise {
        let shared = self.shared.clone();
        let llm = self.llm.borrow().clone();
        let on_progress = self.on_progress.clone();
        let distill_on = self.distill;
        spawn(async move {
            check_keys(&options, &["signal"], "flush options")?;
            let user_signal = abort_signal(&options)?;
            if !distill_on {
                return Err(Error::invalid("distillation is off: open the memory with `distill: true` (or options)"));
            }
            let llm = llm.ok_or_else(|| {
                Error::LlmUnavailable("flush() needs an LLM: pass `llm` to Memory.open or call setLlm()".into())
            })?;
            // One signal for both causes: the caller's and close().
            let abort = shared.signal(user_signal.as_ref());
            let closed = |e: Error| if shared.is_closed() { Error::Closed } else { e };
            let mut total = JsFlushReport::default();
            let mut tell = |p: &DistillProgress| distill_progress(&on_progress, p);
            shared.queue_last_windows(js_sys::Date::now()).await?;
            loop {
                match shared.run_next_job(&*llm, js_sys::Date::now(), Some(&abort), &mut tell).await.map_err(closed)? {
                    JobStep::Ran(outcome) => total.add(&outcome),
                    // Nothing holds the memory while waiting: recall, addMessages and close go on meanwhile.
                    JobStep::WaitUntil(t) => {
                        let wait = (t - js_sys::Date::now()).max(0.0);
                        total.waited_ms += wait;
                        sleep(wait, &abort).await.map_err(closed)?;
                    }
                    JobStep::Idle => break,
                }
            }
            let stats = shared.lock().await?.distill_stats();
            total.parked_total = stats.parked.len();
            total.jobs_left = stats.jobs - stats.parked.len();
            to_js(&total).map_err(|_| Error::invalid("encoding the flush report"))
        })
    }

    pub fn episodes(&self) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let core = shared.lock().await?;
            to_js_without_vectors(&core.episodes(), "episodes")
        })
    }

    pub fn facts(&self, options: JsValue) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            check_keys(&options, &["includeSuperseded"], "facts options")?;
            let all = if options.is_undefined() || options.is_null() {
                JsValue::UNDEFINED
            } else {
                Reflect::get(&options, &"includeSuperseded".into()).unwrap_or(JsValue::UNDEFINED)
            };
            let include_superseded = match all.as_bool() {
                Some(b) => b,
                None if all.is_undefined() => false,
                None => return Err(Error::invalid("`includeSuperseded` must be a boolean")),
            };
            let core = shared.lock().await?;
            to_js_without_vectors(&core.facts(include_superseded), "facts")
        })
    }

    pub fn history(&self, fact_id: JsValue) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let id = id_from_js(&fact_id, "factId")?;
            let core = shared.lock().await?;
            let chain = core.history(id);
            if chain.is_empty() {
                return Err(Error::NotFound(format!("fact {id}")));
            }
            to_js_without_vectors(&chain, "the history")
        })
    }

    pub fn retry_parked(&self) -> Promise {
        let shared = self.shared.clone();
        let jobs = self.jobs.clone();
        spawn(async move {
            let mut core = shared.lock().await?;
            let n = core.retry_parked(js_sys::Date::now()).await?;
            drop(core);
            jobs.start();
            Ok(JsValue::from(n as u32))
        })
    }

    pub fn forget(&self, target: JsValue) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            check_keys(&target, &["fact", "episode", "session", "turn", "all"], "forget")?;
            let keys = if target.is_object() {
                js_sys::Object::keys(target.unchecked_ref::<js_sys::Object>()).length()
            } else {
                0
            };
            if keys != 1 {
                return Err(Error::invalid(
                    "forget takes exactly one of { fact }, { episode }, { session }, { turn }, { all: true }",
                ));
            }
            let field = |k: &str| Reflect::get(&target, &k.into()).unwrap_or(JsValue::UNDEFINED);
            let mut core = shared.lock().await?;
            let (fact, episode, session, all) = (field("fact"), field("episode"), field("session"), field("all"));
            let turn = field("turn");
            if !turn.is_undefined() {
                core.forget_turn(id_from_js(&turn, "turn")?).await?;
            } else if !fact.is_undefined() {
                core.forget_fact(id_from_js(&fact, "fact")?).await?;
            } else if !episode.is_undefined() {
                core.forget_episode(id_from_js(&episode, "episode")?).await?;
            } else if !session.is_undefined() {
                let id = session.as_string().ok_or_else(|| Error::invalid("`session` must be a string"))?;
                core.forget_session(&id).await?;
            } else if all.as_bool() == Some(true) {
                core.forget_all().await?;
            } else {
                return Err(Error::invalid("`all` must be true"));
            }
            Ok(JsValue::UNDEFINED)
        })
    }

    pub fn forget_all(&self) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let mut core = shared.lock().await?;
            core.forget_all().await.map(|_| JsValue::UNDEFINED)
        })
    }

    pub fn change_passphrase(&self, current: JsValue, next: JsValue) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let current = KeySource::from_js(&current, "the current key")?;
            let next = KeySource::from_js(&next, "the new key")?;
            let core = shared.lock().await?;
            core.store().change_key(&current, &next).await.map(|_| JsValue::UNDEFINED)
        })
    }

    pub fn close(&self) -> Promise {
        let shared = self.shared.clone();
        let release = self.release_lock.clone();
        // LLM calls in flight (background jobs, flush, answer) are cancelled at once; their jobs stay queued for the
        // next open, and a result that arrives anyway (a callback that ignores its signal) is dropped.
        let closing = shared.close();
        spawn(async move {
            if let Some(store) = closing.await {
                store.close();
                let _ = release.call0(&JsValue::NULL);
            }
            Ok(JsValue::UNDEFINED)
        })
    }
}

/// Bench only (cargo feature `bench`, never in the published package): splits recall's latency.
#[cfg(feature = "bench")]
impl Leader {
    pub fn bench_embed_query(&self, query: String) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let mut core = shared.lock().await?;
            Ok(JsValue::from(core.embed_query(&query).await?.len() as u32))
        })
    }

    pub fn bench_rank_vector(&self, query: js_sys::Float32Array, k: u32) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let mut core = shared.lock().await?;
            Ok(js_sys::Uint32Array::from(core.bench_rank_vector(&query.to_vec(), k.max(1) as usize).as_slice()).into())
        })
    }

    pub fn bench_query_tokens(&self, query: String) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let core = shared.lock().await?;
            let first = core.query_windows(&query).into_iter().next().unwrap_or_default();
            Ok(js_sys::Uint32Array::from(first.as_slice()).into())
        })
    }
}
