//! The exported `Memory`, and how the tabs of one origin share it. One tab leads: it holds the memory's Web Lock
//! and the open memory ([`Leader`]) and serves the others. A tab that opens a memory held elsewhere follows: it
//! forwards each call to the leader over a BroadcastChannel (same API, same errors) and waits in line for the lock.
//! When the leader goes (its tab closes or crashes, or `close()`), the next tab in line opens the memory and leads;
//! the calls that were in flight to the old leader fail with `LEADER_GONE`, never hang. Background distillation runs
//! in the leader only, so every job runs once. The messaging itself is plain JS (`tabs.js`).
//!
//! Calls a follower forwards run with the leader's settings (its `llm`, `distill`, `onProgress`): tabs of one app
//! open a memory with the same options. A follower's own options are kept for the day it leads. The background work
//! the leader reports (`onProgress` phases `distill`, `embedded`, `embed`) reaches every follower's `onProgress` too.

use futures::future::{FutureExt, LocalBoxFuture, Shared as SharedFuture};

use super::*;

#[wasm_bindgen(module = "/src/web/tabs.js")]
extern "C" {
    /// Takes the Web Lock `name` if free: resolves to its release function, `null`, or `"unsupported"`.
    #[wasm_bindgen(js_name = tryTabLock)]
    pub(super) fn try_tab_lock(name: &str) -> Promise;

    /// A place in line for a Web Lock.
    type LockWaiter;
    #[wasm_bindgen(constructor)]
    fn new(name: &str) -> LockWaiter;
    /// Resolves to the lock's release function once it is this tab's turn.
    #[wasm_bindgen(method)]
    fn granted(this: &LockWaiter) -> Promise;
    #[wasm_bindgen(method)]
    fn cancel(this: &LockWaiter);

    /// The leader's end of the channel.
    pub(super) type TabServer;
    #[wasm_bindgen(constructor)]
    pub(super) fn new(channel: &str) -> TabServer;
    /// Starts running forwarded calls with `dispatch(method, args) → Promise`.
    #[wasm_bindgen(method)]
    fn serve(this: &TabServer, dispatch: &Function);
    #[wasm_bindgen(method)]
    pub(super) fn close(this: &TabServer, code: &str, message: &str);
    /// The `onProgress` of the leader's memory: `on_progress` here, and the background phases sent to the followers.
    #[wasm_bindgen(method, js_name = progressRelay)]
    pub(super) fn progress_relay(this: &TabServer, on_progress: &JsValue) -> Function;

    /// A follower's end of the channel.
    #[derive(Clone)]
    type TabClient;
    #[wasm_bindgen(constructor)]
    fn new(channel: &str) -> TabClient;
    #[wasm_bindgen(method)]
    fn ready(this: &TabClient, timeout_ms: f64) -> Promise;
    #[wasm_bindgen(method)]
    fn call(this: &TabClient, method: &str, args: &js_sys::Array) -> Promise;
    #[wasm_bindgen(method, js_name = leaderGone)]
    fn leader_gone(this: &TabClient);
    /// Calls `on_progress` with the background phases the leader reports.
    #[wasm_bindgen(method, js_name = hearProgress)]
    fn hear_progress(this: &TabClient, on_progress: &JsValue);
    #[wasm_bindgen(method)]
    fn close(this: &TabClient);
}

/// How long a follower waits for the lock holder to answer before it says `BLOCKED_BY_OTHER_TAB`: a leader answers
/// as soon as it holds the lock, even while its model still loads; silence means something else holds it.
const LEADER_ANSWER_MS: f64 = 10_000.0;

/// The BroadcastChannel of memory `name`; the protocol version keeps tabs of incompatible builds apart.
pub(super) fn channel_name(name: &str) -> String {
    format!("{}#tabs-v1", IdbStore::database_name(name))
}

type Promotion = SharedFuture<LocalBoxFuture<'static, Result<Rc<Leading>, JsValue>>>;

/// What this tab's `Memory` is now.
enum Role {
    Leading(Rc<Leading>),
    Following(Following),
    /// Its turn came: the memory is being opened here; calls wait for it.
    Promoting(Promotion),
    /// Closed, or the promotion failed: calls get this error.
    Closed(JsValue),
}

