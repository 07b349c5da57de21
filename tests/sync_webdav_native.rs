//! Two devices sync through a real WebDAV server, Debian's `rclone serve webdav` (1.60, installed by
//! `npm run setup`) over a fresh folder: the protocol of `loci::sync::webdav` as the browser runs it, over `ureq`.
//! The server stores only sealed bytes: no canary in any file or name.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::collections::BTreeSet;

use common::sync::{RcloneWebDav, TestCipher};
use loci::sync::{webdav, DeviceLog, Merged, Op, Remote, SyncReport, TurnOp};
use pollster::block_on;

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

fn state(device: &DeviceLog) -> Merged {
    device.state().unwrap_or_else(|e| panic!("state of {}: {e}", device.device))
}

fn sync_over(device: &mut DeviceLog, remote: &dyn Remote, cipher: &TestCipher) -> SyncReport {
    block_on(device.sync(remote, cipher)).unwrap_or_else(|e| panic!("sync of {} failed: {e}", device.device))
}

#[test]
fn two_devices_sync_through_a_real_webdav_server_that_sees_only_sealed_bytes() {
    const CANARY: &str = "CANARY-webdav-41c7-walrus";
    let server = RcloneWebDav::start();
    let folder = format!("{}/loci-sync", server.url);
    let server_for = || webdav::WebDav::new(&folder, None, webdav::Ureq::default());
    let (phone, laptop) = (server_for(), server_for());
    let key = TestCipher::new(7);
    let (mut a, mut b) = (DeviceLog::new("aaaa".into()), DeviceLog::new("bbbb".into()));
    let mut expected = BTreeSet::new();
    for round in 0..3 {
        for (device, name) in [(&mut a, "phone"), (&mut b, "laptop")] {
            for i in 0..5 {
                let text = format!("{CANARY} {name} round {round} turn {i}");
                device.record(turn("shared", &text, (round * 10 + i) as f64));
                expected.insert(text);
            }
        }
        sync_over(&mut a, &phone, &key);
        sync_over(&mut b, &laptop, &key);
    }
    let forgotten = b.record(turn("private", &format!("{CANARY} to forget"), 99.0));
    b.record(Op::ForgetTurn { turn: forgotten });
    sync_over(&mut b, &laptop, &key);
    sync_over(&mut a, &phone, &key);
    assert_eq!(state(&a), state(&b));
    // Nothing lost, nothing duplicated, the forgotten turn gone.
    let texts: Vec<String> = state(&a).turns().map(|(_, t)| t.turn.text.clone()).collect();
    assert_eq!(texts.len(), expected.len(), "{texts:?}");
    assert_eq!(texts.into_iter().collect::<BTreeSet<_>>(), expected);
    // What the server holds: the key check and 7 segments, none with the canary.
    let stored = server.stored();
    let segments = stored.iter().filter(|(path, _)| path.ends_with(".seg")).count();
    assert_eq!(segments, 7, "{:?}", stored.iter().map(|(p, _)| p).collect::<Vec<_>>());
    let hits: usize = stored
        .iter()
        .map(|(path, bytes)| path.matches("CANARY").count() + bytes.windows(6).filter(|w| *w == b"CANARY").count())
        .sum();
    assert_eq!(hits, 0, "the canary is on the server");
    // A third device with another key is refused, and writes nothing.
    let mut c = DeviceLog::new("cccc".into());
    c.record(turn("s", "sealed under another key", 1.0));
    let err = block_on(c.sync(&phone, &TestCipher::new(8))).err();
    assert_eq!(err.map(|e| e.code()), Some("BAD_KEY"));
    assert_eq!(server.stored().len(), stored.len());
}
