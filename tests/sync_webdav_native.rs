//! Two devices sync through a real WebDAV server, Debian's `rclone serve webdav` (1.60, installed by
//! `npm run setup`) over a fresh folder: the protocol of `loci::sync::webdav` as the browser runs it, over `ureq`.
//! The server stores only sealed bytes: no canary in any file or name.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeSet;

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use async_trait::async_trait;
use loci::sync::{webdav, Cipher, DeviceLog, Merged, Op, Remote, SyncReport, TurnOp};
use loci::{Error, Result};
use pollster::block_on;

const IV_BYTES: usize = 12;

/// AES-256-GCM natively (in the browser, WebCrypto: tests/browser_sync.rs).
struct TestCipher(Aes256Gcm);

impl TestCipher {
    fn new(key: u8) -> Self {
        TestCipher(Aes256Gcm::new(&[key; 32].into()))
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

/// `rclone serve webdav` (Debian's rclone 1.60) over a fresh folder, stopped and removed when dropped.
struct RcloneWebDav {
    server: std::process::Child,
    dir: std::path::PathBuf,
    url: String,
}

impl RcloneWebDav {
    fn start() -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("loci-sync-webdav-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        // A free port: bound, read, let go (rclone 1.60 does not say which port it took for :0).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("no free port: {e}"));
        let address = format!("127.0.0.1:{port}");
        let server = std::process::Command::new("rclone")
            .args(["serve", "webdav", "--addr", &address])
            .arg(&dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("rclone did not start ({e}): npm run setup installs it (apt install rclone)"));
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect(&address).is_err() {
            assert!(started.elapsed().as_secs() < 20, "rclone serve webdav did not listen on {address}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        RcloneWebDav { server, dir, url: format!("http://{address}") }
    }

    /// Every file the server stored, by path, as bytes.
    fn stored(&self) -> Vec<(String, Vec<u8>)> {
        fn walk(dir: &std::path::Path, out: &mut Vec<(String, Vec<u8>)>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                match path.is_dir() {
                    true => walk(&path, out),
                    false => out.push((path.display().to_string(), std::fs::read(&path).unwrap_or_default())),
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.dir, &mut out);
        out
    }
}

impl Drop for RcloneWebDav {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
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