struct Leading {
    leader: Rc<Leader>,
    server: TabServer,
    /// Kept alive while the server may call it.
    _dispatch: Closure<dyn FnMut(String, js_sys::Array) -> Promise>,
}

struct Following {
    client: TabClient,
    waiter: LockWaiter,
    /// The open options, for the day this tab leads (`setLlm` updates their `llm`).
    options: JsValue,
}

/// A long-term memory stored in this browser.
#[wasm_bindgen]
pub struct Memory {
    name: String,
    role: Rc<RefCell<Role>>,
}

enum Target {
    Remote(TabClient),
    Wait(Promotion),
}

/// Packs a call's arguments for the channel.
fn call_args(values: &[&JsValue]) -> js_sys::Array {
    values.iter().copied().collect()
}

fn rejected(e: Error) -> Promise {
    Promise::reject(&js_error(e))
}

/// Runs a forwarded call on the leader.
fn dispatch(leader: &Leader, method: &str, args: &js_sys::Array) -> Promise {
    let arg = |i| args.get(i);
    let text = |i, what: &str| arg(i).as_string().ok_or_else(|| Error::invalid(format!("{what} must be a string")));
    match method {
        "addMessages" => leader.add_messages(arg(0), arg(1)),
        "recall" => leader.recall(arg(0), arg(1)),
        "answer" => leader.answer(arg(0), arg(1)),
        "stats" => leader.stats(),
        "persist" => leader.persist(),
        "sessions" => leader.sessions(),
        "sessionTurns" => text(0, "the session").map_or_else(rejected, |s| leader.session_turns(s)),
        "export" => leader.export(),
        "import" => leader.import(arg(0)),
        "flush" => leader.flush(arg(0)),
        "episodes" => leader.episodes(),
        "facts" => leader.facts(arg(0)),
        "history" => leader.history(arg(0)),
        "retryParked" => leader.retry_parked(),
        "forget" => leader.forget(arg(0)),
        "forgetAll" => leader.forget_all(),
        "changePassphrase" => leader.change_passphrase(arg(0), arg(1)),
        #[cfg(feature = "sync")]
        "sync" => leader.sync(arg(0)),
        #[cfg(feature = "bench")]
        "benchEmbedQuery" => text(0, "the query").map_or_else(rejected, |q| leader.bench_embed_query(q)),
        #[cfg(feature = "bench")]
        "benchRankVector" => match arg(0).dyn_into::<js_sys::Float32Array>() {
            Ok(q) => leader.bench_rank_vector(q, arg(1).as_f64().unwrap_or(10.0) as u32),
            Err(_) => rejected(Error::invalid("the query vector must be a Float32Array")),
        },
        #[cfg(feature = "bench")]
        "benchQueryTokens" => text(0, "the query").map_or_else(rejected, |q| leader.bench_query_tokens(q)),
        other => rejected(Error::invalid(format!("no call {other:?} (a tab of another loci version?)"))),
    }
}

/// Makes this tab the leader of an opened memory: other tabs' calls now run here.
fn lead(leader: Leader, server: TabServer) -> Rc<Leading> {
    let leader = Rc::new(leader);
    let target = leader.clone();
    let dispatch = Closure::<dyn FnMut(String, js_sys::Array) -> Promise>::new(move |method: String, args| {
        dispatch(&target, &method, &args)
    });
    server.serve(dispatch.as_ref().unchecked_ref());
    progress(&leader.on_progress, "tab", Some("leading"));
    Rc::new(Leading { leader, server, _dispatch: dispatch })
}

fn name_of(options: &JsValue) -> Option<String> {
    Reflect::get(options, &"name".into()).ok().and_then(|n| n.as_string())
}

fn on_progress_of(options: &JsValue) -> Option<Function> {
    Reflect::get(options, &"onProgress".into()).ok().and_then(|f| f.dyn_into::<Function>().ok())
}

async fn open_tab(options: JsValue) -> Result<Memory, JsValue> {
    match open_inner(&options, None).await {
        Ok((leader, server)) => {
            let name = leader.name.clone();
            let leading = lead(leader, server);
            Ok(Memory { name, role: Rc::new(RefCell::new(Role::Leading(leading))) })
        }
        Err(Error::BlockedByOtherTab(_)) => follow(options).await,
        Err(e) => Err(js_error(e)),
    }
}

