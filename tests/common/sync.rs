//! Sync's native test kit: AES-256-GCM as the sync key (in the browser, WebCrypto: tests/browser_sync.rs) and a
//! real WebDAV server, Debian's `rclone serve webdav` (installed by `npm run setup`).

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use async_trait::async_trait;
use loci::sync::Cipher;
use loci::{Error, Result};

const IV_BYTES: usize = 12;

/// AES-256-GCM natively (in the browser, WebCrypto: tests/browser_sync.rs).
pub struct TestCipher(Aes256Gcm);

impl TestCipher {
    pub fn new(key: u8) -> Self {
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

/// `rclone serve webdav` (Debian's rclone 1.60) over a fresh folder, stopped and removed when dropped.
pub struct RcloneWebDav {
    server: std::process::Child,
    dir: std::path::PathBuf,
    pub url: String,
}

impl RcloneWebDav {
    pub fn start() -> Self {
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
    pub fn stored(&self) -> Vec<(String, Vec<u8>)> {
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
