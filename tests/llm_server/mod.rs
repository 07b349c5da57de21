//! Starts `tests/llm-server/server.mjs` (Node, no dependencies) on a free port for one test; stops it on drop.
//! The child's stdin is a pipe it watches (`--exit-with-stdin`), so even a test runner killed mid-test leaves no
//! server behind.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

pub struct LlmServer {
    child: Child,
    pub port: u16,
}

impl LlmServer {
    pub fn start() -> Self {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/llm-server/server.mjs");
        let mut child = Command::new("node")
            .args([script, "0", "--exit-with-stdin"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("node on PATH (the test LLM server is a Node script)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("server output");
        let port = line
            .trim()
            .strip_prefix("READY ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the test LLM server did not start: {line:?}"));
        LlmServer { child, port }
    }

    pub fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The `baseUrl` a client is given.
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.origin())
    }

    /// Replaces the queue of scripted steps.
    pub fn script(&self, steps: Value) {
        ureq::post(&format!("{}/__script", self.origin())).send(steps.to_string()).expect("script");
    }

    /// A model's limits for every later request: `{contextTokens?, latencyMs?}`.
    pub fn config(&self, config: Value) {
        ureq::post(&format!("{}/__config", self.origin())).send(config.to_string()).expect("config");
    }

    /// Empties the script and the log (and the config).
    pub fn reset(&self) {
        ureq::post(&format!("{}/__reset", self.origin())).send("").expect("reset");
    }

    /// The chat requests received so far: `{path, headers, body, at}`.
    pub fn log(&self) -> Vec<Value> {
        let text =
            ureq::get(&format!("{}/__log", self.origin())).call().expect("log").into_body().read_to_string().unwrap();
        serde_json::from_str(&text).unwrap()
    }
}

impl Drop for LlmServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