/// The memory is held by another tab: follow it, and stand in line to lead. If this tab's turn comes before the
/// leader answers (it just went), lead at once.
async fn follow(options: JsValue) -> Result<Memory, JsValue> {
    // open_inner validated the options before it found the lock taken.
    let name = name_of(&options).unwrap_or_default();
    // Calls run in the leader, but a wrong key is refused here all the same.
    let encryption = parse_encryption(&options).map_err(js_error)?;
    IdbStore::check_key(&name, encryption.as_ref()).await.map_err(js_error)?;
    let client = TabClient::new(&channel_name(&name));
    // The leader's distillation and background embedding are this memory's too: its onProgress hears them.
    client.hear_progress(&on_progress_of(&options).map_or(JsValue::NULL, JsValue::from));
    let waiter = LockWaiter::new(&IdbStore::database_name(&name));
    let ready = JsFuture::from(client.ready(LEADER_ANSWER_MS));
    let turn = JsFuture::from(waiter.granted());
    match futures::future::select(ready, turn).await {
        futures::future::Either::Left((Ok(_), turn)) => {
            progress(&on_progress_of(&options), "tab", Some("following"));
            let options = js_sys::Object::assign(&js_sys::Object::new(), options.unchecked_ref()).into();
            let role = Rc::new(RefCell::new(Role::Following(Following { client, waiter, options })));
            wasm_bindgen_futures::spawn_local(take_over_when_due(role.clone(), turn));
            Ok(Memory { name, role })
        }
        futures::future::Either::Left((Err(e), _)) => {
            waiter.cancel();
            client.close();
            Err(e)
        }
        futures::future::Either::Right((release, _)) => {
            client.close();
            let release = release?.dyn_into::<Function>()?;
            let (leader, server) = open_inner(&options, Some(release)).await.map_err(js_error)?;
            Ok(Memory { name, role: Rc::new(RefCell::new(Role::Leading(lead(leader, server)))) })
        }
    }
}

/// Waits for this follower's turn at the lock, then opens the memory here and leads. Calls in flight to the old
/// leader get `LEADER_GONE`; calls made meanwhile wait for the open.
async fn take_over_when_due(role: Rc<RefCell<Role>>, turn: JsFuture) {
    let Ok(release) = turn.await.and_then(|r| r.dyn_into::<Function>()) else { return };
    let options = match &*role.borrow() {
        Role::Following(f) => {
            f.client.close(); // fails its calls in flight with LEADER_GONE
            f.options.clone()
        }
        _ => {
            let _ = release.call0(&JsValue::NULL); // closed meanwhile
            return;
        }
    };
    let promotion: Promotion = async move {
        let (leader, server) = open_inner(&options, Some(release)).await.map_err(js_error)?;
        Ok(lead(leader, server))
    }
    .boxed_local()
    .shared();
    *role.borrow_mut() = Role::Promoting(promotion.clone());
    let outcome = promotion.await;
    let still_promoting = matches!(&*role.borrow(), Role::Promoting(_));
    match outcome {
        Ok(leading) if still_promoting => *role.borrow_mut() = Role::Leading(leading),
        Ok(leading) => {
            // close() came during the open: it waited for this promotion and closed what it opened.
            let _ = leading;
        }
        Err(e) if still_promoting => *role.borrow_mut() = Role::Closed(e),
        Err(_) => {}
    }
}

impl Memory {
    /// Runs `method` here if this tab leads, forwards it to the leader if it follows, and waits for an open under
    /// way.
    fn route(
        &self,
        method: &'static str,
        args: js_sys::Array,
        local: impl FnOnce(&Leader) -> Promise + 'static,
    ) -> Promise {
        let target = match &*self.role.borrow() {
            Role::Leading(l) => return local(&l.leader),
            Role::Following(f) => Target::Remote(f.client.clone()),
            Role::Promoting(p) => Target::Wait(p.clone()),
            Role::Closed(e) => return Promise::reject(e),
        };
        future_to_promise(async move {
            match target {
                Target::Remote(client) => JsFuture::from(client.call(method, &args)).await,
                Target::Wait(promotion) => JsFuture::from(local(&promotion.await?.leader)).await,
            }
        })
    }
}

