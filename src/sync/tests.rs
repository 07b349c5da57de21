//! The sync core against an in-memory server, with a native AES-256-GCM: concurrent and offline writers, forgets,
//! any order, crashes mid-sync, and what the server holds.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use async_trait::async_trait;
use pollster::block_on;

use super::*;
use crate::error::{Error, Result};

const IV_BYTES: usize = 12;

struct TestCipher(Aes256Gcm);

impl TestCipher {
    fn new(key: u8) -> Self {
        TestCipher(Aes256Gcm::new(&[key; 32].into()))
    }
}

/// The key record as the browser's is, with a byte for the passphrase: random material wrapped under a
/// key-encryption key (here the passphrase byte itself, where the browser runs PBKDF2).
struct TestUnlock(u8);

const RECORD_AAD: &[u8] = b"test key record";

#[async_trait(?Send)]
impl Unlock for TestUnlock {
    type Key = TestCipher;

    async fn create(&self) -> Result<(TestCipher, Vec<u8>)> {
        let material = Aes256Gcm::generate_key(&mut OsRng);
        let record = TestCipher::new(self.0).seal(RECORD_AAD, &material).await?;
        Ok((TestCipher(Aes256Gcm::new(&material)), record))
    }

    async fn unlock(&self, record: &[u8]) -> Result<TestCipher> {
        match TestCipher::new(self.0).open(RECORD_AAD, record).await? {
            Some(material) => Aes256Gcm::new_from_slice(&material)
                .map(TestCipher)
                .map_err(|_| Error::SyncFailed("the key record holds no key".into())),
            None => Err(Error::BadKey("this passphrase does not open the server's key".into())),
        }
    }
}

#[async_trait(?Send)]
impl Cipher for TestCipher {
    async fn seal(&self, aad: &[u8], plain: &[u8]) -> Result<Vec<u8>> {
        let iv = Aes256Gcm::generate_nonce(&mut OsRng);
        let sealed = self.0.encrypt(&iv, Payload { msg: plain, aad }).map_err(|e| Error::SyncFailed(e.to_string()))?;
        Ok([iv.as_slice(), &sealed].concat())
    }

    async fn open(&self, aad: &[u8], sealed: &[u8]) -> Result<Option<Vec<u8>>> {
        if sealed.len() < IV_BYTES {
            return Ok(None);
        }
        let (iv, body) = sealed.split_at(IV_BYTES);
        Ok(self.0.decrypt(Nonce::from_slice(iv), Payload { msg: body, aad }).ok())
    }
}

/// A server in RAM. `fail_after_write` makes the next write land and then fail, as a connection cut after the
/// server stored the upload; `fail_writes` makes writes fail before anything lands; `hide_once` answers the next
/// read of that path with nothing, as when another device writes it just after.
#[derive(Default)]
struct MemRemote {
    files: RefCell<BTreeMap<String, Vec<u8>>>,
    fail_after_write: Cell<bool>,
    fail_writes: Cell<bool>,
    hide_once: RefCell<Option<String>>,
}

#[async_trait(?Send)]
impl Remote for MemRemote {
    async fn list(&self, folder: &str) -> Result<Vec<String>> {
        let prefix = format!("{folder}/");
        let names: BTreeSet<String> = self
            .files
            .borrow()
            .keys()
            .filter_map(|path| path.strip_prefix(&prefix)?.split('/').next().map(str::to_string))
            .collect();
        Ok(names.into_iter().collect())
    }

    async fn get(&self, path: &str) -> Result<Option<Vec<u8>>> {
        if self.hide_once.borrow().as_deref() == Some(path) {
            self.hide_once.replace(None);
            return Ok(None);
        }
        Ok(self.files.borrow().get(path).cloned())
    }

    async fn create(&self, path: &str, bytes: &[u8]) -> Result<bool> {
        if self.fail_writes.get() {
            return Err(Error::SyncFailed("the server is down".into()));
        }
        let created = !self.files.borrow().contains_key(path);
        if created {
            self.files.borrow_mut().insert(path.to_string(), bytes.to_vec());
        }
        if self.fail_after_write.replace(false) {
            return Err(Error::SyncFailed("the connection was cut".into()));
        }
        Ok(created)
    }
}

