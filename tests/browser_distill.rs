//! Headless Chromium: distillation through the JS API over IndexedDB, against the scripted test server (its default
//! mode answers distillation prompts with schema-valid replies derived from each prompt). The whole of one LoCoMo
//! conversation (served by the test server from ../shared/data/locomo, never committed) is distilled with faults
//! injected mid-way — 500s, garbage JSON, the memory closed and reopened with work queued — and must end in the same
//! turns, episodes and facts as the fault-free native run of the same code (`tests/distill_native.rs`, written to
//! target/), with every turn in an episode. Jobs also run in the background without `flush()`, through an outage
//! and a reopen. Then forgetting cascades through JS and survives a reopen, parked jobs are retried, and
//! recall/answer combine the distilled sources.
#![cfg(target_arch = "wasm32")]

mod browser_common;
mod locomo_fixture;

use std::collections::BTreeSet;

use browser_common::*;
use js_sys::{Array, Function, Reflect, JSON};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

// Compiled in, so a run without the server fails with this message rather than a missing-env compile error.
#[allow(clippy::option_env_unwrap)]
fn server() -> &'static str {
    option_env!("LOCI_TEST_LLM_URL").expect("LOCI_TEST_LLM_URL: start tests/llm-server/server.mjs (npm test does)")
}

fn control(path: &str) -> String {
    format!("{}/{path}", server().trim_end_matches("/v1"))
}

async fn post(url: &str, body: &str) {
    let init = web_sys::RequestInit::new();
    init.set_method("POST");
    init.set_body(&JsValue::from_str(body));
    let resp = JsFuture::from(web_sys::window().unwrap().fetch_with_str_and_init(url, &init)).await.unwrap();
    let resp: web_sys::Response = resp.unchecked_into();
    JsFuture::from(resp.text().unwrap()).await.unwrap();
}

async fn reset() {
    post(&control("__reset"), "").await;
}

async fn script(steps: &str) {
    post(&control("__script"), steps).await;
}

