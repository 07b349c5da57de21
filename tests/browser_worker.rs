//! Inside a dedicated Web Worker (embedding off the main thread): open, remember, recall, persist. The whole file
//! runs in the worker (wasm-bindgen-test's `run_in_dedicated_worker`).
#![cfg(target_arch = "wasm32")]

mod browser_common;

use browser_common::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_dedicated_worker);

#[wasm_bindgen_test]
async fn a_memory_works_inside_a_web_worker() {
    assert!(js_sys::Reflect::get(&js_sys::global(), &"document".into()).unwrap().is_undefined(), "really a worker");
    delete("t-worker").await;
    let m = open("t-worker").await;
    let hike = r#"[{"speaker": "Ana", "content": "We hiked up to the glacier lake last weekend.", "time": "2023-05-08T13:56:00Z"},
                   {"speaker": "Ben", "content": "Which trail did you take?", "time": "2023-05-08T13:57:00Z"}]"#;
    let bread = r#"[{"speaker": "Ben", "content": "I baked sourdough bread with my own starter.", "time": "2023-06-01T09:00:00Z"}]"#;
    wait(m.add_messages(js(hike), js(r#"{"session": "hike"}"#))).await.unwrap();
    wait(m.add_messages(js(bread), js(r#"{"session": "bread"}"#))).await.unwrap();
    let r = wait(m.recall("What did Ben bake?".into(), js(r#"{"k": 1}"#))).await.expect("recall in a worker");
    assert_eq!(string(&r, "sessions.0.id"), "bread");
    assert_eq!(string(&r, "device"), "wasm");
    assert!(
        js_sys::Reflect::get(&js_sys::global(), &"document".into()).unwrap().is_undefined(),
        "the loader stand-in is gone"
    );
    wait(m.close()).await.unwrap();
    let m = open("t-worker").await;
    assert_eq!(num(&wait(m.stats()).await.unwrap(), "turns"), 3.0);
    wait(m.close()).await.unwrap();
}