#[wasm_bindgen]
impl Memory {
    /// Opens (or creates) the memory `options.name`: loads the tokenizer and model, chooses the device, and reads
    /// the stored memory from IndexedDB. If another tab (or worker) of this origin has it open, this one follows it:
    /// its calls run there (`onProgress` `{ phase: "tab", detail: "following" }`), and it takes over when that tab
    /// goes (`"leading"`).
    #[wasm_bindgen(js_name = open, unchecked_return_type = "Promise<Memory>")]
    pub fn open(#[wasm_bindgen(unchecked_param_type = "OpenOptions")] options: JsValue) -> Promise {
        future_to_promise(async move { open_tab(options).await.map(JsValue::from) })
    }

    /// Deletes the IndexedDB database of memory `name`. A memory open on it, here or in another tab, closes itself
    /// (`onProgress` `{ phase: "closed" }`); a connection that holds on (other code, an older loci) makes this fail
    /// with `BLOCKED_BY_OTHER_TAB` after 3 s instead of waiting for ever.
    #[wasm_bindgen(js_name = deleteDatabase, unchecked_return_type = "Promise<void>")]
    pub fn delete_database(#[wasm_bindgen(unchecked_param_type = "string")] name: JsValue) -> Promise {
        // Taken as a JS value: a `String` parameter would turn a number or an object into "" and delete nothing.
        match name.as_string() {
            Some(name) => spawn(async move { IdbStore::delete(&name).await.map(|_| JsValue::UNDEFINED) }),
            None => rejected(Error::invalid("the memory's name must be a string")),
        }
    }

    /// The memory's name.
    #[wasm_bindgen(getter)]
    pub fn name(&self) -> String {
        self.name.clone()
    }

    /// Why this device was chosen (e.g. "no hardware WebGPU adapter"); in a tab that follows another, says so.
    #[wasm_bindgen(getter, js_name = deviceReason)]
    pub fn device_reason(&self) -> String {
        match &*self.role.borrow() {
            Role::Leading(l) => l.leader.device_reason(),
            _ => "another tab holds this memory; calls run there".into(),
        }
    }

    /// Whether the memory leads (holds the memory in this tab) rather than follows another tab.
    #[wasm_bindgen(getter, js_name = isLeader)]
    pub fn is_leader(&self) -> bool {
        matches!(&*self.role.borrow(), Role::Leading(_))
    }

    /// Sets (or, with `null`, removes) the LLM: an OpenAI-compatible endpoint `{ baseUrl, apiKey?, model, … }` or an
    /// async function. The key is kept in memory only. In a tab that follows another, it is kept for when this tab
    /// leads; calls forwarded meanwhile use the leader's.
    #[wasm_bindgen(js_name = setLlm)]
    pub fn set_llm(
        &self,
        #[wasm_bindgen(unchecked_param_type = "LlmOptions | LlmCallback | null")] llm: JsValue,
    ) -> Result<(), JsValue> {
        match &*self.role.borrow() {
            Role::Leading(l) => l.leader.set_llm(llm),
            Role::Following(f) => {
                // Checked now as the leader would check it: found wrong only when this tab takes over, it would
                // close the memory then.
                parse_llm(&llm, None).map_err(js_error)?;
                Reflect::set(&f.options, &"llm".into(), &llm).map(|_| ())
            }
            Role::Promoting(_) => {
                Err(js_error(Error::invalid("the memory is being opened in this tab; set the LLM when it leads")))
            }
            Role::Closed(e) => Err(e.clone()),
        }
    }

    /// Whether an LLM is configured (in a tab that follows another: whether this tab has one for when it leads).
    #[wasm_bindgen(getter, js_name = hasLlm)]
    pub fn has_llm(&self) -> bool {
        match &*self.role.borrow() {
            Role::Leading(l) => l.leader.has_llm(),
            Role::Following(f) => Reflect::get(&f.options, &"llm".into()).is_ok_and(|l| l.is_truthy()),
            _ => false,
        }
    }

    /// Stores messages as turns of one session and embeds them: `messages` is an array of
    /// `{ role | speaker, content, time?, caption? }`; `options.session` names the session.
    #[wasm_bindgen(js_name = addMessages, unchecked_return_type = "Promise<AddReport>")]
    pub fn add_messages(
        &self,
        #[wasm_bindgen(unchecked_param_type = "MessageInput[]")] messages: JsValue,
        #[wasm_bindgen(unchecked_param_type = "AddOptions | undefined")] options: JsValue,
    ) -> Promise {
        let args = call_args(&[&messages, &options]);
        self.route("addMessages", args, move |leader| leader.add_messages(messages, options))
    }

