//! Two memories ("a phone" and "a laptop", each over its own store) sync through a real WebDAV server (Debian's
//! `rclone serve webdav`): concurrent writes, one offline for a while, forgets on each side, a crash in the middle of
//! a sync. Both end with the memory one device given all the operations would hold (the same turns in the same
//! order, the same recall), nothing lost or doubled, and the server holds no plaintext. Needs the feature `sync`
//! (`npm test` builds the native tests with it).
#![cfg(all(not(target_arch = "wasm32"), feature = "sync"))]

mod common;

use common::msg;
use common::sync::{RcloneWebDav, TestCipher};
use loci::embed::OnnxRuntime;
use loci::memory::{Memory, MemoryConfig, RecallOptions, SyncApplied};
use loci::store::MemStore;
use loci::sync::webdav::{Ureq, WebDav};
use pollster::block_on;

type Mem = Memory<MemStore, OnnxRuntime>;

const CANARY: &str = "CANARY-sync-memory-7f3e-heron";

fn open(store: MemStore) -> Mem {
    let config = MemoryConfig::default();
    block_on(Memory::open(store, common::embedder(config.embed), config)).expect("open")
}

fn device_id(c: char) -> impl FnOnce() -> String {
    move || std::iter::repeat_n(c, 32).collect()
}

fn sync(m: &mut Mem, remote: &WebDav<Ureq>, key: &TestCipher, device: char) -> SyncApplied {
    block_on(m.sync(remote, key, device_id(device))).unwrap_or_else(|e| panic!("sync of {device}: {e}"))
}

fn add(m: &mut Mem, session: &str, turns: &[(&str, &str, &str)]) {
    let messages: Vec<_> = turns.iter().map(|(who, text, time)| msg(who, text, time)).collect();
    block_on(m.add_messages(&messages, Some(session), 0.0)).expect("add");
}

/// A session as a user sees it: its id, its title, its turns in order as (speaker, text, time).
type Contents = (String, Option<String>, Vec<(String, String, f64)>);

/// What a memory holds, session by session (by id).
fn contents(m: &Mem) -> Vec<Contents> {
    let mut sessions: Vec<_> = m
        .sessions()
        .into_iter()
        .map(|s| {
            let turns = m.session_turns(&s.id).into_iter().map(|t| (t.speaker, t.text, t.time)).collect();
            (s.id, s.title, turns)
        })
        .collect();
    sessions.sort_by(|a, b| a.0.cmp(&b.0));
    sessions
}

/// Session ids and scores of a recall, to compare two memories' rankings.
fn ranking(m: &mut Mem, query: &str) -> Vec<(String, f32)> {
    let r = block_on(m.recall(query, RecallOptions { k: 5, ..Default::default() })).expect("recall");
    r.sessions.into_iter().map(|s| (s.id, s.score)).collect()
}

fn texts(m: &Mem) -> Vec<String> {
    let mut all: Vec<String> =
        contents(m).into_iter().flat_map(|(_, _, turns)| turns.into_iter().map(|t| t.1)).collect();
    all.sort();
    all
}

