//! Headless Chromium: a memory open in one place refuses a second opener (another tab would work on a stale index
//! and reuse ids) with BLOCKED_BY_OTHER_TAB, and is available again once closed.
#![cfg(target_arch = "wasm32")]

mod browser_common;

use browser_common::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
async fn a_second_opener_is_refused_until_the_first_closes() {
    delete("t-tabs").await;
    let first = open("t-tabs").await;
    wait(first.add_messages(js(r#"[{"role": "user", "content": "I keep my bike in the shed."}]"#), js(r#"{"session": "a"}"#)))
        .await
        .unwrap();
    let err = open_with(open_options("t-tabs", "wasm", "")).await.err().expect("second opener refused");
    assert_eq!(code(&err), "BLOCKED_BY_OTHER_TAB");
    // The refused opener changed nothing and the first keeps working.
    let stats = wait(first.stats()).await.unwrap();
    assert_eq!(num(&stats, "turns"), 1.0);
    wait(first.close()).await.unwrap();

    let second = open("t-tabs").await;
    let stats = wait(second.stats()).await.unwrap();
    assert_eq!(num(&stats, "turns"), 1.0);
    wait(second.close()).await.unwrap();
}