fn turn(session: &str, text: &str, time: f64) -> Op {
    Op::Turn(TurnOp {
        session: session.into(),
        speaker: "user".into(),
        text: text.into(),
        caption: None,
        time,
        ingested: time,
    })
}

fn sync(device: &mut DeviceLog, remote: &MemRemote, cipher: &TestCipher) -> SyncReport {
    match block_on(device.sync(remote, cipher)) {
        Ok(report) => report,
        Err(e) => panic!("sync of {} failed: {e}", device.device),
    }
}

fn state(device: &DeviceLog) -> Merged {
    match device.state() {
        Ok(merged) => merged,
        Err(e) => panic!("state of {}: {e}", device.device),
    }
}

/// Each surviving turn's text, with how many times it is there.
fn text_counts(merged: &Merged) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for (_, t) in merged.turns() {
        *counts.entry(t.turn.text.clone()).or_insert(0) += 1;
    }
    counts
}

/// Asserts that `merged` holds exactly `expected` turn texts, each once: nothing lost, nothing duplicated.
fn assert_exactly(merged: &Merged, expected: &BTreeSet<String>) {
    let counts = text_counts(merged);
    let duplicated: Vec<_> = counts.iter().filter(|(_, &n)| n > 1).collect();
    let lost: Vec<_> = expected.iter().filter(|t| !counts.contains_key(*t)).collect();
    let extra: Vec<_> = counts.keys().filter(|t| !expected.contains(*t)).collect();
    assert!(duplicated.is_empty(), "duplicated turns: {duplicated:?}");
    assert!(lost.is_empty(), "lost turns: {lost:?}");
    assert!(extra.is_empty(), "turns that should be gone: {extra:?}");
}

#[test]
fn concurrent_writes_on_two_devices_converge_with_nothing_lost_or_duplicated() {
    let (remote, key) = (MemRemote::default(), TestCipher::new(7));
    let (mut a, mut b) = (DeviceLog::new("aaaa".into()), DeviceLog::new("bbbb".into()));
    let mut expected = BTreeSet::new();
    for round in 0..5 {
        for i in 0..4 {
            // Both write to the same session at once, and each to one of its own.
            for (device, name) in [(&mut a, "a"), (&mut b, "b")] {
                for session in ["shared", name] {
                    let text = format!("{name} {session} round {round} turn {i}");
                    device.record(turn(session, &text, (round * 10 + i) as f64));
                    expected.insert(text);
                }
            }
        }
        sync(&mut a, &remote, &key);
        sync(&mut b, &remote, &key);
    }
    sync(&mut a, &remote, &key);
    assert_eq!(state(&a), state(&b));
    assert_exactly(&state(&a), &expected);
    assert_eq!(state(&a).sessions.len(), 3);
    // Each device's own order holds within the shared session; the two interleave by time.
    let shared = &state(&a).sessions["shared"];
    let times: Vec<f64> = shared.turns.iter().map(|t| t.turn.time).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "turns out of time order: {times:?}");
    assert_eq!(shared.turns.len(), 40);
}

#[test]
fn a_device_offline_for_long_catches_up_and_both_converge() {
    let (remote, key) = (MemRemote::default(), TestCipher::new(7));
    let (mut a, mut b) = (DeviceLog::new("aaaa".into()), DeviceLog::new("bbbb".into()));
    let mut expected = BTreeSet::new();
    b.record(turn("before", "b before going offline", 0.0));
    expected.insert("b before going offline".to_string());
    sync(&mut b, &remote, &key);
    // A syncs 60 times while B writes 300 turns offline.
    for day in 0..60 {
        let text = format!("a day {day}");
        a.record(turn(&format!("a-{}", day / 10), &text, day as f64));
        expected.insert(text);
        sync(&mut a, &remote, &key);
        for i in 0..5 {
            let text = format!("b offline day {day} turn {i}");
            b.record(turn("offline", &text, day as f64 + i as f64 / 10.0));
            expected.insert(text);
        }
    }
    assert_eq!(b.unsent(), 300);
    let report = sync(&mut b, &remote, &key);
    assert_eq!((report.ops_sent, report.segments_received), (300, 60));
    sync(&mut a, &remote, &key);
    assert_eq!(state(&a), state(&b));
    assert_exactly(&state(&a), &expected);
    assert_eq!(b.unsent(), 0);
}

