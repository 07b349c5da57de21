//! Work in the background: the runner that takes due distillation jobs one at a time through [`Shared`], the timer
//! it waits out backoffs on, and the one that embeds the rest of long texts.

use super::*;

/// Runs queued distillation jobs in the background, one at a time and in queue order, each as read → think →
/// commit ([`memory::Shared::run_next_job`]): the memory's lock is never held while the LLM thinks, so
/// `addMessages`, `recall` and `stats` go on meanwhile. Retry backoffs are waited out on a timer. Started after
/// `addMessages`, at open (work queued before a reload resumes), and when an LLM is set or parked jobs are retried;
/// it stops when nothing is due, the memory closes, or the LLM is removed. Only one runs per memory.
///
/// The chat goes first: while an answer, an LLM pruning or an expansion is waiting on the model
/// ([`JobRunner::foreground`]), no job starts, and the job whose call is in flight when one begins is cancelled
/// (it stays queued, as after a close) and runs again once the chat's calls are done. A user's model often serves
/// one request at a time (a local llama.cpp, WebLLM): a distillation call of a minute would otherwise stand
/// between the user and the reply.
#[derive(Clone)]
pub(super) struct JobRunner {
    pub(super) shared: Shared,
    pub(super) llm: Rc<RefCell<Option<Rc<dyn Llm>>>>,
    pub(super) on_progress: Option<Function>,
    /// Opened with `distill` and `autoRun` (the default).
    pub(super) enabled: bool,
    pub(super) running: Rc<std::cell::Cell<bool>>,
    /// Chat calls waiting on the model now.
    pub(super) foreground: Rc<std::cell::Cell<usize>>,
    /// Cancels the job call in flight, if any.
    pub(super) in_flight: Rc<RefCell<Option<AbortSignal>>>,
}

/// Held while a chat call waits on the model (see [`JobRunner`]); the runner resumes when the last one is dropped.
pub(super) struct Foreground(JobRunner);

impl Drop for Foreground {
    fn drop(&mut self) {
        let left = self.0.foreground.get().saturating_sub(1);
        self.0.foreground.set(left);
        if left == 0 {
            self.0.start();
        }
    }
}

impl JobRunner {
    pub(super) fn new(
        shared: Shared,
        llm: Rc<RefCell<Option<Rc<dyn Llm>>>>,
        on_progress: Option<Function>,
        enabled: bool,
    ) -> Self {
        JobRunner {
            shared,
            llm,
            on_progress,
            enabled,
            running: Default::default(),
            foreground: Default::default(),
            in_flight: Default::default(),
        }
    }

    /// Marks a chat call waiting on the model until the guard is dropped: the job call in flight is cancelled, and
    /// none starts meanwhile.
    pub(super) fn foreground(&self) -> Foreground {
        self.foreground.set(self.foreground.get() + 1);
        if let Some(call) = self.in_flight.borrow_mut().take() {
            call.abort();
        }
        Foreground(self.clone())
    }

    pub(super) fn start(&self) {
        if !self.enabled || self.running.get() || self.foreground.get() > 0 || self.llm.borrow().is_none() {
            return;
        }
        self.running.set(true);
        let me = self.clone();
        wasm_bindgen_futures::spawn_local(async move {
            let quiet = |e: &Error| matches!(e, Error::Aborted | Error::Closed);
            let result = me.drain().await;
            let cancelled = matches!(result, Err(Error::Aborted));
            if let Err(e) = result.or_else(|e| if quiet(&e) { Ok(()) } else { Err(e) }) {
                // Nothing awaits a background run: tell the page through onProgress; the job stays queued.
                if let Some(f) = &me.on_progress {
                    let event = js_sys::Object::new();
                    let _ = Reflect::set(&event, &"phase".into(), &"distill".into());
                    let _ = Reflect::set(&event, &"error".into(), &js_error(e));
                    let _ = f.call1(&JsValue::NULL, &event);
                }
            }
            me.running.set(false);
            // Cancelled for a chat call that is already done (its guard found this run still unwinding): go on.
            if cancelled && !me.shared.is_closed() {
                me.start();
            }
        });
    }

