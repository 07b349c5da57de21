// The glue between the tabs (and workers) of one origin that use the same memory. One of them leads: it holds the
// Web Lock named after the memory's database, and with it the open memory. The others follow: they forward each call
// to the leader over a BroadcastChannel, and wait in line for the lock, so that one of them takes over when the
// leader goes. Messages carry plain data only (structured clone); an `AbortSignal` travels as an "abort" message, an
// `onText` listener as the "text" messages sent to it.
//
// Protocol (every message has `t` and `from`, a random id of the sender):
//   hello  (follower → all)     who leads?
//   leader (leader → all)       I do; sent when a leader starts and in answer to `hello`
//   call   (follower → leader)  { to, id, method, args, abortable, streamed }
//   abort  (follower → leader)  { to, id }: the caller's signal fired
//   text   (leader → follower)  { to, id, text }: what the call's `onText` hears (`streamed` calls)
//   reply  (leader → follower)  { to, id, ok, value | error: { code, message } }
//   progress (leader → all)     { event }: a background phase the leader's `onProgress` heard (RELAYED_PHASES), its
//                               `error` as { code, message }

function lociError(code, message) {
  const error = new Error(message);
  error.name = "LociError";
  error.code = code;
  return error;
}

function plainError(error) {
  if (error && typeof error === "object") {
    return { code: typeof error.code === "string" ? error.code : "INTERNAL", message: String(error.message ?? error) };
  }
  return { code: "INTERNAL", message: String(error) };
}

// The `onProgress` phases of work that runs in the leader alone (distillation jobs, the background embedding of long
// messages) and that every tab of the memory wants to show; the others (open, tab role, closing) are the tab's own.
const RELAYED_PHASES = new Set(["distill", "embedded", "embed", "sync"]);

function newId() {
  return globalThis.crypto.randomUUID();
}

/** Takes the lock `name` if it is free: resolves to its release function, `null` when it is held, or
 * `"unsupported"` where Web Locks do not exist. */
export function tryTabLock(name) {
  const locks = globalThis.navigator && globalThis.navigator.locks;
  if (!locks) return Promise.resolve("unsupported");
  return new Promise((resolve, reject) => {
    locks
      .request(name, { ifAvailable: true }, (lock) => {
        if (!lock) {
          resolve(null);
          return undefined;
        }
        return new Promise((release) => resolve(release));
      })
      .catch(reject);
  });
}

/** A place in line for the lock `name`: `granted()` resolves to its release function once every holder before it is
 * gone; `cancel()` leaves the line (and `granted()` then never resolves). */
export class LockWaiter {
  constructor(name) {
    this.controller = new AbortController();
    this.promise = new Promise((resolve) => {
      globalThis.navigator.locks
        .request(name, { signal: this.controller.signal }, () => new Promise((release) => resolve(release)))
        .catch(() => {}); // cancelled: nothing waits on it any more
    });
  }
  granted() {
    return this.promise;
  }
  cancel() {
    this.controller.abort();
  }
}

/** The leader's side: answers `hello`, runs forwarded calls with `dispatch(method, args) → Promise` once `serve` has
 * been called (calls that come before wait), and replies with the result or a `{ code, message }` error. */
export class TabServer {
  constructor(channelName) {
    this.id = newId();
    this.channel = new BroadcastChannel(channelName);
    this.dispatch = null;
    this.waiting = [];
    this.aborts = new Map();
    this.closed = false;
    this.channel.onmessage = (event) => this.receive(event.data);
    this.announce();
  }

  announce() {
    this.channel.postMessage({ t: "leader", from: this.id });
  }