#[test]
fn forgets_win_over_turns_their_device_had_not_seen_the_forget() {
    let (remote, key) = (MemRemote::default(), TestCipher::new(7));
    let (mut a, mut b) = (DeviceLog::new("aaaa".into()), DeviceLog::new("bbbb".into()));
    a.record(turn("secret", "a secret, said on a", 1.0));
    let poisoned = a.record(turn("kept", "a poisoned turn", 2.0));
    a.record(turn("kept", "a turn that stays", 3.0));
    sync(&mut a, &remote, &key);
    sync(&mut b, &remote, &key);
    // Meanwhile, concurrently: B (offline) adds to the session A forgets, and distils from the turn A forgets.
    b.record(turn("secret", "more secret, said on b offline", 4.0));
    b.record(Op::Derived(DerivedOp {
        key: "episode:poisoned".into(),
        sources: vec![poisoned.clone()],
        body: serde_json::json!({ "title": "told from the poisoned turn" }),
    }));
    a.record(Op::ForgetSession { session: "secret".into() });
    a.record(Op::ForgetTurn { turn: poisoned });
    sync(&mut a, &remote, &key);
    sync(&mut b, &remote, &key);
    sync(&mut a, &remote, &key);
    assert_eq!(state(&a), state(&b));
    let merged = state(&b);
    assert!(!merged.sessions.contains_key("secret"), "the forgotten session came back: {merged:?}");
    assert!(merged.derived.is_empty(), "an episode of a forgotten turn survived");
    assert_exactly(&merged, &BTreeSet::from(["a turn that stays".to_string()]));
    // B writes to the session after it saw the forget: the session starts anew, with that turn only.
    b.record(turn("secret", "a new start", 5.0));
    sync(&mut b, &remote, &key);
    sync(&mut a, &remote, &key);
    assert_eq!(state(&a), state(&b));
    let texts: Vec<String> = state(&a).sessions["secret"].turns.iter().map(|t| t.turn.text.clone()).collect();
    assert_eq!(texts, ["a new start"]);
    // forgetAll on one device removes everything the other had written without seeing it.
    b.record(turn("late", "b, concurrent with forget all", 6.0));
    let sourceless = DerivedOp { key: "fact:sourceless".into(), sources: vec![], body: serde_json::json!({}) };
    b.record(Op::Derived(sourceless));
    a.record(Op::ForgetAll);
    a.record(turn("after", "a, after forget all", 7.0));
    sync(&mut a, &remote, &key);
    sync(&mut b, &remote, &key);
    sync(&mut a, &remote, &key);
    assert_eq!(state(&a), state(&b));
    assert_exactly(&state(&a), &BTreeSet::from(["a, after forget all".to_string()]));
    assert!(state(&a).derived.is_empty(), "a record made before forget all survived it");
}

#[test]
fn two_devices_distilling_the_same_window_keep_one_record_everywhere() {
    let (remote, key) = (MemRemote::default(), TestCipher::new(7));
    let (mut a, mut b) = (DeviceLog::new("aaaa".into()), DeviceLog::new("bbbb".into()));
    let t1 = a.record(turn("s", "we moved to Lyon", 1.0));
    let t2 = a.record(turn("s", "in March", 2.0));
    sync(&mut a, &remote, &key);
    sync(&mut b, &remote, &key);
    let episode = |title: &str| {
        Op::Derived(DerivedOp {
            key: "episode:window-1".into(),
            sources: vec![t1.clone(), t2.clone()],
            body: serde_json::json!({ "title": title }),
        })
    };
    a.record(episode("the move, as a told it"));
    b.record(episode("the move, as b told it"));
    sync(&mut a, &remote, &key);
    sync(&mut b, &remote, &key);
    sync(&mut a, &remote, &key);
    assert_eq!(state(&a), state(&b));
    assert_eq!(state(&a).derived.len(), 1);
    // A forgets the episode; B, having seen that, distils the window again: that record stands.
    a.record(Op::ForgetDerived { key: "episode:window-1".into() });
    sync(&mut a, &remote, &key);
    sync(&mut b, &remote, &key);
    assert!(state(&b).derived.is_empty());
    b.record(episode("told again"));
    sync(&mut b, &remote, &key);
    sync(&mut a, &remote, &key);
    assert_eq!(state(&a), state(&b));
    assert_eq!(state(&a).derived["episode:window-1"].record.body["title"], "told again");
}