#[test]
fn two_memories_converge_through_a_real_webdav_server_as_one_memory_would() {
    let server = RcloneWebDav::start();
    let remote = WebDav::new(&format!("{}/loci", server.url), None, Ureq::default());
    let key = TestCipher::new(3);
    let (phone_store, laptop_store) = (MemStore::new(), MemStore::new());
    let (mut phone, mut laptop) = (open(phone_store.clone()), open(laptop_store.clone()));

    // The phone starts; the laptop, empty, gets all of it.
    add(
        &mut phone,
        "trip",
        &[
            ("Ana", &format!("We hiked to the glacier lake, {CANARY}."), "2023-05-08T10:00:00Z"),
            ("Ben", "Which trail did you take past the mill?", "2023-05-08T10:02:00Z"),
        ],
    );
    let first = sync(&mut phone, &remote, &key, 'a');
    assert_eq!((first.ops_sent, first.segments_received, first.turns_added), (2, 0, 0));
    let got = sync(&mut laptop, &remote, &key, 'b');
    assert_eq!((got.segments_received, got.turns_added), (1, 2));
    assert_eq!(contents(&laptop), contents(&phone));

    // Both write while the laptop is offline: the laptop's turn falls between two of the phone's (by time), and it
    // forgets one of the phone's turns; the phone starts a session the laptop has never seen.
    add(&mut phone, "trip", &[("Ana", "The steep part to the ridge needs good boots.", "2023-05-08T10:06:00Z")]);
    add(
        &mut phone,
        "bread",
        &[
            ("Ben", "I baked sourdough bread with my own starter.", "2023-06-01T09:00:00Z"),
            ("Ana", "How long did the dough proof?", "2023-06-01T09:01:00Z"),
            ("Ben", "Twelve hours in the fridge.", "2023-06-01T09:02:00Z"),
        ],
    );
    add(&mut laptop, "trip", &[("Ben", "The mill trail is closed in winter.", "2023-05-08T10:04:00Z")]);
    let ben_asked = laptop.session_turns("trip")[1].id;
    block_on(laptop.forget_turn(ben_asked)).expect("forget a turn");
    add(
        &mut laptop,
        "work",
        &[
            ("Ana", "The quarterly report is due on Friday.", "2023-07-03T08:00:00Z"),
            ("Ben", "I will draft the budget section.", "2023-07-03T08:01:00Z"),
        ],
    );
    sync(&mut phone, &remote, &key, 'a');
    // The laptop comes back, and its store fails in the middle of applying what it fetched (a crash there): the
    // next open finds its store as the last committed write left it, and the next sync finishes.
    laptop_store.fail_writes_after(3);
    assert!(block_on(laptop.sync(&remote, &key, device_id('b'))).is_err(), "the store failed");
    laptop_store.set_fail_writes(false);
    drop(laptop);
    let mut laptop = open(laptop_store.clone());
    sync(&mut laptop, &remote, &key, 'b');
    sync(&mut phone, &remote, &key, 'a');
    assert_eq!(contents(&laptop), contents(&phone));

    // A forget of a session wins over a turn written to it concurrently; a turn written after seeing it starts the
    // session anew.
    block_on(phone.forget_session("work")).expect("forget a session");
    add(&mut laptop, "work", &[("Ana", "Also the slides for Monday.", "2023-07-03T08:05:00Z")]);
    sync(&mut laptop, &remote, &key, 'b');
    sync(&mut phone, &remote, &key, 'a');
    sync(&mut laptop, &remote, &key, 'b');
    add(&mut laptop, "work", &[("Ben", "New quarter, new plan.", "2023-10-02T08:00:00Z")]);
    sync(&mut laptop, &remote, &key, 'b');
    sync(&mut phone, &remote, &key, 'a');
    sync(&mut laptop, &remote, &key, 'b');

    // As one memory given every operation: the turns in time order, the forgotten ones gone.
    let solo_store = MemStore::new();
    let mut solo = open(solo_store);
    add(
        &mut solo,
        "bread",
        &[
            ("Ben", "I baked sourdough bread with my own starter.", "2023-06-01T09:00:00Z"),
            ("Ana", "How long did the dough proof?", "2023-06-01T09:01:00Z"),
            ("Ben", "Twelve hours in the fridge.", "2023-06-01T09:02:00Z"),
        ],
    );
    add(
        &mut solo,
        "trip",
        &[
            ("Ana", &format!("We hiked to the glacier lake, {CANARY}."), "2023-05-08T10:00:00Z"),
            ("Ben", "The mill trail is closed in winter.", "2023-05-08T10:04:00Z"),
            ("Ana", "The steep part to the ridge needs good boots.", "2023-05-08T10:06:00Z"),
        ],
    );
    add(&mut solo, "work", &[("Ben", "New quarter, new plan.", "2023-10-02T08:00:00Z")]);
    let expected = contents(&solo);
    assert_eq!(contents(&phone), expected);
    assert_eq!(contents(&laptop), expected);
    // Nothing doubled: each text once.
    let all = texts(&phone);
    let mut unique = all.clone();
    unique.dedup();
    assert_eq!(all, unique);
    // The same units, so the same recall as the single memory (its vectors embedded on each device).
    for q in ["Which trail is closed in winter?", "How long did the bread dough proof?", "the new quarter plan"] {
        let want = ranking(&mut solo, q);
        for (name, m) in [("phone", &mut phone), ("laptop", &mut laptop)] {
            let got = ranking(m, q);
            assert_eq!(
                got.iter().map(|s| &s.0).collect::<Vec<_>>(),
                want.iter().map(|s| &s.0).collect::<Vec<_>>(),
                "{name}: {q}"
            );
            for (g, w) in got.iter().zip(&want) {
                assert!((g.1 - w.1).abs() < 1e-4, "{name}: {q}: {got:?} vs {want:?}");
            }
        }
    }
    assert_eq!(phone.stats().units, solo.stats().units);
    assert_eq!(laptop.stats().units, solo.stats().units);
    // A reopened memory holds the same, and a sync with nothing new changes nothing.
    drop(laptop);
    let mut laptop = open(laptop_store);
    assert_eq!(contents(&laptop), expected);
    let idle = sync(&mut laptop, &remote, &key, 'b');
    assert_eq!(idle, SyncApplied::default());

    // The server holds sealed bytes only.
    let stored = server.stored();
    for device in ["aaaa", "bbbb"] {
        assert!(stored.iter().any(|(p, _)| p.contains(&format!("/d/{device}"))), "no segment of {device}");
    }
    for (path, bytes) in &stored {
        assert!(!path.contains(CANARY) && !path.contains("trip"), "{path}");
        let text = String::from_utf8_lossy(bytes);
        for plain in [CANARY, "glacier", "sourdough", "trip", "Ana"] {
            assert!(!text.contains(plain), "{path} holds {plain:?}");
        }
    }
}