  /** The `onProgress` the leader's memory reports to: calls the app's own `onProgress` (if any) here, and sends the
   * background phases to the followers, whose own `onProgress` hears them (see `TabClient.hearProgress`). */
  progressRelay(onProgress) {
    return (event) => {
      try {
        if (typeof onProgress === "function") onProgress(event);
      } finally {
        if (!this.closed && event && typeof event === "object" && RELAYED_PHASES.has(event.phase)) {
          const sent = { ...event };
          if (sent.error != null) sent.error = plainError(sent.error); // its `code` would not survive the clone
          try {
            this.channel.postMessage({ t: "progress", from: this.id, event: sent });
          } catch {
            // not cloneable: the followers miss one event, the leader has heard it
          }
        }
      }
    };
  }

  serve(dispatch) {
    this.dispatch = dispatch;
    const waiting = this.waiting;
    this.waiting = [];
    for (const message of waiting) this.run(message);
  }

  receive(message) {
    if (this.closed || !message || typeof message !== "object") return;
    if (message.t === "hello") {
      this.announce();
    } else if (message.t === "call" && message.to === this.id) {
      if (this.dispatch) this.run(message);
      else this.waiting.push(message);
    } else if (message.t === "abort" && message.to === this.id) {
      const controller = this.aborts.get(`${message.from}/${message.id}`);
      if (controller) controller.abort();
    }
  }

  run(message) {
    const key = `${message.from}/${message.id}`;
    const args = Array.isArray(message.args) ? message.args : [];
    if (message.abortable) {
      const controller = new AbortController();
      this.aborts.set(key, controller);
      const last = args[args.length - 1];
      if (last && typeof last === "object") last.signal = controller.signal;
    }
    const last = args[args.length - 1];
    if (message.streamed && last && typeof last === "object") {
      last.onText = (text) => {
        if (!this.closed) this.channel.postMessage({ t: "text", from: this.id, to: message.from, id: message.id, text });
      };
    }
    Promise.resolve()
      .then(() => this.dispatch(String(message.method), args))
      .then(
        (value) => this.reply(message, { ok: true, value }),
        (error) => this.reply(message, { ok: false, error: plainError(error) }),
      )
      .finally(() => this.aborts.delete(key));
  }

  reply(message, body) {
    if (this.closed) return;
    const head = { t: "reply", from: this.id, to: message.from, id: message.id };
    try {
      this.channel.postMessage({ ...head, ...body });
    } catch (error) {
      const detail = `the result cannot be sent to the other tab: ${error && error.message}`;
      this.channel.postMessage({ ...head, ok: false, error: { code: "INVALID_INPUT", message: detail } });
    }
  }

  /** Stops serving. Calls that were waiting for `serve` get `{ code, message }` (e.g. why the open failed). */
  close(code, message) {
    if (this.closed) return;
    for (const waiting of this.waiting) this.reply(waiting, { ok: false, error: { code, message } });
    this.waiting = [];
    this.closed = true;
    this.dispatch = null;
    this.channel.close();
  }
}

/** A follower's side: finds the leader, forwards calls to it and settles them with its replies. When the leader
 * changes (or `leaderGone()` says it went), the calls still in flight get `LEADER_GONE`: they may or may not have
 * been carried out, and nothing else would ever answer them. */
export class TabClient {
  constructor(channelName) {
    this.id = newId();
    this.channel = new BroadcastChannel(channelName);
    this.leader = null;
    this.next = 0;
    this.pending = new Map();
    this.waiting = [];
    this.closedError = null;
    this.onProgress = null;
    this.channel.onmessage = (event) => this.receive(event.data);
  }

  /** Calls `onProgress` with the background phases the leader reports (distillation, background embedding). */
  hearProgress(onProgress) {
    this.onProgress = typeof onProgress === "function" ? onProgress : null;
  }