/// A small seeded generator (xorshift): the scenario below is the same on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[test]
fn the_same_segments_in_any_order_or_twice_give_the_same_state() {
    let (remote, key) = (MemRemote::default(), TestCipher::new(7));
    let mut devices: Vec<DeviceLog> = ["d0", "d1", "d2"].iter().map(|d| DeviceLog::new(d.to_string())).collect();
    let mut rng = Rng(0x5eed);
    let mut recorded = 0;
    for step in 0..300 {
        let d = rng.below(3);
        let device = &mut devices[d];
        let session = format!("s{}", rng.below(8));
        match rng.below(40) {
            0 => {
                device.record(Op::ForgetSession { session });
            }
            1 => {
                let merged = state(device);
                let picked = merged.turns().nth(rng.below(merged.turn_count().max(1))).map(|(_, t)| t.id.clone());
                if let Some(turn) = picked {
                    device.record(Op::ForgetTurn { turn });
                }
            }
            2 => {
                device.record(Op::Title { session, title: format!("title {step}") });
            }
            3..=10 => {
                sync(device, &remote, &key);
            }
            _ => {
                device.record(turn(&session, &format!("step {step} on d{d}"), rng.below(50) as f64));
                recorded += 1;
            }
        }
    }
    for _ in 0..2 {
        for device in &mut devices {
            sync(device, &remote, &key);
        }
    }
    let reference = state(&devices[0]);
    // The scenario is worth its name: forgets took effect, and most turns stand.
    let kept = reference.turn_count();
    assert!(kept > recorded / 2 && kept < recorded, "{kept} of {recorded} turns kept");
    assert!(reference.sessions.values().any(|s| s.title.is_some()));
    for device in &devices[1..] {
        assert_eq!(state(device), reference);
    }
    // Every segment the server holds, opened, then merged shuffled, with some twice.
    let mut segments = Vec::new();
    for (path, bytes) in remote.files.borrow().iter() {
        let Some(rest) = path.strip_prefix("d/") else { continue };
        let (device, name) = rest.split_once('/').unwrap_or_default();
        let n = name.trim_end_matches(".seg").parse().unwrap_or(0);
        segments.push(block_on(open_segment(&key, device, n, bytes)).unwrap_or_else(|e| panic!("{path}: {e}")));
    }
    assert!(segments.len() > 20);
    for _ in 0..20 {
        let mut shuffled = segments.clone();
        for i in (1..shuffled.len()).rev() {
            shuffled.swap(i, rng.below(i + 1));
        }
        let twice = rng.below(shuffled.len());
        shuffled.push(shuffled[twice].clone());
        assert_eq!(merge(&shuffled).unwrap_or_else(|e| panic!("{e}")), reference);
    }
}

#[test]
fn a_sync_cut_after_the_upload_sends_the_same_segment_again_and_duplicates_nothing() {
    let (remote, key) = (MemRemote::default(), TestCipher::new(7));
    let (mut a, mut b) = (DeviceLog::new("aaaa".into()), DeviceLog::new("bbbb".into()));
    a.record(turn("s", "one", 1.0));
    a.record(turn("s", "two", 2.0));
    remote.fail_after_write.set(false);
    sync(&mut a, &remote, &key); // writes the key check
    a.record(turn("s", "three", 3.0));
    remote.fail_after_write.set(true);
    let err = block_on(a.sync(&remote, &key)).err();
    assert_eq!(err.map(|e| e.code()), Some("SYNC_FAILED"));
    assert_eq!(a.unsent(), 1, "the segment the server stored is not known to be there");
    // B merges the segment that landed; A, unaware, writes more and sends the same segment again.
    sync(&mut b, &remote, &key);
    a.record(turn("s", "four", 4.0));
    remote.fail_writes.set(true);
    assert!(block_on(a.sync(&remote, &key)).is_err());
    remote.fail_writes.set(false);
    sync(&mut a, &remote, &key);
    sync(&mut a, &remote, &key);
    sync(&mut b, &remote, &key);
    assert_eq!(state(&a), state(&b));
    let expected = ["one", "two", "three", "four"].map(String::from);
    assert_exactly(&state(&b), &BTreeSet::from(expected));
}

