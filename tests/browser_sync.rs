//! Sync in the browser: the first device draws the sync key (WebCrypto, as at rest) and keeps it on the server only
//! wrapped for the passphrase; another device unlocks it with the passphrase (a wrong one is `BAD_KEY`); two devices
//! sync through a server in RAM, and through a real WebDAV server over `fetch` (Debian's rclone behind
//! tests/webdav-server/server.mjs, whose URL is compiled in from `LOCI_TEST_WEBDAV_URL`: npm test starts it); the
//! servers never hold the canary.
#![cfg(target_arch = "wasm32")]

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use loci::store::seal::{KeySource, SyncUnlock};
use loci::sync::webdav::{Fetch, WebDav};
use loci::sync::{connect, DeviceLog, Op, Remote, TurnOp};
use loci::Result;
use wasm_bindgen_test::*;

#[cfg(feature = "sync")]
mod browser_common;
#[cfg(feature = "sync")]
use browser_common::{code, delete, get, js, num, open, string, wait};

wasm_bindgen_test_configure!(run_in_browser);

/// A server in RAM, as the native tests have.
#[derive(Default)]
struct MemRemote(RefCell<BTreeMap<String, Vec<u8>>>);

#[async_trait(?Send)]
impl Remote for MemRemote {
    async fn list(&self, folder: &str) -> Result<Vec<String>> {
        let prefix = format!("{folder}/");
        let names: BTreeSet<String> = self
            .0
            .borrow()
            .keys()
            .filter_map(|path| path.strip_prefix(&prefix)?.split('/').next().map(str::to_string))
            .collect();
        Ok(names.into_iter().collect())
    }

    async fn get(&self, path: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.0.borrow().get(path).cloned())
    }

    async fn create(&self, path: &str, bytes: &[u8]) -> Result<bool> {
        let created = !self.0.borrow().contains_key(path);
        if created {
            self.0.borrow_mut().insert(path.to_string(), bytes.to_vec());
        }
        Ok(created)
    }
}

const CANARY: &str = "CANARY-browser-sync-9d2e-otter";

fn unlock(passphrase: &str) -> SyncUnlock {
    SyncUnlock(KeySource::Passphrase(passphrase.into()))
}

#[wasm_bindgen_test]
async fn two_devices_share_the_sync_key_through_its_wrapped_record_and_a_wrong_passphrase_is_bad_key() {
    let remote = MemRemote::default();
    let phone_key = connect(&remote, &unlock("correct horse")).await.unwrap_or_else(|e| panic!("{e}"));
    let laptop_key = connect(&remote, &unlock("correct horse")).await.unwrap_or_else(|e| panic!("{e}"));
    let wrong = connect(&remote, &unlock("wrong horse")).await.err();
    assert_eq!(wrong.map(|e| e.code()), Some("BAD_KEY"));

    let (mut phone, mut laptop) = (DeviceLog::new("aaaa".into()), DeviceLog::new("bbbb".into()));
    for i in 0..10 {
        phone.record(Op::Turn(TurnOp {
            session: format!("{CANARY} session"),
            speaker: "user".into(),
            text: format!("{CANARY} turn {i}"),
            caption: None,
            time: i as f64,
            ingested: i as f64,
        }));
    }
    phone.sync(&remote, &phone_key).await.unwrap_or_else(|e| panic!("{e}"));
    laptop.sync(&remote, &laptop_key).await.unwrap_or_else(|e| panic!("{e}"));
    let (on_phone, on_laptop) = (phone.state(), laptop.state());
    assert!(on_laptop.as_ref().is_ok_and(|m| m.turn_count() == 10), "{on_laptop:?}");
    assert_eq!(on_phone, on_laptop);

    // The server holds the key record, the check and one segment; no canary, and not the passphrase.
    let files = remote.0.borrow();
    assert_eq!(files.keys().cloned().collect::<Vec<_>>(), ["check", "d/aaaa/1.seg", "key"]);
    for needle in [CANARY.as_bytes(), b"CANARY", b"correct horse"] {
        let hits: usize = files.values().map(|b| b.windows(needle.len()).filter(|w| *w == needle).count()).sum();
        assert_eq!(hits, 0, "{:?} on the server", String::from_utf8_lossy(needle));
    }
}

