//! Headless Chromium ranks the sessions of LoCoMo conversation 1 (conv-26) through the JS API and matches the native
//! run of `tests/locomo_rank_native.rs` (same code, same model): scores within 3e-4 and the same top 3 for at least
//! 99% of the questions. (The two sides run different onnxruntime builds, 1.32 natively and onnxruntime-web 1.30,
//! whose kernels round differently: the worst gap measured was 7.1e-5 on one machine and 1.03e-4 on another.) The conversation comes from the test server (`GET /__fixture/locomo/0`, read from ../shared).
#![cfg(target_arch = "wasm32")]

mod browser_common;
mod locomo_fixture;

use browser_common::*;
use locomo_fixture::{Ranked, NATIVE_RANKINGS};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

// Compiled in, so a run without the server fails with this message rather than a missing-env compile error.
#[allow(clippy::option_env_unwrap)]
fn fixture_url() -> String {
    let llm = option_env!("LOCI_TEST_LLM_URL").expect("LOCI_TEST_LLM_URL: start tests/llm-server/server.mjs");
    format!("{}/__fixture/locomo/0", llm.trim_end_matches("/v1"))
}

#[wasm_bindgen_test]
async fn browser_ranking_matches_the_native_run() {
    let native: Vec<Ranked> = serde_json::from_str(
        &fetch_text(&format!("/{NATIVE_RANKINGS}"))
            .await
            .expect("native rankings: run the native tests first (npm test does)"),
    )
    .unwrap();
    let fixture: serde_json::Value =
        serde_json::from_str(&fetch_text(&fixture_url()).await.expect("LoCoMo fixture")).unwrap();
    let questions: Vec<String> = serde_json::from_value(fixture["questions"].clone()).unwrap();
    assert_eq!(questions.len(), native.len());

    delete("t-locomo").await;
    let m = open("t-locomo").await;
    for (id, messages) in locomo_fixture::sessions(&fixture["conversation"]) {
        let messages = serde_json::to_string(&messages).unwrap();
        wait(m.add_messages(js(&messages), js(&format!(r#"{{"session": "{id}"}}"#)))).await.expect("ingest");
    }
    let mut same_top3 = 0;
    let mut worst = 0.0f32;
    for (q, n) in questions.iter().zip(&native) {
        assert_eq!(q, &n.question);
        let r = wait(m.recall(q.clone().into(), js(r#"{"k": 3}"#))).await.unwrap();
        let got: Vec<String> = (0..3).map(|i| string(&r, &format!("sessions.{i}.id"))).collect();
        if got == n.sessions {
            same_top3 += 1;
        }
        for (i, id) in got.iter().enumerate() {
            if let Some(j) = n.sessions.iter().position(|s| s == id) {
                worst = worst.max((num(&r, &format!("sessions.{i}.score")) as f32 - n.scores[j]).abs());
            }
        }
    }
    let share = same_top3 as f64 / questions.len() as f64;
    web_sys::console::log_1(&format!("same top-3: {same_top3}/{} ; worst score gap {worst:e}", questions.len()).into());
    assert!(share >= 0.99, "same top-3 for {same_top3}/{} questions", questions.len());
    assert!(worst <= 3e-4, "score gap {worst}");
    wait(m.close()).await.unwrap();
}