#[test]
fn two_different_segments_under_one_name_are_refused() {
    let segment = |text: &str| Segment {
        device: "aaaa".into(),
        n: 1,
        clock: 1,
        seen: VersionVector::default(),
        ops: vec![turn("s", text, 1.0)],
    };
    let err = merge(&[segment("one"), segment("another")]).err();
    assert_eq!(err.map(|e| e.code()), Some("SYNC_FAILED"));
    assert!(merge(&[segment("one"), segment("one")]).is_ok_and(|m| m.turn_count() == 1));
}

#[test]
fn the_server_never_holds_a_canary() {
    const CANARY: &str = "CANARY-7f3a91-zebra-teapot";
    let (remote, key) = (MemRemote::default(), TestCipher::new(7));
    let (mut a, mut b) = (DeviceLog::new("aaaa".into()), DeviceLog::new("bbbb".into()));
    for i in 0..20 {
        a.record(Op::Turn(TurnOp {
            session: format!("{CANARY} session"),
            speaker: format!("{CANARY} speaker"),
            text: format!("{CANARY} text {i}"),
            caption: Some(format!("{CANARY} caption")),
            time: i as f64,
            ingested: i as f64,
        }));
    }
    a.record(Op::Title { session: format!("{CANARY} session"), title: format!("{CANARY} title") });
    sync(&mut a, &remote, &key);
    sync(&mut b, &remote, &key);
    assert_eq!(state(&b).turn_count(), 20, "the canary conversation did not sync");
    let utf16: Vec<u8> = CANARY.encode_utf16().flat_map(u16::to_le_bytes).collect();
    let mut hits = 0;
    for (path, bytes) in remote.files.borrow().iter() {
        hits += path.matches(CANARY).count();
        for needle in [CANARY.as_bytes(), &utf16, b"CANARY"] {
            hits += bytes.windows(needle.len()).filter(|w| *w == needle).count();
        }
    }
    assert_eq!(hits, 0, "the canary is on the server");
}

#[test]
fn a_wrong_key_is_bad_key_before_anything_is_sent() {
    let remote = MemRemote::default();
    let mut a = DeviceLog::new("aaaa".into());
    a.record(turn("s", "sealed under the first key", 1.0));
    sync(&mut a, &remote, &TestCipher::new(7));
    let files_before = remote.files.borrow().len();
    let mut b = DeviceLog::new("bbbb".into());
    b.record(turn("s", "would be sealed under another key", 2.0));
    let err = block_on(b.sync(&remote, &TestCipher::new(8))).err();
    assert!(matches!(err, Some(Error::BadKey(_))), "{err:?}");
    assert_eq!(err.map(|e| e.code()), Some("BAD_KEY"));
    assert_eq!(remote.files.borrow().len(), files_before, "a device with a wrong key wrote to the server");
    assert_eq!(b.unsent(), 1);
    assert_eq!(state(&b).turn_count(), 1, "a wrong key merged something");
}

#[test]
fn a_damaged_or_moved_segment_is_sync_failed_and_merges_nothing() {
    let (remote, key) = (MemRemote::default(), TestCipher::new(7));
    let (mut a, mut b) = (DeviceLog::new("aaaa".into()), DeviceLog::new("bbbb".into()));
    a.record(turn("s", "first", 1.0));
    sync(&mut a, &remote, &key);
    a.record(turn("s", "second", 2.0));
    sync(&mut a, &remote, &key);
    let first = remote.files.borrow()["d/aaaa/1.seg"].clone();
    // Segment 1 put in the place of segment 2: it opens only under its own name.
    remote.files.borrow_mut().insert("d/aaaa/2.seg".into(), first.clone());
    let err = block_on(b.sync(&remote, &key)).err();
    assert_eq!(err.map(|e| e.code()), Some("SYNC_FAILED"));
    assert_eq!(state(&b).turn_count(), 0, "part of a failed sync was merged");
    // One flipped byte.
    let mut flipped = first;
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    remote.files.borrow_mut().insert("d/aaaa/1.seg".into(), flipped);
    let err = block_on(b.sync(&remote, &key)).err();
    assert_eq!(err.map(|e| e.code()), Some("SYNC_FAILED"));
    assert_eq!(state(&b).turn_count(), 0);
}