  /** Resolves once a leader has answered; rejects with `BLOCKED_BY_OTHER_TAB` if none does within `timeoutMs`
   * (the lock is held by something that does not speak this protocol, e.g. another version of loci). */
  ready(timeoutMs) {
    if (this.leader) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(
          lociError(
            "BLOCKED_BY_OTHER_TAB",
            "the memory is held by another tab that does not answer (another version of loci?); close it there",
          ),
        );
      }, timeoutMs);
      this.waiting.push(() => {
        clearTimeout(timer);
        resolve();
      });
      this.channel.postMessage({ t: "hello", from: this.id });
    });
  }

  receive(message) {
    if (this.closedError || !message || typeof message !== "object") return;
    if (message.t === "leader") {
      if (this.leader !== message.from) {
        if (this.leader !== null) this.leaderGone();
        this.leader = message.from;
      }
      const waiting = this.waiting;
      this.waiting = [];
      for (const wake of waiting) wake();
    } else if (message.t === "progress" && message.from === this.leader && this.onProgress) {
      const event = { ...message.event };
      if (event.error != null) event.error = lociError(event.error.code || "INTERNAL", event.error.message || "");
      try {
        this.onProgress(event);
      } catch {
        // the app's listener failing is its own bug, as in the leader
      }
    } else if (message.t === "text" && message.to === this.id) {
      const call = this.pending.get(message.id);
      if (call && call.onText) {
        try {
          call.onText(message.text);
        } catch {
          // a listener's bug must not cost the answer
        }
      }
    } else if (message.t === "reply" && message.to === this.id) {
      const call = this.pending.get(message.id);
      if (!call) return;
      this.pending.delete(message.id);
      call.cleanup();
      if (message.ok) {
        call.resolve(message.value);
      } else {
        const error = message.error || {};
        // The leader closed under the call: for this tab the memory is still there, its leader is not.
        if (error.code === "CLOSED") call.reject(lociError("LEADER_GONE", "the tab that held the memory closed"));
        else call.reject(lociError(error.code || "INTERNAL", error.message || "failed in the leading tab"));
      }
    }
  }

  call(method, args) {
    if (this.closedError) return Promise.reject(this.closedError);
    return new Promise((resolve, reject) => {
      const id = ++this.next;
      const sent = Array.from(args);
      let signal = null;
      let onText = null;
      const last = sent[sent.length - 1];
      if (last && typeof last === "object" && !Array.isArray(last)) {
        const copy = { ...last };
        if (last.signal != null) {
          signal = last.signal;
          delete copy.signal;
        }
        if (typeof last.onText === "function") {
          onText = last.onText;
          delete copy.onText;
        }
        sent[sent.length - 1] = copy;
      }
      if (signal && typeof signal.addEventListener !== "function") {
        reject(lociError("INVALID_INPUT", "`signal` must be an AbortSignal"));
        return;
      }
      if (signal && signal.aborted) {
        reject(lociError("ABORTED", "aborted"));
        return;
      }
      const leader = this.leader;
      const onAbort = () => this.channel.postMessage({ t: "abort", from: this.id, to: leader, id });
      if (signal) signal.addEventListener("abort", onAbort);
      const cleanup = () => signal && signal.removeEventListener("abort", onAbort);
      this.pending.set(id, { resolve, reject, cleanup, onText });
      try {
        const streamed = !!onText;
        this.channel.postMessage({ t: "call", from: this.id, to: leader, id, method, args: sent, abortable: !!signal, streamed });
      } catch (error) {
        this.pending.delete(id);
        cleanup();
        const detail = `${method}: the arguments cannot be sent to the tab that holds the memory (${error && error.message})`;
        reject(lociError("INVALID_INPUT", detail));
      }
    });
  }

  /** Fails every call in flight with `LEADER_GONE`. */
  leaderGone() {
    const pending = this.pending;
    this.pending = new Map();
    for (const call of pending.values()) {
      call.cleanup();
      call.reject(lociError("LEADER_GONE", "the tab that held the memory went away while the call was in flight"));
    }
  }

  /** Stops following: calls in flight and later ones get `CLOSED`. */
  close() {
    if (this.closedError) return;
    this.leaderGone();
    this.closedError = lociError("CLOSED", "memory is closed");
    this.channel.close();
  }
}