#[test]
fn automatic_session_ids_carry_the_device_once_a_memory_syncs() {
    let server = RcloneWebDav::start();
    let remote = WebDav::new(&format!("{}/loci", server.url), None, Ureq::default());
    let key = TestCipher::new(4);
    let (mut phone, mut laptop) = (open(MemStore::new()), open(MemStore::new()));
    sync(&mut phone, &remote, &key, 'a');
    sync(&mut laptop, &remote, &key, 'b');
    let hi = [msg("Ana", "Good morning, the coffee machine broke.", "2023-05-08T10:00:00Z")];
    let on_phone = block_on(phone.add_messages(&hi, None, 0.0)).expect("add").session;
    let yo = [msg("Ben", "Evening: the train was late again.", "2023-05-08T19:00:00Z")];
    let on_laptop = block_on(laptop.add_messages(&yo, None, 0.0)).expect("add").session;
    // Both memories numbered their first turn 1: without the device the two sessions would be one.
    assert_ne!(on_phone, on_laptop);
    assert!(on_phone.ends_with("-aaaaaaaa"), "{on_phone}");
    sync(&mut phone, &remote, &key, 'a');
    sync(&mut laptop, &remote, &key, 'b');
    sync(&mut phone, &remote, &key, 'a');
    assert_eq!(contents(&phone), contents(&laptop));
    assert_eq!(phone.sessions().len(), 2);
}

#[test]
fn forget_all_on_one_device_empties_both_and_what_comes_after_syncs() {
    let server = RcloneWebDav::start();
    let remote = WebDav::new(&format!("{}/loci", server.url), None, Ureq::default());
    let key = TestCipher::new(5);
    let phone_store = MemStore::new();
    let (mut phone, mut laptop) = (open(phone_store.clone()), open(MemStore::new()));
    add(&mut phone, "trip", &[("Ana", "We hiked to the glacier lake.", "2023-05-08T10:00:00Z")]);
    sync(&mut phone, &remote, &key, 'a');
    sync(&mut laptop, &remote, &key, 'b');
    assert_eq!(laptop.stats().turns, 1);
    block_on(phone.forget_all()).expect("forget all");
    // Reopened right after: the log keeps the forget, and nothing forgotten is recorded again.
    drop(phone);
    let mut phone = open(phone_store);
    add(&mut phone, "fresh", &[("Ana", "A clean slate.", "2023-09-01T10:00:00Z")]);
    sync(&mut phone, &remote, &key, 'a');
    sync(&mut laptop, &remote, &key, 'b');
    assert_eq!(contents(&laptop), contents(&phone));
    assert_eq!(texts(&laptop), ["A clean slate."]);
}

#[test]
fn a_crash_at_any_write_of_a_sync_loses_and_doubles_nothing() {
    let server = RcloneWebDav::start();
    let key = TestCipher::new(6);
    // A sync's writes: the log after recording, after sending, after merging, then the apply.
    for crash_after in 0..4 {
        let remote = WebDav::new(&format!("{}/crash-{crash_after}", server.url), None, Ureq::default());
        let (mut phone, laptop_store) = (open(MemStore::new()), MemStore::new());
        let mut laptop = open(laptop_store.clone());
        add(
            &mut phone,
            "trip",
            &[
                ("Ana", "We hiked to the glacier lake.", "2023-05-08T10:00:00Z"),
                ("Ben", "Which trail did you take?", "2023-05-08T10:02:00Z"),
            ],
        );
        sync(&mut phone, &remote, &key, 'a');
        add(&mut laptop, "trip", &[("Ben", "The mill trail is closed in winter.", "2023-05-08T10:01:00Z")]);
        add(&mut laptop, "work", &[("Ana", "The report is due on Friday.", "2023-07-03T08:00:00Z")]);
        laptop_store.fail_writes_after(crash_after);
        assert!(block_on(laptop.sync(&remote, &key, device_id('b'))).is_err(), "crash after {crash_after} writes");
        laptop_store.set_fail_writes(false);
        drop(laptop);
        let mut laptop = open(laptop_store);
        sync(&mut laptop, &remote, &key, 'b');
        sync(&mut phone, &remote, &key, 'a');
        assert_eq!(contents(&laptop), contents(&phone), "crash after {crash_after} writes");
        assert_eq!(
            texts(&phone),
            [
                "The mill trail is closed in winter.",
                "The report is due on Friday.",
                "We hiked to the glacier lake.",
                "Which trail did you take?"
            ],
            "crash after {crash_after} writes"
        );
        assert_eq!(phone.session_turns("trip")[1].text, "The mill trail is closed in winter.");
    }
}