#[test]
fn padding_rounds_sizes_up_by_at_most_twelve_percent() {
    assert_eq!(padme(100), 104); // the paper's example
    assert_eq!(padme(1), 1);
    for len in 2..200_000usize {
        let padded = padme(len);
        assert!(padded >= len && padded as f64 <= len as f64 * 1.12 + 1.0, "{len} → {padded}");
    }
    // Segments whose contents differ by a few characters are the same size on the server.
    let key = TestCipher::new(7);
    let size = |text: &str| {
        let segment = Segment {
            device: "aaaa".into(),
            n: 1,
            clock: 1,
            seen: VersionVector::default(),
            ops: vec![turn("s", text, 1.0)],
        };
        block_on(seal_segment(&key, &segment)).map(|s| s.len()).unwrap_or(0)
    };
    assert_eq!(size(&"x".repeat(1000)), size(&"x".repeat(1003)));
}

#[test]
fn the_first_device_draws_the_key_and_the_others_unlock_it_with_the_passphrase() {
    let remote = MemRemote::default();
    let connect_with = |passphrase: u8| block_on(connect(&remote, &TestUnlock(passphrase)));
    let (Ok(phone_key), Ok(laptop_key)) = (connect_with(1), connect_with(1)) else { panic!("the passphrase failed") };
    let (mut a, mut b) = (DeviceLog::new("aaaa".into()), DeviceLog::new("bbbb".into()));
    a.record(turn("s", "sealed under the drawn key", 1.0));
    sync(&mut a, &remote, &phone_key);
    sync(&mut b, &remote, &laptop_key);
    assert_eq!(state(&b).turn_count(), 1);
    assert_eq!(connect_with(2).err().map(|e| e.code()), Some("BAD_KEY"));
    // Two first devices at once: the one that reads no record just before the other writes its own keeps that one.
    remote.hide_once.replace(Some("key".into()));
    let Ok(racing_key) = connect_with(1) else { panic!("the racing device did not take the key that stood") };
    let mut c = DeviceLog::new("cccc".into());
    sync(&mut c, &remote, &racing_key);
    assert_eq!(state(&c), state(&a));
}

#[test]
fn turns_written_while_a_sync_is_in_flight_keep_what_their_device_knew() {
    let (remote, key) = (MemRemote::default(), TestCipher::new(7));
    let (mut a, mut b) = (DeviceLog::new("aaaa".into()), DeviceLog::new("bbbb".into()));
    b.record(turn("s", "before the forget", 1.0));
    sync(&mut b, &remote, &key);
    sync(&mut a, &remote, &key);
    a.record(Op::ForgetSession { session: "s".into() });
    sync(&mut a, &remote, &key);
    // B syncs step by step, with the memory free meanwhile: one turn is written before the fetch, one while
    // it is in flight, one after the merge.
    b.record(turn("s", "written before the fetch", 2.0));
    let outgoing = b.outgoing();
    let last = block_on(send_segments(&remote, &key, &outgoing)).unwrap_or_else(|e| panic!("{e}"));
    if let Some(n) = last {
        b.sent(n);
    }
    let merged = b.merged_up_to().clone();
    let fetched = block_on(fetch_segments(&remote, &key, &merged, &b.device)).unwrap_or_else(|e| panic!("{e}"));
    b.record(turn("s", "written while the fetch was in flight", 3.0));
    assert_eq!(b.merge_fetched(fetched).ok(), Some(1));
    b.record(turn("s", "written after the merge", 4.0));
    sync(&mut b, &remote, &key);
    sync(&mut a, &remote, &key);
    assert_eq!(state(&a), state(&b));
    // Only the turn written once B knew of the forget stands.
    assert_exactly(&state(&a), &BTreeSet::from(["written after the merge".to_string()]));
}