    /// Ranks past sessions for `query` (default method: hybrid dense + lexical; `method: "tir"` is the papers'
    /// Turn Isolation Retrieval) and returns the top `k` with their evidence and a rendered context, optionally
    /// pruned: `prune: "extractive"` (no LLM) or `"llm"` (query-driven pruning by the configured LLM).
    /// With `sources`, or on a memory opened with `distill` and no `prune`: sessions, episodes and facts together
    /// (a `DistilledRecallResult`: a `RecallResult` with `episodes` and `facts`).
    #[wasm_bindgen(unchecked_return_type = "Promise<RecallResult>")]
    pub fn recall(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] query: JsValue,
        #[wasm_bindgen(unchecked_param_type = "RecallOptions | undefined")] options: JsValue,
    ) -> Promise {
        let args = call_args(&[&query, &options]);
        self.route("recall", args, move |leader| leader.recall(query, options))
    }

    /// Answers `question` from memory with the configured LLM: recall, prune (default: the LLM keeps only the
    /// evidence), generate. Returns the answer, the evidence it used and the calls and tokens spent. With
    /// `sources`, or on a memory opened with `distill` and no `prune`: over sessions, episodes and facts, unpruned.
    #[wasm_bindgen(unchecked_return_type = "Promise<AnswerResult>")]
    pub fn answer(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] question: JsValue,
        #[wasm_bindgen(unchecked_param_type = "RecallOptions | undefined")] options: JsValue,
    ) -> Promise {
        let args = call_args(&[&question, &options]);
        self.route("answer", args, move |leader| leader.answer(question, options))
    }

    /// Counts and configuration: sessions, turns, units, vectors, model, device; and the origin's `storage`
    /// (`persisted`, `usage`, `quota`).
    #[wasm_bindgen(unchecked_return_type = "Promise<Stats>")]
    pub fn stats(&self) -> Promise {
        let args = call_args(&[]);
        self.route("stats", args, move |leader| leader.stats())
    }

    /// Asks the browser to keep this origin's storage (`navigator.storage.persist()`): without it the browser may
    /// evict the whole memory under storage pressure. Resolves to whether the storage is persistent now.
    #[wasm_bindgen(unchecked_return_type = "Promise<boolean>")]
    pub fn persist(&self) -> Promise {
        let args = call_args(&[]);
        self.route("persist", args, move |leader| leader.persist())
    }

    /// All sessions, oldest first.
    #[wasm_bindgen(unchecked_return_type = "Promise<Session[]>")]
    pub fn sessions(&self) -> Promise {
        let args = call_args(&[]);
        self.route("sessions", args, move |leader| leader.sessions())
    }

    /// The turns of one session, in order.
    #[wasm_bindgen(js_name = sessionTurns, unchecked_return_type = "Promise<Turn[]>")]
    pub fn session_turns(&self, #[wasm_bindgen(unchecked_param_type = "string")] session: JsValue) -> Promise {
        let Some(session) = session.as_string() else {
            return rejected(Error::invalid("the session id must be a string"));
        };
        let args = call_args(&[&session.as_str().into()]);
        self.route("sessionTurns", args, move |leader| leader.session_turns(session))
    }

    /// The whole memory as a portable JSON-compatible document (`JSON.stringify` it to save a file).
    #[wasm_bindgen(unchecked_return_type = "Promise<MemoryExport>")]
    pub fn export(&self) -> Promise {
        let args = call_args(&[]);
        self.route("export", args, move |leader| leader.export())
    }

    /// Adds the sessions of an exported document (an object or its JSON text). The document is validated first
    /// (a bad one stores nothing); each session is stored whole or not at all, except one too large for a single
    /// write (10,000 turns or 2,000,000 characters), stored in runs. Sessions that already exist are skipped, so an
    /// interrupted import can be re-run: it adds the sessions it did not reach, and the rest of one it cut.
    #[wasm_bindgen(js_name = import, unchecked_return_type = "Promise<ImportReport>")]
    pub fn import(&self, #[wasm_bindgen(unchecked_param_type = "MemoryExport | string")] document: JsValue) -> Promise {
        let args = call_args(&[&document]);
        self.route("import", args, move |leader| leader.import(document))
    }

    /// Runs the pending distillation with the configured LLM until the queue is empty or holds only parked jobs:
    /// every session's buffered turns are segmented, then jobs run one at a time; after a failure it waits out the
    /// job's backoff (a timer; other calls proceed meanwhile) and goes on. Each job is reported to the open's
    /// `onProgress` as `{ phase: "distill", … }`. Needs `distill` at open and an LLM (else `LLM_UNAVAILABLE`).
    /// `options.signal` cancels it (`ABORTED`; the running job's LLM call is cancelled and the job stays queued);
    /// `close()` does too (`CLOSED`).
    #[wasm_bindgen(unchecked_return_type = "Promise<FlushReport>")]
    pub fn flush(
        &self,
        #[wasm_bindgen(unchecked_param_type = "FlushOptions | undefined")] options: JsValue,
    ) -> Promise {
        let args = call_args(&[&options]);
        self.route("flush", args, move |leader| leader.flush(options))
    }

    /// Episodes, oldest first, with the ids of their turns (and of the episodes merged into them).
    #[wasm_bindgen(unchecked_return_type = "Promise<Episode[]>")]
    pub fn episodes(&self) -> Promise {
        let args = call_args(&[]);
        self.route("episodes", args, move |leader| leader.episodes())
    }

    /// Facts in id order with their provenance; superseded ones too with `{ includeSuperseded: true }`.
    #[wasm_bindgen(unchecked_return_type = "Promise<Fact[]>")]
    pub fn facts(
        &self,
        #[wasm_bindgen(unchecked_param_type = "FactsOptions | undefined")] options: JsValue,
    ) -> Promise {
        let args = call_args(&[&options]);
        self.route("facts", args, move |leader| leader.facts(options))
    }

    /// A fact's chain of versions, oldest first: the facts it superseded and those that superseded it.
    #[wasm_bindgen(unchecked_return_type = "Promise<Fact[]>")]
    pub fn history(&self, #[wasm_bindgen(unchecked_param_type = "number")] fact_id: JsValue) -> Promise {
        let args = call_args(&[&fact_id]);
        self.route("history", args, move |leader| leader.history(fact_id))
    }

    /// Gives parked jobs another chance (e.g. after fixing the endpoint); resolves to how many. They run in the
    /// background (with `autoRun`) or at the next `flush()`.
    #[wasm_bindgen(js_name = retryParked, unchecked_return_type = "Promise<number>")]
    pub fn retry_parked(&self) -> Promise {
        let args = call_args(&[]);
        self.route("retryParked", args, move |leader| leader.retry_parked())
    }

    /// Forgets one thing, durably: `{ fact: id }`, `{ episode: id }` (and the facts distilled only from it; its
    /// turns stay), `{ session: id }` (its turns and what was distilled only from them), `{ turn: id }` (one turn,
    /// e.g. a poisoned one, with every fact that cites it and the episodes that tell it) or `{ all: true }`.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn forget(&self, #[wasm_bindgen(unchecked_param_type = "ForgetTarget")] target: JsValue) -> Promise {
        let args = call_args(&[&target]);
        self.route("forget", args, move |leader| leader.forget(target))
    }

    /// Erases everything this memory holds.
    #[wasm_bindgen(js_name = forgetAll, unchecked_return_type = "Promise<void>")]
    pub fn forget_all(&self) -> Promise {
        let args = call_args(&[]);
        self.route("forgetAll", args, move |leader| leader.forget_all())
    }

    /// Changes the key of an encrypted memory: `current` and `next` are each a passphrase or an AES-GCM `CryptoKey`
    /// (or `{ passphrase }` / `{ key }`). `BAD_KEY` when `current` does not open it. One record is rewritten in one
    /// transaction: if the page dies meanwhile, the memory opens with `current`; once this resolves, with `next`.
    /// Other tabs that follow this memory keep their own key for the day they lead: open them again.
    #[wasm_bindgen(js_name = changePassphrase, unchecked_return_type = "Promise<void>")]
    pub fn change_passphrase(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string | CryptoKey | EncryptionOptions")] current: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string | CryptoKey | EncryptionOptions")] next: JsValue,
    ) -> Promise {
        let args = call_args(&[&current, &next]);
        let role = self.role.clone();
        let done = self.route("changePassphrase", args, {
            let (current, next) = (current.clone(), next.clone());
            move |leader| leader.change_passphrase(current, next)
        });
        future_to_promise(async move {
            let result = JsFuture::from(done).await?;
            // A follower leads with its own options one day: they must hold the new key.
            if let Role::Following(f) = &*role.borrow() {
                let encryption = match next.is_string() || next.dyn_ref::<web_sys::CryptoKey>().is_some() {
                    true => {
                        let o = js_sys::Object::new();
                        let field = if next.is_string() { "passphrase" } else { "key" };
                        let _ = Reflect::set(&o, &field.into(), &next);
                        o.into()
                    }
                    false => next.clone(),
                };
                let _ = Reflect::set(&f.options, &"encryption".into(), &encryption);
            }
            Ok(result)
        })
    }

    /// Closes the memory after pending calls finish; later calls fail with code `CLOSED`. In the leading tab, the
    /// next tab in line takes over.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn close(&self) -> Promise {
        let previous = self.role.replace(Role::Closed(js_error(Error::Closed)));
        future_to_promise(async move {
            let leading = match previous {
                Role::Leading(l) => Some(l),
                Role::Following(f) => {
                    f.waiter.cancel();
                    f.client.close();
                    None
                }
                Role::Promoting(p) => p.await.ok(),
                Role::Closed(_) => None,
            };
            if let Some(l) = leading {
                l.server.close("CLOSED", "memory is closed");
                JsFuture::from(l.leader.close()).await?;
            }
            Ok(JsValue::UNDEFINED)
        })
    }
}