#[wasm_bindgen_test]
async fn a_segment_altered_on_the_server_is_sync_failed_and_merges_nothing() {
    let remote = MemRemote::default();
    let key = connect(&remote, &unlock("tamper")).await.unwrap_or_else(|e| panic!("{e}"));
    let (mut phone, mut laptop) = (DeviceLog::new("aaaa".into()), DeviceLog::new("bbbb".into()));
    phone.record(Op::Turn(TurnOp {
        session: "s".into(),
        speaker: "user".into(),
        text: "altered on the way".into(),
        caption: None,
        time: 0.0,
        ingested: 0.0,
    }));
    phone.sync(&remote, &key).await.unwrap_or_else(|e| panic!("{e}"));
    if let Some(segment) = remote.0.borrow_mut().get_mut("d/aaaa/1.seg") {
        segment[20] ^= 1;
    }
    let err = laptop.sync(&remote, &key).await.err();
    assert_eq!(err.map(|e| e.code()), Some("SYNC_FAILED"));
    assert!(laptop.state().is_ok_and(|m| m.turn_count() == 0), "part of a failed sync was merged");
}

// Compiled in, so a run without the server fails with this message rather than a missing-env compile error.
#[allow(clippy::option_env_unwrap)]
fn webdav_url() -> &'static str {
    option_env!("LOCI_TEST_WEBDAV_URL")
        .expect("LOCI_TEST_WEBDAV_URL: start tests/webdav-server/server.mjs (npm test does)")
}

/// How many times `needle` is in what the WebDAV server stores (its `/__canary`).
async fn canary_hits(needle: &str) -> f64 {
    let url = format!("{}/__canary?needle={needle}", webdav_url());
    let (status, body) =
        loci::sync::webdav::Transport::request(&Fetch, "GET", &url, &[], &[]).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status, 200);
    let report: serde_json::Value = serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{e}"));
    assert!(report["files"].as_f64().is_some_and(|n| n > 0.0), "the server stores nothing: {report}");
    report["hits"].as_f64().unwrap_or(f64::NAN)
}

#[wasm_bindgen_test]
async fn two_devices_sync_through_a_real_webdav_server_over_fetch() {
    // A folder of its own on the shared test server.
    let folder = format!("{}/t-{}", webdav_url(), js_sys::Date::now() as u64);
    let (phone_server, laptop_server) = (WebDav::new(&folder, None, Fetch), WebDav::new(&folder, None, Fetch));
    let phone_key = connect(&phone_server, &unlock("webdav passphrase")).await.unwrap_or_else(|e| panic!("{e}"));
    let laptop_key = connect(&laptop_server, &unlock("webdav passphrase")).await.unwrap_or_else(|e| panic!("{e}"));
    let wrong = connect(&laptop_server, &unlock("another passphrase")).await.err();
    assert_eq!(wrong.map(|e| e.code()), Some("BAD_KEY"));

    let (mut phone, mut laptop) = (DeviceLog::new("aaaa".into()), DeviceLog::new("bbbb".into()));
    let turn = |text: String, time: f64| {
        Op::Turn(TurnOp {
            session: format!("{CANARY} shared"),
            speaker: "user".into(),
            text,
            caption: None,
            time,
            ingested: time,
        })
    };
    for round in 0..2 {
        for i in 0..3 {
            let time = (round * 10 + i) as f64;
            phone.record(turn(format!("{CANARY} phone {round} {i}"), time));
            laptop.record(turn(format!("{CANARY} laptop {round} {i}"), time + 0.5));
        }
        phone.sync(&phone_server, &phone_key).await.unwrap_or_else(|e| panic!("{e}"));
        laptop.sync(&laptop_server, &laptop_key).await.unwrap_or_else(|e| panic!("{e}"));
    }
    phone.sync(&phone_server, &phone_key).await.unwrap_or_else(|e| panic!("{e}"));
    let (on_phone, on_laptop) = (phone.state(), laptop.state());
    assert!(on_phone.as_ref().is_ok_and(|m| m.turn_count() == 12), "{on_phone:?}");
    assert_eq!(on_phone, on_laptop);
    assert_eq!(canary_hits(CANARY).await, 0.0, "the canary is on the server");
    assert_eq!(canary_hits("webdav passphrase").await, 0.0, "the passphrase is on the server");
}