/// What a memory holding exactly `merged` holds.
fn held_of(merged: &Merged) -> Held {
    Held {
        sessions: merged
            .sessions
            .iter()
            .map(|(id, s)| (id.clone(), s.turns.iter().map(|t| t.id.clone()).collect()))
            .collect(),
        derived: merged.derived.iter().map(|(key, d)| (key.clone(), d.id.clone())).collect(),
    }
}

/// `plan` carried out on `held`, as a memory would.
fn carry_out(mut held: Held, plan: &Plan) -> Held {
    let forgotten: BTreeSet<&OpId> = plan.forget.iter().collect();
    for ids in held.sessions.values_mut() {
        ids.retain(|id| !forgotten.contains(id));
    }
    for (session, change) in &plan.sessions {
        let ids = held.sessions.entry(session.clone()).or_default();
        assert!(change.from <= ids.len(), "a change from past the end of {session}");
        ids.truncate(change.from);
        ids.extend(change.tail.iter().map(|t| t.id.clone()));
    }
    held.sessions.retain(|_, ids| !ids.is_empty());
    for record in &plan.put_derived {
        held.derived.insert(record.record.key.clone(), record.id.clone());
    }
    for key in &plan.delete_derived {
        held.derived.remove(key);
    }
    held
}

#[test]
fn a_plan_appends_what_comes_after_and_rewrites_a_session_only_from_where_its_order_changes() {
    let (remote, key) = (MemRemote::default(), TestCipher::new(7));
    let (mut a, mut b) = (DeviceLog::new("aaaa".into()), DeviceLog::new("bbbb".into()));
    a.record(turn("s", "a at 1", 1.0));
    let gone = a.record(turn("s", "a at 2", 2.0));
    a.record(turn("s", "a at 5", 5.0));
    sync(&mut a, &remote, &key);
    let before = held_of(&state(&a));
    // B, after A: appended at the end of A's session.
    sync(&mut b, &remote, &key);
    b.record(turn("s", "b at 9", 9.0));
    sync(&mut b, &remote, &key);
    sync(&mut a, &remote, &key);
    let appended = plan(&before, &state(&a));
    assert_eq!(appended.sessions["s"].from, 3);
    assert_eq!(appended.sessions["s"].tail.len(), 1);
    assert!(appended.forget.is_empty());
    // A turn said at 3 (B's clock) lands inside; and a turn forgotten before it costs no rewrite of its own.
    let before = held_of(&state(&a));
    b.record(turn("s", "b at 3", 3.0));
    b.record(Op::ForgetTurn { turn: gone.clone() });
    sync(&mut b, &remote, &key);
    sync(&mut a, &remote, &key);
    let inserted = plan(&before, &state(&a));
    assert_eq!(inserted.forget, [gone]);
    let tail: Vec<&str> = inserted.sessions["s"].tail.iter().map(|t| t.turn.text.as_str()).collect();
    assert_eq!((inserted.sessions["s"].from, tail), (1, vec!["b at 3", "a at 5", "b at 9"]));
    assert!(plan(&held_of(&state(&a)), &state(&a)).is_empty());
}

#[test]
fn a_plan_carried_out_turns_what_a_memory_held_into_the_merge() {
    let (remote, key) = (MemRemote::default(), TestCipher::new(7));
    let mut devices: Vec<DeviceLog> = ["d0", "d1", "d2"].iter().map(|d| DeviceLog::new(d.to_string())).collect();
    let mut rng = Rng(0xa991);
    let mut plans = 0;
    for step in 0..400 {
        let d = rng.below(3);
        let device = &mut devices[d];
        let session = format!("s{}", rng.below(5));
        match rng.below(30) {
            0 => {
                device.record(Op::ForgetSession { session });
            }
            1 | 2 => {
                let merged = state(device);
                let picked = merged.turns().nth(rng.below(merged.turn_count().max(1))).map(|(_, t)| t.id.clone());
                if let Some(turn) = picked {
                    device.record(Op::ForgetTurn { turn });
                }
            }
            3 => {
                let sources: Vec<OpId> = state(device).turns().take(2).map(|(_, t)| t.id.clone()).collect();
                let key = format!("episode:{sources:?}");
                device.record(Op::Derived(DerivedOp { key, sources, body: serde_json::json!({ "step": step }) }));
            }
            4..=10 => {
                let before = held_of(&state(device));
                sync(device, &remote, &key);
                let after = state(device);
                let plan = plan(&before, &after);
                plans += usize::from(!plan.is_empty());
                assert_eq!(carry_out(before, &plan), held_of(&after), "step {step}");
            }
            _ => {
                device.record(turn(&session, &format!("step {step} on d{d}"), rng.below(60) as f64));
            }
        }
    }
    assert!(plans > 20, "only {plans} syncs changed anything");
}