/// Sync (cargo feature `sync`; docs/SYNC.md).
#[cfg(feature = "sync")]
#[wasm_bindgen]
impl Memory {
    /// Syncs this memory with a WebDAV folder that other devices sync with too: sends what changed here, sealed
    /// under the sync key, and merges what they sent. `remote` is the folder's URL, or `{ url, username, password }`;
    /// `passphrase` (or `key`, an AES-GCM `CryptoKey`) unlocks the sync key, which the first device draws.
    /// `BAD_KEY` (nothing sent) when the folder's memory is under another key; `SYNC_FAILED` when the server fails
    /// or holds damage (nothing of that sync merged); `ABORTED` by `signal`. A sync cut anywhere is finished by the
    /// next one. Runs in the leading tab; the memory takes other calls while it waits on the server.
    #[wasm_bindgen(unchecked_return_type = "Promise<SyncReport>")]
    pub fn sync(&self, #[wasm_bindgen(unchecked_param_type = "SyncOptions")] options: JsValue) -> Promise {
        let args = call_args(&[&options]);
        self.route("sync", args, move |leader| leader.sync(options))
    }
}

/// Bench only (cargo feature `bench`, never in the published package): splits recall's latency.
#[cfg(feature = "bench")]
#[wasm_bindgen]
impl Memory {
    /// Embeds `query` as `recall` does; resolves to the vector's length.
    #[wasm_bindgen(js_name = benchEmbedQuery)]
    pub fn bench_embed_query(&self, query: String) -> Promise {
        let args = call_args(&[&query.as_str().into()]);
        self.route("benchEmbedQuery", args, move |leader| leader.bench_embed_query(query))
    }

    /// The ids of the `k` units whose vectors best match `query` (ranking alone, given the query's vector).
    #[wasm_bindgen(js_name = benchRankVector)]
    pub fn bench_rank_vector(&self, query: js_sys::Float32Array, k: u32) -> Promise {
        let args = call_args(&[&query.clone().into(), &k.into()]);
        self.route("benchRankVector", args, move |leader| leader.bench_rank_vector(query, k))
    }

    /// The token ids of `query`'s first window, as `benchEmbedQuery` feeds them to the model.
    #[wasm_bindgen(js_name = benchQueryTokens)]
    pub fn bench_query_tokens(&self, query: String) -> Promise {
        let args = call_args(&[&query.as_str().into()]);
        self.route("benchQueryTokens", args, move |leader| leader.bench_query_tokens(query))
    }
}
