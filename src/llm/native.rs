//! Native HTTP transport for the OpenAI-compatible client (used by `loci-eval` and the native tests): blocking
//! `ureq` inside the async trait. It blocks the calling thread, which is what a CLI driven by `pollster` wants;
//! never use it on an executor shared with other work. The abort signal is checked before sending only: a blocking
//! request cannot be interrupted, its timeout bounds it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::openai::{HttpResponse, HttpTransport, TransportError};
use super::AbortSignal;
use crate::error::{Error, Result};

/// `ureq` behind [`HttpTransport`].
#[derive(Debug, Clone)]
pub struct UreqTransport {
    agent: ureq::Agent,
    epoch: Instant,
}

impl Default for UreqTransport {
    fn default() -> Self {
        let agent: ureq::Agent =
            ureq::Agent::config_builder().http_status_as_error(false).max_redirects(0).build().into();
        UreqTransport { agent, epoch: Instant::now() }
    }
}

impl UreqTransport {
    pub fn new() -> Self {
        Self::default()
    }
}

/// Reads a body to its end, handing each piece of text to `on_chunk` as it arrives (a UTF-8 sequence split between
/// two reads waits for its end); stops when `abort` fires.
fn read_in_pieces(
    mut reader: impl std::io::Read,
    abort: Option<&AbortSignal>,
    on_chunk: &dyn Fn(&str),
) -> Result<String, TransportError> {
    let mut body = String::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if is_timeout(&e) => return Err(TransportError::Timeout),
            Err(e) => return Err(TransportError::Network(e.to_string())),
        };
        pending.extend_from_slice(&buf[..n]);
        let valid = match std::str::from_utf8(&pending) {
            Ok(s) => s.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(), // a sequence cut at the end: the rest comes next
            Err(_) => return Err(TransportError::Network("the response is not UTF-8".into())),
        };
        let piece = std::str::from_utf8(&pending[..valid]).unwrap_or_default().to_string();
        pending.drain(..valid);
        if !piece.is_empty() {
            on_chunk(&piece);
            body.push_str(&piece);
        }
        if abort.is_some_and(AbortSignal::is_aborted) {
            return Err(TransportError::Aborted);
        }
    }
    if !pending.is_empty() {
        return Err(TransportError::Network("the response ends inside a UTF-8 sequence".into()));
    }
    Ok(body)
}

#[async_trait(?Send)]
impl HttpTransport for UreqTransport {
    /// One request; a 2xx body is handed to `on_chunk` as it arrives when given. The call blocks, so `abort` is
    /// heard before it and between the pieces of a stream (a listener that stops the answer it hears).
    async fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &str,
        timeout_ms: u64,
        abort: Option<&AbortSignal>,
        on_chunk: Option<&(dyn for<'s> Fn(&'s str) + '_)>,
    ) -> Result<HttpResponse, TransportError> {
        if abort.is_some_and(AbortSignal::is_aborted) {
            return Err(TransportError::Aborted);
        }
        let mut req = self.agent.post(url);
        for (k, v) in headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let limit = Some(Duration::from_millis(timeout_ms));
        // A streamed reply: the limit bounds each wait for the server (to connect, to start, to go on), not a long
        // answer that keeps coming; as `fetch` does in the page.
        let req = match on_chunk {
            Some(_) => req.config().timeout_connect(limit).timeout_per_write(limit).timeout_per_read(limit).build(),
            None => req.config().timeout_global(limit).build(),
        };
        let mut resp = req.send(body).map_err(map_error)?;
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_ascii_lowercase(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        let body = match on_chunk.filter(|_| (200..300).contains(&status)) {
            Some(on_chunk) => read_in_pieces(resp.body_mut().as_reader(), abort, on_chunk)?,
            None => resp.body_mut().read_to_string().map_err(map_error)?,
        };
        Ok(HttpResponse { status, headers, body })
    }

    async fn sleep(&self, ms: u64) {
        std::thread::sleep(Duration::from_millis(ms));
    }

    fn now_ms(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64() * 1000.0
    }
}