/// Per session, its turns' texts in order, and its title: what a memory shows, whichever device wrote what.
fn contents(merged: &Merged) -> BTreeMap<String, (Option<String>, Vec<String>)> {
    let texts = |s: &MergedSession| s.turns.iter().map(|t| t.turn.text.clone()).collect();
    merged.sessions.iter().map(|(id, s)| (id.clone(), (s.title.clone(), texts(s)))).collect()
}

#[test]
fn two_devices_end_as_one_memory_given_every_operation_in_an_order_each_device_saw() {
    let (remote, key) = (MemRemote::default(), TestCipher::new(7));
    let (mut a, mut b) = (DeviceLog::new("aaaa".into()), DeviceLog::new("bbbb".into()));
    // One device given the same operations in an order consistent with what each device saw: B's offline work
    // before A's forget, which B had not seen.
    let mut solo = DeviceLog::new("solo".into());
    let both = |device: &mut DeviceLog, solo: &mut DeviceLog, op: Op| {
        device.record(op.clone());
        solo.record(op);
    };
    both(&mut a, &mut solo, turn("trip", "a: we fly to Oslo on the 3rd", 1.0));
    both(&mut a, &mut solo, turn("work", "a: the review is on Monday", 2.0));
    sync(&mut a, &remote, &key);
    sync(&mut b, &remote, &key);
    // B goes offline for a while.
    both(&mut b, &mut solo, turn("trip", "b: the hotel is by the harbour", 3.0));
    both(&mut b, &mut solo, turn("work", "b: bring the slides", 4.0));
    both(&mut b, &mut solo, Op::Title { session: "trip".into(), title: "Oslo".into() });
    // A, meanwhile, forgets the work session and writes on.
    both(&mut a, &mut solo, Op::ForgetSession { session: "work".into() });
    both(&mut a, &mut solo, turn("trip", "a: the flight is at 7", 5.0));
    sync(&mut a, &remote, &key);
    sync(&mut b, &remote, &key);
    sync(&mut a, &remote, &key);
    assert_eq!(state(&a), state(&b));
    assert_eq!(contents(&state(&a)), contents(&state(&solo)));
    let trip = &contents(&state(&a))["trip"];
    assert_eq!(trip.0.as_deref(), Some("Oslo"));
    assert_eq!(trip.1.len(), 3);
    assert!(!state(&a).sessions.contains_key("work"));
}

#[test]
fn a_long_offline_run_goes_as_bounded_segments_and_each_turn_keeps_the_id_it_was_given() {
    let (remote, key) = (MemRemote::default(), TestCipher::new(7));
    let (mut a, mut b) = (DeviceLog::new("aaaa".into()), DeviceLog::new("bbbb".into()));
    let mut given = BTreeMap::new();
    for i in 0..2500 {
        let text = format!("offline turn {i}");
        given.insert(a.record(turn("s", &text, i as f64)), text);
    }
    // One turn alone over the byte bound, then more small ones.
    let long = "x".repeat(SEGMENT_BYTES + 10);
    given.insert(a.record(turn("s", &long, 2500.0)), long);
    given.insert(a.record(turn("s", "after the long one", 2501.0)), "after the long one".into());
    let report = sync(&mut a, &remote, &key);
    assert_eq!(report.ops_sent, 2502);
    sync(&mut b, &remote, &key);
    let segments = remote.files.borrow().keys().filter(|p| p.starts_with("d/aaaa/")).count();
    assert_eq!(segments, 5, "1000 + 1000 + 500 turns, the long one, the last");
    let merged: BTreeMap<OpId, String> = state(&b).turns().map(|(_, t)| (t.id.clone(), t.turn.text.clone())).collect();
    assert_eq!(merged, given);
}
