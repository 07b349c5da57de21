//! Native HTTP transport for the OpenAI-compatible client (used by `loci-eval` and the native tests): blocking
//! `ureq` inside the async trait. It blocks the calling thread, which is what a CLI driven by `pollster` wants;
//! never use it on an executor shared with other work. The abort signal is checked before sending only: a blocking
//! request cannot be interrupted, its timeout bounds it.

use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::openai::{HttpResponse, HttpTransport, TransportError};
use super::AbortSignal;

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

#[async_trait(?Send)]
impl HttpTransport for UreqTransport {
    async fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &str,
        timeout_ms: u64,
        abort: Option<&AbortSignal>,
    ) -> Result<HttpResponse, TransportError> {
        if abort.is_some_and(AbortSignal::is_aborted) {
            return Err(TransportError::Aborted);
        }
        let mut req = self.agent.post(url);
        for (k, v) in headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = req.config().timeout_global(Some(Duration::from_millis(timeout_ms))).build();
        let mut resp = req.send(body).map_err(map_error)?;
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_ascii_lowercase(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        let body = resp.body_mut().read_to_string().map_err(map_error)?;
        Ok(HttpResponse { status, headers, body })
    }

    async fn sleep(&self, ms: u64) {
        std::thread::sleep(Duration::from_millis(ms));
    }

    fn now_ms(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64() * 1000.0
    }
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