/// A read that timed out: the socket's own, or ureq's limits (an `io::Error` wrapping `ureq::Error::Timeout`).
fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock)
        || e.get_ref()
            .and_then(|inner| inner.downcast_ref::<ureq::Error>())
            .is_some_and(|u| matches!(u, ureq::Error::Timeout(_)))
}

fn map_error(e: ureq::Error) -> TransportError {
    match e {
        ureq::Error::Timeout(_) => TransportError::Timeout,
        ureq::Error::Io(io) if matches!(io.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock) => {
            TransportError::Timeout
        }
        other => TransportError::Network(other.to_string()),
    }
}

/// A transport that replays the endpoint's earlier answers from a file, for runs that must survive a stop: a real
/// model on a small machine takes hours to distil a conversation (`loci-eval bridge --llm-cache FILE`).
///
/// Each `200` answer is appended to the file as it arrives (JSON lines: URL, request body, response body, and the
/// milliseconds the call took, since a replayed answer takes none), and a request whose URL and body are
/// byte-identical to a stored one gets the stored answer without a call. A pipeline that is deterministic given its
/// answers therefore replays up to where the last run stopped and goes on from there. Headers are not part of the
/// key, so an API key is never written to the file. Errors and non-`200` answers are not stored: a rerun retries them.
pub struct ReplayTransport<T: HttpTransport> {
    inner: T,
    cache: Option<RefCell<ReplayFile>>,
}

struct ReplayFile {
    path: PathBuf,
    answers: HashMap<(String, String), String>,
    replayed: usize,
    called: usize,
}

impl<T: HttpTransport> ReplayTransport<T> {
    /// `inner` unchanged: nothing read or written.
    pub fn passthrough(inner: T) -> Self {
        ReplayTransport { inner, cache: None }
    }

    /// Replays the answers stored in `path` (created at the first answer if missing). A last line cut by a killed
    /// run is dropped from the file, so that the next answer starts a line of its own; any other malformed line is
    /// an error, since appending after it would mix two runs' files.
    pub fn open(inner: T, path: &Path) -> Result<Self> {
        let storage = |e: std::io::Error| Error::Storage(format!("{}: {e}", path.display()));
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(storage(e)),
        };
        let mut answers = HashMap::new();
        let lines = text.split_inclusive('\n').count();
        let mut good_bytes = 0;
        for (n, line) in text.split_inclusive('\n').enumerate() {
            let record = serde_json::from_str::<serde_json::Value>(line).ok().and_then(|v| {
                let field = |k: &str| v.get(k).and_then(serde_json::Value::as_str).map(String::from);
                Some(((field("url")?, field("request")?), field("response")?))
            });
            match record {
                Some((key, answer)) => {
                    answers.insert(key, answer);
                    good_bytes += line.len();
                    if !line.ends_with('\n') {
                        // Killed between the answer and its newline: end the line, or the next answer would join it.
                        std::fs::OpenOptions::new()
                            .append(true)
                            .open(path)
                            .and_then(|mut f| f.write_all(b"\n"))
                            .map_err(storage)?;
                    }
                }
                None if n + 1 == lines && !line.ends_with('\n') => {
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open(path)
                        .and_then(|f| f.set_len(good_bytes as u64))
                        .map_err(storage)?;
                }
                None => {
                    return Err(Error::Storage(format!(
                        "{}: line {} is not a stored answer (url, request, response)",
                        path.display(),
                        n + 1
                    )))
                }
            }
        }
        let file = ReplayFile { path: path.to_path_buf(), answers, replayed: 0, called: 0 };
        Ok(ReplayTransport { inner, cache: Some(RefCell::new(file)) })
    }

    /// Answers held (read from the file and stored since).
    pub fn answers(&self) -> usize {
        self.cache.as_ref().map_or(0, |c| c.borrow().answers.len())
    }

    /// (answers replayed, calls made) since this transport was opened.
    pub fn counts(&self) -> (usize, usize) {
        self.cache.as_ref().map_or((0, 0), |c| (c.borrow().replayed, c.borrow().called))
    }

    /// The file the answers are kept in; `None` for [`ReplayTransport::passthrough`].
    pub fn path(&self) -> Option<PathBuf> {
        self.cache.as_ref().map(|c| c.borrow().path.clone())
    }
}