/// The LLM option: the test server, one client retry so that injected 500s reach the job queue.
fn llm() -> String {
    format!(r#"{{"baseUrl": "{}", "model": "test", "timeoutMs": 5000, "maxRetries": 1}}"#, server())
}

/// Open options with distillation (short backoffs so retries do not wait seconds) and a progress recorder.
fn distill_options(name: &str, distill: &str, with_llm: bool) -> JsValue {
    let llm = if with_llm { format!(r#", "llm": {}"#, llm()) } else { String::new() };
    let options = open_options(name, "wasm", &format!(r#", "distill": {distill} {llm}"#));
    let record =
        Function::new_with_args("e", "if (e.phase === 'distill') { (globalThis.__distillEvents ||= []).push(e); }");
    Reflect::set(&options, &"onProgress".into(), &record).unwrap();
    options
}

/// Short backoffs so retries do not wait seconds; jobs run only in `flush()`, so that a run's order of work is
/// fixed by the test (a background runner would interleave with it as timing allows).
const FAST: &str = r#"{"backoffMs": 20, "maxBackoffMs": 100, "autoRun": false}"#;

async fn open_distill(name: &str) -> loci::web::Memory {
    open_with(distill_options(name, FAST, true)).await.unwrap_or_else(|e| panic!("open {name}: {e:?}"))
}

fn distill_events() -> u32 {
    Reflect::get(&js_sys::global(), &"__distillEvents".into())
        .ok()
        .and_then(|a| a.dyn_into::<Array>().ok())
        .map(|a| a.length())
        .unwrap_or(0)
}

/// One session of the conversation: its id and its messages (`speaker`, `content`, `caption`, one minute apart
/// from the session's date).
struct Conversation {
    sessions: Vec<(String, JsValue)>,
    messages: usize,
}

/// "1:56 pm on 8 May, 2023" → epoch ms.
fn session_time(date: &str) -> f64 {
    chrono::NaiveDateTime::parse_from_str(&date.replace("am", "AM").replace("pm", "PM"), "%I:%M %p on %d %B, %Y")
        .unwrap_or_else(|e| panic!("{date}: {e}"))
        .and_utc()
        .timestamp_millis() as f64
}

async fn conversation() -> Option<Conversation> {
    let text = match fetch_text(&control("__fixture/locomo/0")).await {
        Ok(t) => t,
        Err(e) => {
            web_sys::console::log_1(&format!("SKIPPED: no LoCoMo conversation from the test server ({e})").into());
            return None;
        }
    };
    let doc: serde_json::Value = serde_json::from_str(&text).expect("LoCoMo JSON");
    let conv = doc["conversation"].as_object().expect("a conversation");
    let numbers: Vec<u32> = conv
        .keys()
        .filter_map(|k| k.strip_prefix("session_").and_then(|n| n.parse().ok()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut sessions = Vec::new();
    let mut messages = 0;
    for n in numbers {
        let start = session_time(conv[&format!("session_{n}_date_time")].as_str().expect("a session date"));
        let turns = conv[&format!("session_{n}")].as_array().expect("session turns");
        let msgs: Vec<serde_json::Value> = turns
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut m = serde_json::json!({"speaker": t["speaker"], "content": t["text"],
                    "time": start + i as f64 * 60_000.0});
                if let Some(c) = t["blip_caption"].as_str() {
                    m["caption"] = c.into();
                }
                m
            })
            .collect();
        messages += msgs.len();
        sessions.push((format!("session_{n}"), js(&serde_json::Value::Array(msgs).to_string())));
    }
    Some(Conversation { sessions, messages })
}

async fn add(m: &loci::web::Memory, session: &str, messages: &JsValue) {
    wait(m.add_messages(messages.clone(), js(&format!(r#"{{"session": "{session}"}}"#))))
        .await
        .unwrap_or_else(|e| panic!("addMessages {session}: {e:?}"));
}

async fn flush(m: &loci::web::Memory) -> JsValue {
    wait(m.flush(JsValue::UNDEFINED)).await.unwrap_or_else(|e| panic!("flush: {e:?}"))
}

fn json_of(v: &JsValue) -> serde_json::Value {
    serde_json::from_str(&JSON::stringify(v).unwrap().as_string().unwrap()).unwrap()
}

/// What must match between runs: turns, episodes and facts, without ingest times (wall-clock).
async fn state(m: &loci::web::Memory) -> serde_json::Value {
    let mut turns = Vec::new();
    for s in json_of(&wait(m.sessions()).await.unwrap()).as_array().unwrap() {
        let id = s["id"].as_str().unwrap().to_string();
        for t in json_of(&wait(m.session_turns(id.into())).await.unwrap()).as_array().unwrap() {
            turns.push(serde_json::json!([t["id"], t["session"], t["speaker"], t["text"], t["time"]]));
        }
    }
    let strip = |mut v: serde_json::Value| {
        for x in v.as_array_mut().unwrap() {
            let o = x.as_object_mut().unwrap();
            assert!(!o.contains_key("vector"), "vectors stay inside loci");
            o.remove("ingested");
        }
        v
    };
    let episodes = strip(json_of(&wait(m.episodes()).await.unwrap()));
    let facts = strip(json_of(&wait(m.facts(js(r#"{"includeSuperseded": true}"#))).await.unwrap()));
    serde_json::json!({"turns": turns, "episodes": episodes, "facts": facts})
}

/// The turns some episode of `state` holds.
fn covered_turns(state: &serde_json::Value) -> BTreeSet<u64> {
    state["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["turnIds"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()))
        .collect()
}

async fn every_turn_in_an_episode(m: &loci::web::Memory) {
    let s = state(m).await;
    let all: BTreeSet<u64> = s["turns"].as_array().unwrap().iter().map(|t| t[0].as_u64().unwrap()).collect();
    assert_eq!(covered_turns(&s), all, "every turn belongs to an episode");
    let stats = wait(m.stats()).await.unwrap();
    assert_eq!(num(&stats, "distill.pendingTurns"), 0.0);
    assert_eq!(len(&stats, "distill.parked"), 0, "no job parked");
}

/// Numbers as f64 (JS has one number type; serde_json keeps integers apart from floats), recursively.
fn numbers_as_f64(v: &serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Number(n) => serde_json::json!(n.as_f64().unwrap()),
        serde_json::Value::Array(a) => a.iter().map(numbers_as_f64).collect(),
        serde_json::Value::Object(o) => o.iter().map(|(k, x)| (k.clone(), numbers_as_f64(x))).collect(),
        other => other.clone(),
    }
}

fn llm_total(stats: &JsValue, field: &str) -> f64 {
    ["segment", "narrate", "merge", "predict", "distill", "consolidate"]
        .iter()
        .map(|p| num(stats, &format!("llm.{p}.{field}")))
        .sum()
}

#[wasm_bindgen_test]
async fn the_whole_locomo_conversation_distils_under_faults_as_the_native_run_without() {
    let Some(conv) = conversation().await else { return };
    let native = fetch_text(&format!("/{}", locomo_fixture::NATIVE_DISTILL_STATE))
        .await
        .expect("the native distill state: run the native tests first (npm test does)");
    let clean = numbers_as_f64(&serde_json::from_str(&native).unwrap());
    reset().await;

    // Each session added, then flushed (as a chat app would at the end of a sitting). Mid-way: a burst of 500s (more
    // than the client retries), garbage JSON twice (more than the corrective retry), a truncated reply, bad
    // gateways; then the memory closed with the next session's work queued but not run (a page reload), and reopened.
    delete("t-distill-faults").await;
    let mut m = open_distill("t-distill-faults").await;
    let events_before = distill_events();
    let half = conv.sessions.len() / 2;
    let mut failures = 0.0;
    for (i, (id, msgs)) in conv.sessions.iter().enumerate() {
        add(&m, id, msgs).await;
        if i == half - 1 {
            script(
                r#"[{"status": 500, "times": 3}, {"raw": "not json"}, {"raw": "{\"groups\": [[0, 1"},
                    {"status": 503}, {"status": 500}, {"body": "<html>bad gateway"}, {"body": "<html>bad gateway"}]"#,
            )
            .await;
        }
        if i == half {
            let errors = llm_total(&wait(m.stats()).await.unwrap(), "errors");
            assert!(errors >= 3.0, "failed calls counted per phase ({errors})");
            wait(m.close()).await.unwrap();
            m = open_distill("t-distill-faults").await;
            let stats = wait(m.stats()).await.unwrap();
            assert!(
                num(&stats, "distill.jobs") > 0.0 || num(&stats, "distill.pendingTurns") > 0.0,
                "work survived the reopen"
            );
        }
        failures += num(&flush(&m).await, "failures");
    }
    assert!(failures >= 3.0, "faults reached the job queue and were retried after their backoff ({failures})");
    assert!(distill_events() > events_before, "flush reported progress as {{ phase: \"distill\" }}");
    every_turn_in_an_episode(&m).await;
    let faulty = numbers_as_f64(&state(&m).await);
    let stats = wait(m.stats()).await.unwrap();
    web_sys::console::log_1(
        &format!(
            "browser distill of conv-26 under faults: {} sessions, {} messages, {} episodes, {} facts, {} LLM calls \
             ({} failed), {failures} job failures",
            conv.sessions.len(),
            conv.messages,
            faulty["episodes"].as_array().unwrap().len(),
            faulty["facts"].as_array().unwrap().len(),
            llm_total(&stats, "calls"),
            llm_total(&stats, "errors"),
        )
        .into(),
    );
    assert_eq!(faulty["turns"], clean["turns"], "the same turns as the native fault-free run");
    assert_eq!(faulty["episodes"], clean["episodes"], "the same episodes as the native fault-free run");
    assert_eq!(faulty["facts"], clean["facts"], "the same facts as the native fault-free run");
    assert!(num(&stats, "llm.merge.calls") > 0.0, "integration was exercised");
    assert!(num(&stats, "distill.factsSuperseded") > 0.0, "consolidation superseded facts");
    wait(m.close()).await.unwrap();

    // Persistence: reopened, episodes and facts are read back from IndexedDB unchanged.
    let m = open_distill("t-distill-faults").await;
    assert_eq!(numbers_as_f64(&state(&m).await), clean, "episodes and facts persist across close and reopen");
    wait(m.close()).await.unwrap();
    delete("t-distill-faults").await;
    reset().await;
}

/// Resolves after `ms` (the test page's timer).
async fn pause(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        web_sys::window().unwrap().set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms).unwrap();
    });
    JsFuture::from(promise).await.unwrap();
}

/// Requests the test server has received on its chat endpoint since its last reset.
async fn server_requests() -> usize {
    fetch_text(&control("__log")).await.unwrap().matches("\"path\"").count()
}

/// Waits (at most 10 s) until the server has received more than `count` requests.
async fn until_requests_exceed(count: usize) {
    for _ in 0..200 {
        if server_requests().await > count {
            return;
        }
        pause(50).await;
    }
    panic!("no request reached the test server");
}

/// Polls `stats()` until no job is queued (the background runner is done), at most `seconds`.
async fn until_no_jobs(m: &loci::web::Memory, seconds: u32) -> JsValue {
    for _ in 0..seconds * 20 {
        let stats = wait(m.stats()).await.unwrap();
        if num(&stats, "distill.jobs") == 0.0 {
            return stats;
        }
        pause(50).await;
    }
    panic!("background distillation did not finish in {seconds} s");
}

#[wasm_bindgen_test]
async fn jobs_run_in_the_background_through_an_outage_and_a_reopen() {
    let Some(conv) = conversation().await else { return };
    reset().await;
    delete("t-distill-background").await;
    // autoRun is the default; a small window so that every session fills several.
    let options = r#"{"window": 6, "backoffMs": 20, "maxBackoffMs": 100}"#;
    let reopen = || open_with(distill_options("t-distill-background", options, true));
    let m = reopen().await.unwrap();
    // A second tab on the memory, with a listener of its own: the jobs run in the leader, and it hears them too.
    let follower_options = distill_options("t-distill-background", options, true);
    let record =
        Function::new_with_args("e", "if (e.phase === 'distill') { (globalThis.__followerDistill ||= []).push(e); }");
    Reflect::set(&follower_options, &"onProgress".into(), &record).unwrap();
    let follower = open_with(follower_options).await.unwrap();
    assert!(!follower.is_leader());
    let events_before = distill_events();
    let (first, msgs) = &conv.sessions[0];
    add(&m, first, msgs).await;
    // addMessages resolved with the turns stored and the first window queued; nobody calls flush().
    let stats = until_no_jobs(&m, 60).await;
    assert!(num(&stats, "distill.episodes") > 0.0, "episodes were made in the background");
    assert!(num(&stats, "distill.pendingTurns") < 6.0, "only an unfilled window waits for more turns");
    let heard_here = distill_events() - events_before;
    assert!(heard_here > 0, "background jobs are reported to onProgress");
    let heard_there = || {
        let events = Reflect::get(&js_sys::global(), &"__followerDistill".into()).unwrap_or(JsValue::UNDEFINED);
        events.dyn_into::<Array>().map(|a| a.length()).unwrap_or(0)
    };
    for _ in 0..40 {
        if heard_there() >= heard_here {
            break;
        }
        sleep_ms(50).await; // the channel delivers in its own task
    }
    assert_eq!(heard_there(), heard_here, "the follower hears each of the leader's jobs");
    let last = Reflect::get(&js_sys::global(), &"__followerDistill".into()).unwrap();
    let last = last.unchecked_into::<Array>().get(heard_here - 1);
    assert_eq!(num(&last, "episodes"), num(&stats, "distill.episodes"), "with the same counts");
    wait(follower.close()).await.unwrap(); // else it would lead once `m` closes below

    // An outage: the next windows fail (more than the client retries); the runner waits out the backoff and goes on.
    script(r#"[{"status": 500, "times": 4}, {"status": 503, "times": 2}]"#).await;
    let (second, msgs) = &conv.sessions[1];
    add(&m, second, msgs).await; // the first session ended: its buffer is segmented too
    let stats = until_no_jobs(&m, 60).await;
    assert!(llm_total(&stats, "errors") >= 2.0, "the outage was met ({} errors)", llm_total(&stats, "errors"));
    assert_eq!(len(&stats, "distill.parked"), 0, "nothing parked: retried after the backoff");

    // A reload with work queued: closed right after adding, reopened, the runner resumes on its own.
    let (third, msgs) = &conv.sessions[2];
    add(&m, third, msgs).await;
    wait(m.close()).await.unwrap();
    let m = reopen().await.unwrap();
    let stats = until_no_jobs(&m, 60).await;
    assert!(num(&stats, "distill.pendingTurns") < 6.0);
    let s = state(&m).await;
    let covered = covered_turns(&s);
    let earlier: BTreeSet<u64> = s["turns"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t[1] != third.as_str())
        .map(|t| t[0].as_u64().unwrap())
        .collect();
    assert!(earlier.is_subset(&covered), "the ended sessions are wholly distilled without a flush");
    // flush() takes the last session's unfilled window too.
    flush(&m).await;
    every_turn_in_an_episode(&m).await;

    // Closing is prompt while a job waits on a hung endpoint (60 s client timeout): its call is cancelled and the
    // job stays queued; the next open runs it.
    wait(m.close()).await.unwrap();
    let hung_options = || {
        let llm = format!(r#"{{"baseUrl": "{}", "model": "test", "timeoutMs": 60000, "maxRetries": 0}}"#, server());
        open_with(open_options("t-distill-background", "wasm", &format!(r#", "distill": {options}, "llm": {llm}"#)))
    };
    let m = hung_options().await.unwrap();
    script(r#"[{"hang": true}]"#).await;
    let before = server_requests().await;
    let (fourth, msgs) = &conv.sessions[3];
    add(&m, fourth, msgs).await;
    until_requests_exceed(before).await; // the background job is now waiting on the hung call
                                         // Meanwhile the chat goes on: no lock is held while the model thinks (a held one would keep these waiting for
                                         // the call's 60 s timeout).
    let started = js_sys::Date::now();
    let one_more = js(r#"[{"role": "user", "content": "One more thing about the adoption agency."}]"#);
    let added = wait(m.add_messages(one_more, js(&format!(r#"{{"session": "{fourth}"}}"#)))).await;
    added.expect("addMessages while a job waits on the model");
    wait(m.recall("adoption agency".into(), JsValue::UNDEFINED)).await.expect("recall meanwhile");
    let stats = wait(m.stats()).await.expect("stats meanwhile");
    let took = js_sys::Date::now() - started;
    assert!(took < 20_000.0, "addMessages, recall and stats waited {took} ms behind a hung LLM call");
    assert!(num(&stats, "distill.jobs") >= 1.0, "the job is still waiting on the model");
    let started = js_sys::Date::now();
    wait(m.close()).await.unwrap();
    let took = js_sys::Date::now() - started;
    assert!(took < 20_000.0, "close waited {took} ms for a hung LLM call");
    reset().await;
    let m = hung_options().await.unwrap();
    let stats = until_no_jobs(&m, 60).await;
    assert_eq!(len(&stats, "distill.parked"), 0, "the cancelled job was not counted as a failure");
    assert!(num(&stats, "distill.pendingTurns") < 6.0, "the job left queued ran after the reopen");
    wait(m.close()).await.unwrap();
    delete("t-distill-background").await;
    reset().await;
}

/// The chat goes first on a model that serves one request at a time (`maxConcurrency: 1`, as a local llama.cpp or
/// WebLLM does): an answer asked while a background job waits on the model cancels that job's call instead of
/// queueing behind it (60 s here: the call hangs); the job stays queued and runs again once the answer is done.
#[wasm_bindgen_test]
async fn an_answer_goes_before_a_background_job_on_a_one_request_model() {
    let Some(conv) = conversation().await else { return };
    reset().await;
    delete("t-distill-first").await;
    let llm = format!(
        r#"{{"baseUrl": "{}", "model": "test", "timeoutMs": 60000, "maxRetries": 0, "maxConcurrency": 1}}"#,
        server()
    );
    let distill = r#"{"window": 6, "backoffMs": 20, "maxBackoffMs": 100}"#;
    let options = open_options("t-distill-first", "wasm", &format!(r#", "distill": {distill}, "llm": {llm}"#));
    let m = open_with(options).await.unwrap();
    script(r#"[{"hang": true}]"#).await;
    let before = server_requests().await;
    let (first, msgs) = &conv.sessions[0];
    add(&m, first, msgs).await;
    until_requests_exceed(before).await; // a background job now waits on the hung call, holding the model's one slot
    let started = js_sys::Date::now();
    let answer = wait(m.answer("What did Caroline talk about?".into(), js(r#"{"prune": "none"}"#))).await;
    let took = js_sys::Date::now() - started;
    let answer = answer.expect("an answer while a job waited on the model");
    assert!(!string(&answer, "answer").is_empty());
    assert!(took < 20_000.0, "the answer waited {took} ms behind a background job's call");
    // The cancelled job was not a failure, and it ran again after the answer.
    let stats = until_no_jobs(&m, 60).await;
    assert_eq!(len(&stats, "distill.parked"), 0);
    assert!(num(&stats, "distill.episodes") > 0.0, "the job ran after the answer");
    wait(m.close()).await.unwrap();
    delete("t-distill-first").await;
    reset().await;
}

#[wasm_bindgen_test]
async fn forgetting_cascades_through_js_and_persists() {
    let Some(conv) = conversation().await else { return };
    reset().await;
    delete("t-distill-forget").await;
    let m = open_distill("t-distill-forget").await;
    for (id, msgs) in conv.sessions.iter().take(2) {
        add(&m, id, msgs).await;
    }
    flush(&m).await;
    every_turn_in_an_episode(&m).await;
    let before = state(&m).await;

    // Distilled recall and answer: facts and episodes with their times, then sessions.
    let r = wait(m.recall("What did Caroline research?".into(), js(r#"{"k": 2, "sources": {"facts": 5}}"#)))
        .await
        .expect("distilled recall");
    assert!(len(&r, "facts") <= 5 && len(&r, "episodes") > 0 && len(&r, "sessions") > 0);
    assert!(string(&r, "context").contains("### Facts\n- (2023-"), "{}", string(&r, "context"));
    assert!(string(&r, "context").contains("### Episode: "));
    assert!(get(&r, "episodes.0.vector").is_undefined() && num(&r, "episodes.0.score") > 0.0);
    let only =
        wait(m.recall("Caroline".into(), js(r#"{"sources": {"sessions": false, "episodes": 3}}"#))).await.unwrap();
    assert_eq!((len(&only, "sessions"), len(&only, "episodes")), (0, 3));
    let classic = wait(m.recall("Caroline".into(), js(r#"{"prune": "extractive"}"#))).await.expect("pruned recall");
    assert!(get(&classic, "episodes").is_undefined(), "`prune` asks for the sessions recall");
    let err = wait(m.recall("x".into(), js(r#"{"prune": "llm", "sources": {}}"#))).await.unwrap_err();
    assert_eq!(code(&err), "INVALID_INPUT");
    let err = wait(m.recall("x".into(), js(r#"{"sources": {"fact": 3}}"#))).await.unwrap_err();
    assert_eq!(code(&err), "INVALID_INPUT", "unknown source names are refused");
    let a = wait(m.answer("What did Caroline research?".into(), JsValue::UNDEFINED)).await.expect("answer");
    assert!(string(&a, "context").contains("### Facts"), "answer() uses the distilled context when distill is on");
    assert_eq!(num(&a, "spent.calls"), 1.0, "one answer call, no pruning");

    // Forget one fact: gone, links cut, history NOT_FOUND.
    let fact =
        before["facts"].as_array().unwrap().iter().find(|f| f["status"] == "active").unwrap()["id"].as_f64().unwrap();
    wait(m.history(fact.into())).await.expect("history of a fact");
    wait(m.forget(js(&format!(r#"{{"fact": {fact}}}"#)))).await.expect("forget a fact");
    let err = wait(m.history(fact.into())).await.unwrap_err();
    assert_eq!(code(&err), "NOT_FOUND");
    let err = wait(m.forget(js(&format!(r#"{{"fact": {fact}}}"#)))).await.unwrap_err();
    assert_eq!(code(&err), "NOT_FOUND");
    let after = state(&m).await;
    assert_eq!(len(&js(&after.to_string()), "facts"), len(&js(&before.to_string()), "facts") - 1);
    assert!(!after["facts"].to_string().contains(&format!("\"supersededBy\":{fact},")), "no link dangles");

    // Forget one episode (of the session forgotten next): its facts that came only from it go; its turns stay.
    let session = conv.sessions[0].0.clone();
    let gone: BTreeSet<u64> = before["turns"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t[1] == session.as_str())
        .map(|t| t[0].as_u64().unwrap())
        .collect();
    let episode = after["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["turnIds"].as_array().unwrap().iter().all(|t| gone.contains(&t.as_u64().unwrap())))
        .expect("an episode of the first session");
    let episode_id = episode["id"].as_u64().unwrap();
    wait(m.forget(js(&format!(r#"{{"episode": {episode_id}}}"#)))).await.expect("forget an episode");
    let after = state(&m).await;
    assert!(after["episodes"].as_array().unwrap().iter().all(|e| e["id"].as_u64() != Some(episode_id)));
    assert!(after["facts"].as_array().unwrap().iter().all(|f| f["episodeIds"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e.as_u64() != Some(episode_id))));
    assert_eq!(after["turns"], before["turns"], "the episode's turns stay");

    // Forget a session: its turns, and the episodes and facts distilled from them, in one durable write.
    wait(m.forget(js(&format!(r#"{{"session": "{session}"}}"#)))).await.expect("forget a session");
    let after = state(&m).await;
    let mentions = |v: &serde_json::Value, field: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .any(|x| x[field].as_array().unwrap().iter().any(|t| gone.contains(&t.as_u64().unwrap())))
    };
    assert!(!mentions(&after["episodes"], "turnIds"), "no episode keeps a forgotten turn");
    assert!(!mentions(&after["facts"], "turnIds"), "no fact keeps a forgotten turn");
    assert!(after["turns"].as_array().unwrap().iter().all(|t| t[1] != session.as_str()));
    let stats = wait(m.stats()).await.unwrap();
    assert_eq!(num(&stats, "sessions"), 1.0);

    // Reopened: what was forgotten stays forgotten, the rest is there.
    wait(m.close()).await.unwrap();
    let m = open_distill("t-distill-forget").await;
    assert_eq!(state(&m).await, after, "forgetting persisted");
    // Turns the forgotten episodes left undistilled are queued again; a flush covers every turn once more.
    flush(&m).await;
    every_turn_in_an_episode(&m).await;

    // Bad targets are typed errors.
    for bad in
        [r#"{}"#, r#"{"fact": 1, "episode": 2}"#, r#"{"fact": -1}"#, r#"{"all": false}"#, r#"{"sesion": "x"}"#, "3"]
    {
        let err = wait(m.forget(js(bad))).await.unwrap_err();
        assert_eq!(code(&err), "INVALID_INPUT", "{bad}");
    }
    let err = wait(m.forget(js(r#"{"session": "nope"}"#))).await.unwrap_err();
    assert_eq!(code(&err), "NOT_FOUND");

    // Forget everything: nothing left, also after a reopen.
    wait(m.forget(js(r#"{"all": true}"#))).await.expect("forget all");
    wait(m.close()).await.unwrap();
    let m = open_distill("t-distill-forget").await;
    let stats = wait(m.stats()).await.unwrap();
    assert_eq!(
        (num(&stats, "turns"), num(&stats, "distill.episodes"), num(&stats, "distill.factsActive")),
        (0.0, 0.0, 0.0)
    );
    assert_eq!(wait(m.episodes()).await.unwrap().unchecked_into::<Array>().length(), 0);
    wait(m.close()).await.unwrap();
}

#[wasm_bindgen_test]
async fn failing_jobs_park_and_retry_and_options_are_checked() {
    reset().await;
    // Without an LLM, flush is LLM_UNAVAILABLE; without `distill`, it is INVALID_INPUT.
    delete("t-distill-park").await;
    let m = open_with(distill_options("t-distill-park", "true", false)).await.unwrap();
    let err = wait(m.flush(JsValue::UNDEFINED)).await.unwrap_err();
    assert_eq!(code(&err), "LLM_UNAVAILABLE");
    wait(m.close()).await.unwrap();
    let plain = open("t-distill-park").await;
    assert_eq!(code(&wait(plain.flush(JsValue::UNDEFINED)).await.unwrap_err()), "INVALID_INPUT");
    wait(plain.close()).await.unwrap();
    for bad in [
        r#"{"window": 1}"#,
        r#"{"windw": 5}"#,
        r#"{"maxAttempts": 0}"#,
        r#""yes""#,
        r#"{"backoffMs": -1}"#,
        r#"{"autoRun": "yes"}"#,
    ] {
        let err = open_with(distill_options("t-distill-park", bad, true)).await.err().expect(bad);
        assert_eq!(code(&err), "INVALID_INPUT", "{bad}");
    }

    // A job that keeps failing is parked (kept, listed in stats), flush returns; retryParked brings it back.
    let m =
        open_with(distill_options("t-distill-park", r#"{"maxAttempts": 2, "backoffMs": 10, "autoRun": false}"#, true))
            .await
            .unwrap();
    let msgs = js(
        r#"[{"speaker": "Maya", "content": "I adopted a greyhound called Pixel last Saturday.", "time": "2024-03-02T10:00:00Z"},
                     {"speaker": "Bot", "content": "Greyhounds love short sprints and long naps.", "time": "2024-03-02T10:01:00Z"}]"#,
    );
    add(&m, "dog", &msgs).await;
    // A flush cancelled by its signal is ABORTED and leaves the work queued; unknown flush options are refused.
    let controller = web_sys::AbortController::new().unwrap();
    controller.abort();
    let flush_options = js_sys::Object::new();
    Reflect::set(&flush_options, &"signal".into(), &controller.signal()).unwrap();
    assert_eq!(code(&wait(m.flush(flush_options.into())).await.unwrap_err()), "ABORTED");
    let stats = wait(m.stats()).await.unwrap();
    assert!(num(&stats, "distill.jobs") >= 1.0 && len(&stats, "distill.parked") == 0, "an aborted flush loses nothing");
    assert_eq!(code(&wait(m.flush(js(r#"{"sgnal": 1}"#))).await.unwrap_err()), "INVALID_INPUT");
    // A flush waiting on a hung endpoint (60 s client timeout) rejects with CLOSED as soon as the memory closes:
    // its LLM call is cancelled and its job stays queued.
    wait(m.close()).await.unwrap();
    let llm = format!(r#"{{"baseUrl": "{}", "model": "test", "timeoutMs": 60000, "maxRetries": 0}}"#, server());
    let m = open_with(open_options(
        "t-distill-park",
        "wasm",
        &format!(r#", "distill": {{"autoRun": false}}, "llm": {llm}"#),
    ))
    .await
    .unwrap();
    script(r#"[{"hang": true}]"#).await;
    let before = server_requests().await;
    let pending = m.flush(JsValue::UNDEFINED);
    until_requests_exceed(before).await;
    let started = js_sys::Date::now();
    wait(m.close()).await.unwrap();
    assert_eq!(code(&wait(pending).await.unwrap_err()), "CLOSED");
    let took = js_sys::Date::now() - started;
    assert!(took < 20_000.0, "close waited {took} ms for a flush's hung LLM call");
    reset().await;
    let m =
        open_with(distill_options("t-distill-park", r#"{"maxAttempts": 2, "backoffMs": 10, "autoRun": false}"#, true))
            .await
            .unwrap();
    let stats = wait(m.stats()).await.unwrap();
    assert!(num(&stats, "distill.jobs") >= 1.0 && len(&stats, "distill.parked") == 0, "a closed flush loses nothing");
    script(r#"[{"status": 500, "times": 4}]"#).await;
    let report = flush(&m).await;
    assert_eq!((num(&report, "parked"), num(&report, "parkedTotal")), (1.0, 1.0));
    let stats = wait(m.stats()).await.unwrap();
    assert_eq!(len(&stats, "distill.parked"), 1);
    assert_eq!(string(&stats, "distill.parked.0.kind"), "segment");
    assert!(string(&stats, "distill.parked.0.lastError").contains("LLM_"), "the error is kept");
    // Parked work survives a reopen.
    wait(m.close()).await.unwrap();
    let m =
        open_with(distill_options("t-distill-park", r#"{"maxAttempts": 2, "backoffMs": 10, "autoRun": false}"#, true))
            .await
            .unwrap();
    assert_eq!(len(&wait(m.stats()).await.unwrap(), "distill.parked"), 1);
    reset().await; // default mode again: the endpoint is "fixed"
    assert_eq!(wait(m.retry_parked()).await.unwrap().as_f64(), Some(1.0));
    let report = flush(&m).await;
    assert!(num(&report, "jobsRun") >= 2.0 && num(&report, "parkedTotal") == 0.0);
    every_turn_in_an_episode(&m).await;
    let history = wait(m.history(js("1"))).await;
    assert!(history.is_ok() || code(&history.unwrap_err()) == "NOT_FOUND");
    assert_eq!(code(&wait(m.history(js("\"one\""))).await.unwrap_err()), "INVALID_INPUT");
    assert_eq!(code(&wait(m.facts(js(r#"{"includeSuperseded": "yes"}"#))).await.unwrap_err()), "INVALID_INPUT");
    wait(m.close()).await.unwrap();
    delete("t-distill-park").await;
}