/// Each session of `memory` (by id) with its turns as (speaker, text, time): what two synced memories must share.
#[cfg(feature = "sync")]
async fn contents(memory: &loci::web::Memory) -> Vec<(String, Vec<(String, String, f64)>)> {
    let sessions = wait(memory.sessions()).await.unwrap_or_else(|e| panic!("{e:?}"));
    let sessions: Vec<serde_json::Value> = serde_wasm_bindgen::from_value(sessions).unwrap_or_else(|e| panic!("{e}"));
    let mut out = Vec::new();
    for s in sessions {
        let id = s["id"].as_str().unwrap_or_default().to_string();
        let turns = wait(memory.session_turns(id.as_str().into())).await.unwrap_or_else(|e| panic!("{e:?}"));
        let turns: Vec<serde_json::Value> = serde_wasm_bindgen::from_value(turns).unwrap_or_else(|e| panic!("{e}"));
        let turns = turns
            .iter()
            .map(|t| {
                let text = |k: &str| t[k].as_str().unwrap_or_default().to_string();
                (text("speaker"), text("text"), t["time"].as_f64().unwrap_or(f64::NAN))
            })
            .collect();
        out.push((id, turns));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[cfg(feature = "sync")]
#[wasm_bindgen_test]
async fn two_memories_sync_through_memory_sync_over_a_real_webdav_server() {
    let folder = format!("{}/m-{}", webdav_url(), js_sys::Date::now() as u64);
    let options =
        |passphrase: &str| js(&format!(r#"{{"remote": {{"url": "{folder}"}}, "passphrase": "{passphrase}"}}"#));
    let (phone_name, laptop_name) = ("sync-phone", "sync-laptop");
    delete(phone_name).await;
    delete(laptop_name).await;
    let (phone, laptop) = (open(phone_name).await, open(laptop_name).await);
    let add = |m: &loci::web::Memory, session: &str, turns: &[(&str, &str, &str)]| {
        let messages: Vec<String> = turns
            .iter()
            .map(|(who, text, time)| format!(r#"{{"speaker": "{who}", "content": "{text}", "time": "{time}"}}"#))
            .collect();
        m.add_messages(js(&format!("[{}]", messages.join(","))), js(&format!(r#"{{"session": "{session}"}}"#)))
    };
    wait(add(
        &phone,
        "trip",
        &[
            ("Ana", &format!("We hiked to the glacier lake, {CANARY}."), "2023-05-08T10:00:00Z"),
            ("Ben", "Which trail did you take past the mill?", "2023-05-08T10:02:00Z"),
        ],
    ))
    .await
    .unwrap_or_else(|e| panic!("{e:?}"));
    let sent = wait(phone.sync(options("correct horse"))).await.unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(num(&sent, "opsSent"), 2.0);

    // Another passphrase: BAD_KEY, and nothing changes on either side.
    let wrong = wait(laptop.sync(options("wrong horse"))).await.err().map(|e| code(&e));
    assert_eq!(wrong.as_deref(), Some("BAD_KEY"));
    assert!(contents(&laptop).await.is_empty());
    let got = wait(laptop.sync(options("correct horse"))).await.unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(num(&got, "turnsAdded"), 2.0);
    assert_eq!(contents(&laptop).await, contents(&phone).await);

    // Both write (the laptop's turn falls between two of the phone's), the laptop forgets one of the phone's turns;
    // an aborted sync changes nothing, and a reload of the laptop's page comes between.
    wait(add(&phone, "trip", &[("Ana", "The steep part to the ridge needs good boots.", "2023-05-08T10:06:00Z")]))
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    wait(add(&laptop, "trip", &[("Ben", "The mill trail is closed in winter.", "2023-05-08T10:04:00Z")]))
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    wait(add(&laptop, "work", &[("Ana", "The quarterly report is due on Friday.", "2023-07-03T08:00:00Z")]))
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    let trip = wait(laptop.session_turns("trip".into())).await.unwrap_or_else(|e| panic!("{e:?}"));
    let asked = get(&trip, "1.id");
    assert_eq!(string(&trip, "1.text"), "Which trail did you take past the mill?");
    let forget = js_sys::Object::new();
    js_sys::Reflect::set(&forget, &"turn".into(), &asked).unwrap_or_default();
    wait(laptop.forget(forget.into())).await.unwrap_or_else(|e| panic!("{e:?}"));
    let controller = web_sys::AbortController::new().unwrap_or_else(|e| panic!("{e:?}"));
    controller.abort();
    let aborted = options("correct horse");
    js_sys::Reflect::set(&aborted, &"signal".into(), &controller.signal()).unwrap_or_default();
    assert_eq!(wait(laptop.sync(aborted)).await.err().map(|e| code(&e)).as_deref(), Some("ABORTED"));
    wait(laptop.close()).await.unwrap_or_else(|e| panic!("{e:?}"));
    let laptop = open(laptop_name).await;
    for m in [&phone, &laptop, &phone] {
        wait(m.sync(options("correct horse"))).await.unwrap_or_else(|e| panic!("{e:?}"));
    }
    let expected = vec![
        (
            "trip".to_string(),
            vec![
                ("Ana".to_string(), format!("We hiked to the glacier lake, {CANARY}."), 1683540000000.0),
                ("Ben".into(), "The mill trail is closed in winter.".into(), 1683540240000.0),
                ("Ana".into(), "The steep part to the ridge needs good boots.".into(), 1683540360000.0),
            ],
        ),
        ("work".to_string(), vec![("Ana".into(), "The quarterly report is due on Friday.".into(), 1688371200000.0)]),
    ];
    assert_eq!(contents(&phone).await, expected);
    assert_eq!(contents(&laptop).await, expected);
    // What came from the other device is embedded: recall finds it.
    let r = wait(phone.recall("When is the quarterly report due?".into(), js(r#"{"k": 1}"#))).await;
    let r = r.unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(string(&r, "sessions.0.id"), "work");
    assert_eq!(canary_hits(CANARY).await, 0.0, "the canary is on the server");
    assert_eq!(canary_hits("correct horse").await, 0.0, "the passphrase is on the server");
    for m in [phone, laptop] {
        wait(m.close()).await.unwrap_or_else(|e| panic!("{e:?}"));
    }
}

#[cfg(feature = "sync")]
#[wasm_bindgen_test]
async fn the_open_option_syncs_in_the_background_with_a_key_the_app_holds() {
    use js_sys::Reflect;
    let folder = format!("{}/bg-{}", webdav_url(), js_sys::Date::now() as u64);
    // An AES-GCM key the app holds (non-extractable), the same on both devices as an app would load it on each.
    let generate = js_sys::Function::new_no_args(
        "return crypto.subtle.generateKey({ name: 'AES-GCM', length: 256 }, false, ['encrypt', 'decrypt'])",
    );
    let key = wait(generate.call0(&wasm_bindgen::JsValue::NULL).unwrap_or_else(|e| panic!("{e:?}")).into())
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    let open_syncing = |name: &'static str, fresh: bool| {
        let key = key.clone();
        let folder = folder.clone();
        async move {
            if fresh {
                delete(name).await;
            }
            // The laptop's memory is encrypted at rest: its sync record is sealed like the rest.
            let at_rest = if name == "bg-laptop" { r#", "encryption": {"passphrase": "at rest"}"# } else { "" };
            let options = browser_common::open_options(name, "wasm", at_rest);
            let sync = js(&format!(r#"{{"remote": "{folder}", "everyMinutes": 0.01}}"#));
            Reflect::set(&sync, &"key".into(), &key).unwrap_or_default();
            Reflect::set(&options, &"sync".into(), &sync).unwrap_or_default();
            browser_common::open_with(options).await.unwrap_or_else(|e| panic!("open: {e:?}"))
        }
    };
    let phone = open_syncing("bg-phone", true).await;
    let laptop = open_syncing("bg-laptop", true).await;
    let turn = js(&format!(
        r#"[{{"speaker": "Ana", "content": "{CANARY}: the ferry leaves at nine.", "time": 1700000000000}}]"#
    ));
    wait(phone.add_messages(turn, js(r#"{"session": "ferry"}"#))).await.unwrap_or_else(|e| panic!("{e:?}"));
    // No call to sync: the phone sends it within a period (0.6 s), the laptop fetches it within one.
    let mut waited = 0;
    while contents(&laptop).await.is_empty() {
        assert!(waited < 60_000, "the laptop never got the phone's turn by background sync");
        browser_common::sleep_ms(200).await;
        waited += 200;
    }
    assert_eq!(contents(&laptop).await, contents(&phone).await);
    // Reopened (its sync record read back and opened with the memory's key), the laptop has nothing new to take.
    wait(laptop.close()).await.unwrap_or_else(|e| panic!("{e:?}"));
    let laptop = open_syncing("bg-laptop", false).await;
    assert_eq!(contents(&laptop).await, contents(&phone).await);
    // A sync without options uses the open's; a wrong option is refused at open.
    let r = wait(laptop.sync(wasm_bindgen::JsValue::UNDEFINED)).await.unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(num(&r, "turnsAdded"), 0.0);
    let bad =
        browser_common::open_options("bg-bad", "wasm", r#", "sync": {"remote": "x", "passphrase": "p", "every": 1}"#);
    let refused = browser_common::open_with(bad).await.err().map(|e| code(&e));
    assert_eq!(refused.as_deref(), Some("INVALID_INPUT"));
    assert_eq!(canary_hits(CANARY).await, 0.0, "the canary is on the server");
    for m in [phone, laptop] {
        wait(m.close()).await.unwrap_or_else(|e| panic!("{e:?}"));
    }
}