    pub(super) async fn drain(&self) -> Result<(), Error> {
        loop {
            if self.foreground.get() > 0 {
                return Ok(()); // the last chat call's guard starts the runner again
            }
            let Some(llm) = self.llm.borrow().clone() else { return Ok(()) };
            let mut tell = |p: &DistillProgress| distill_progress(&self.on_progress, p);
            let call = AbortSignal::new();
            *self.in_flight.borrow_mut() = Some(call.clone());
            let step = self.shared.run_next_job(&*llm, js_sys::Date::now(), Some(&call), &mut tell).await;
            self.in_flight.borrow_mut().take();
            match step? {
                JobStep::Ran(_) => {}
                JobStep::WaitUntil(t) => sleep((t - js_sys::Date::now()).max(0.0), self.shared.closing()).await?,
                JobStep::Idle => return Ok(()),
            }
        }
    }
}

/// Tells `onProgress` about one distillation job: `{ phase: "distill", job, ok, jobsLeft, pendingTurns, episodes,
/// facts }`.
pub(super) fn distill_progress(callback: &Option<Function>, p: &DistillProgress) {
    let Some(f) = callback else { return };
    let Ok(event) = to_js(p) else { return };
    let _ = Reflect::set(&event, &"phase".into(), &"distill".into());
    let _ = f.call1(&JsValue::NULL, &event);
}

/// Resolves after `ms` milliseconds (the global `setTimeout`: works in pages and workers), or with `Err(Aborted)`
/// as soon as `abort` fires.
pub(super) async fn sleep(ms: f64, abort: &AbortSignal) -> Result<(), Error> {
    let set_timeout = Reflect::get(&js_sys::global(), &"setTimeout".into())
        .ok()
        .and_then(|f| f.dyn_into::<Function>().ok())
        .ok_or_else(|| Error::invalid("no setTimeout in this context"))?;
    let ms = ms.clamp(0.0, 2_147_483_647.0);
    let promise = Promise::new(&mut |resolve, _reject| {
        let _ = set_timeout.call2(&JsValue::NULL, &resolve, &JsValue::from(ms));
        abort.on_abort(move || {
            let _ = resolve.call0(&JsValue::NULL);
        });
    });
    let _ = JsFuture::from(promise).await;
    abort.check()
}

/// Embeds the windows of long texts that `addMessages` left for later ([`memory::EMBED_NOW_WINDOWS`]), one model
/// call per hold of the memory, giving the page a turn between calls: a chat's `addMessages`, `recall` and
/// `answer` wait at most for one call. Started after `addMessages` and `import`, and at open (a reload in the middle
/// resumes). Tells `onProgress({ phase: "embedded", pending })` as each unit leaves the list (its vectors complete,
/// or it was forgotten meanwhile), and
/// `{ phase: "embed", error }` when a step fails (the unit stays pending for the next start). Only one runs per
/// memory.
#[derive(Clone)]
pub(super) struct EmbedRunner {
    pub(super) shared: Shared,
    pub(super) on_progress: Option<Function>,
    pub(super) running: Rc<std::cell::Cell<bool>>,
}

impl EmbedRunner {
    pub(super) fn new(shared: Shared, on_progress: Option<Function>) -> Self {
        EmbedRunner { shared, on_progress, running: Default::default() }
    }

    pub(super) fn start(&self) {
        if self.running.get() || self.shared.is_closed() {
            return;
        }
        self.running.set(true);
        let me = self.clone();
        wasm_bindgen_futures::spawn_local(async move {
            let mut before = None;
            loop {
                match me.shared.embed_pending_step().await {
                    Ok(pending) => {
                        if before.is_some_and(|b| pending < b) {
                            progress_with(&me.on_progress, "embedded", None, &[("pending", (pending as u32).into())]);
                        }
                        if pending == 0 {
                            break;
                        }
                        before = Some(pending);
                    }
                    Err(Error::Closed) => break,
                    Err(e) => {
                        progress_with(&me.on_progress, "embed", None, &[("error", js_error(e))]);
                        break;
                    }
                }
                if sleep(0.0, me.shared.closing()).await.is_err() {
                    break;
                }
            }
            me.running.set(false);
        });
    }
}