#[async_trait(?Send)]
impl<T: HttpTransport> HttpTransport for ReplayTransport<T> {
    /// The stored answer when there is one (a streamed one handed over in one piece, as it was stored whole), else
    /// the endpoint's, streamed through when `on_chunk` listens, and stored when it is a `200`.
    async fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &str,
        timeout_ms: u64,
        abort: Option<&AbortSignal>,
        on_chunk: Option<&(dyn for<'s> Fn(&'s str) + '_)>,
    ) -> std::result::Result<HttpResponse, TransportError> {
        let call = || self.inner.post(url, headers, body, timeout_ms, abort, on_chunk);
        let Some(cache) = &self.cache else { return call().await };
        let key = (url.to_string(), body.to_string());
        let stored = cache.borrow().answers.get(&key).cloned();
        if let Some(answer) = stored {
            cache.borrow_mut().replayed += 1;
            if let Some(on_chunk) = on_chunk {
                on_chunk(&answer);
            }
            let headers = vec![("content-type".to_string(), "application/json".to_string())];
            return Ok(HttpResponse { status: 200, headers, body: answer });
        }
        cache.borrow_mut().called += 1;
        let started = self.inner.now_ms();
        let response = call().await?;
        if response.status == 200 {
            let mut c = cache.borrow_mut();
            let ms = self.inner.now_ms() - started;
            let line = serde_json::json!({ "url": url, "request": body, "response": response.body, "ms": ms });
            let written = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&c.path)
                .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()).and_then(|_| f.sync_data()));
            if let Err(e) = written {
                // The answer is still good for this run; only a later resume loses it.
                eprintln!("LLM replay cache {}: answer not stored ({e})", c.path.display());
            }
            c.answers.insert(key, response.body.clone());
        }
        Ok(response)
    }

    async fn sleep(&self, ms: u64) {
        self.inner.sleep(ms).await
    }

    fn now_ms(&self) -> f64 {
        self.inner.now_ms()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// Answers every request with its call number; fails with 503 when told to.
    struct Counting {
        calls: Cell<u32>,
        status: u16,
    }

    #[async_trait(?Send)]
    impl HttpTransport for Counting {
        async fn post(
            &self,
            _url: &str,
            _headers: &[(String, String)],
            body: &str,
            _timeout_ms: u64,
            _abort: Option<&AbortSignal>,
            on_chunk: Option<&(dyn for<'s> Fn(&'s str) + '_)>,
        ) -> std::result::Result<HttpResponse, TransportError> {
            self.calls.set(self.calls.get() + 1);
            let reply = format!("{body} #{}", self.calls.get());
            if let Some(on_chunk) = on_chunk {
                // Streamed in two pieces: the words, then the call number.
                let (words, number) = reply.split_at(reply.find(" #").unwrap_or(0));
                on_chunk(words);
                on_chunk(number);
            }
            Ok(HttpResponse { status: self.status, headers: vec![], body: reply })
        }
        async fn sleep(&self, _ms: u64) {}
        fn now_ms(&self) -> f64 {
            0.0
        }
    }

    fn counting(status: u16) -> Counting {
        Counting { calls: Cell::new(0), status }
    }

    fn post(t: &impl HttpTransport, body: &str) -> HttpResponse {
        let auth = [("Authorization".to_string(), "Bearer sk-secret".to_string())];
        pollster::block_on(t.post("http://127.0.0.1:1/v1/chat/completions", &auth, body, 1000, None, None)).unwrap()
    }

    /// The pieces a streamed post hears, and its response body.
    fn post_streaming(t: &impl HttpTransport, body: &str) -> (Vec<String>, String) {
        let heard = RefCell::new(Vec::new());
        let on_chunk = |piece: &str| heard.borrow_mut().push(piece.to_string());
        let resp = pollster::block_on(t.post("http://127.0.0.1:1/v1", &[], body, 1000, None, Some(&on_chunk)));
        (heard.into_inner(), resp.unwrap().body)
    }

    #[test]
    fn a_stream_goes_through_and_a_replayed_one_is_heard_whole() {
        let passthrough = ReplayTransport::passthrough(counting(200));
        assert_eq!(post_streaming(&passthrough, "a"), (vec!["a".into(), " #1".into()], "a #1".into()));
        let path = temp_path("stream");
        let cached = ReplayTransport::open(counting(200), &path).unwrap();
        assert_eq!(post_streaming(&cached, "b"), (vec!["b".into(), " #1".into()], "b #1".into()), "the call streams");
        assert_eq!(post_streaming(&cached, "b"), (vec!["b #1".into()], "b #1".into()), "the replay, in one piece");
        assert_eq!(cached.counts(), (1, 1));
        let _ = std::fs::remove_file(&path);
    }

    fn temp_path(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("loci-replay-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        dir
    }

    #[test]
    fn a_reopened_file_replays_the_answers_and_calls_only_for_new_requests() {
        let path = temp_path("replay");
        let first = ReplayTransport::open(counting(200), &path).unwrap();
        assert_eq!(post(&first, "a").body, "a #1");
        assert_eq!(post(&first, "b").body, "b #2");
        assert_eq!(post(&first, "a").body, "a #1", "replayed within the run too");
        assert_eq!(first.counts(), (1, 2));
        drop(first);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(!text.contains("sk-secret"), "headers (the API key) are never stored");

        let second = ReplayTransport::open(counting(200), &path).unwrap();
        assert_eq!(second.answers(), 2);
        assert_eq!(post(&second, "b").body, "b #2");
        assert_eq!(post(&second, "c").body, "c #1", "a new request reaches the endpoint");
        assert_eq!(second.counts(), (1, 1));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn failures_are_not_stored_and_a_cut_last_line_is_dropped() {
        let path = temp_path("cut");
        let failing = ReplayTransport::open(counting(503), &path).unwrap();
        assert_eq!(post(&failing, "a").status, 503);
        drop(failing);
        assert!(!path.exists(), "a 503 is retried by the next run, not replayed");

        drop({
            let t = ReplayTransport::open(counting(200), &path).unwrap();
            post(&t, "a");
            post(&t, "b");
            t
        });
        // A run killed in the middle of writing its third answer.
        let whole = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{whole}{{\"url\":\"http://127.0.0.1:1/v1/chat/com")).unwrap();
        let resumed = ReplayTransport::open(counting(200), &path).unwrap();
        assert_eq!(resumed.answers(), 2);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), whole, "the cut line is gone");
        post(&resumed, "c");
        drop(resumed);
        assert_eq!(
            ReplayTransport::open(counting(200), &path).unwrap().answers(),
            3,
            "the next answer has its own line"
        );

        // Killed between an answer and its newline: the line is ended, and the next answer has its own.
        let three = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, three.trim_end()).unwrap();
        let resumed = ReplayTransport::open(counting(200), &path).unwrap();
        assert_eq!((resumed.answers(), std::fs::read_to_string(&path).unwrap()), (3, three));
        post(&resumed, "d");
        drop(resumed);
        assert_eq!(ReplayTransport::open(counting(200), &path).unwrap().answers(), 4);

        // A malformed line before the last is not a cut: refuse rather than append to a foreign file.
        std::fs::write(&path, format!("not json\n{whole}")).unwrap();
        assert!(matches!(ReplayTransport::open(counting(200), &path), Err(Error::Storage(_))));
        let _ = std::fs::remove_file(&path);
    }
}
