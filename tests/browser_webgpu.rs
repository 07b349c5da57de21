//! Headless Chromium with `--enable-unsafe-webgpu` (a SwiftShader software adapter): the WebGPU path is correct,
//! and `auto` does not pick a software adapter. Correctness only: software WebGPU takes seconds per inference, so
//! this file embeds a few short inputs (run with tests/webdriver-webgpu.json and a raised test timeout).
#![cfg(target_arch = "wasm32")]

mod browser_common;

use browser_common::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
async fn webgpu_device_embeds_like_the_reference_and_auto_skips_software_adapters() {
    // Explicit WebGPU: the session runs on the WebGPU provider and its vectors match Python's.
    delete("t-webgpu").await;
    let m = open_with(open_options("t-webgpu", "webgpu", "")).await.expect("webgpu open");
    let stats = wait(m.stats()).await.unwrap();
    assert_eq!(string(&stats, "device"), "webgpu");
    let reference: Reference = serde_json::from_str(include_str!("fixtures/reference_vectors.json")).unwrap();
    let hello = &reference.items[0];
    let msgs = serde_json::json!([{ "role": "user", "content": hello.text }]).to_string();
    wait(m.add_messages(js(&msgs), js(r#"{"session": "s"}"#))).await.expect("embed on WebGPU");
    let r = wait(m.recall(hello.text.clone().into(), js(r#"{"k": 1}"#))).await.expect("recall on WebGPU");
    assert_eq!(string(&r, "device"), "webgpu");
    assert_eq!(string(&r, "sessions.0.id"), "s");
    wait(m.close()).await.unwrap();

    // `auto` (after WebGPU was loaded in this page): a fallback (software) adapter is never chosen.
    delete("t-auto").await;
    let m = open_with(open_options("t-auto", "auto", "")).await.expect("auto open");
    let stats = wait(m.stats()).await.unwrap();
    assert_eq!(string(&stats, "device"), "wasm");
    assert!(m.device_reason().contains("no hardware WebGPU adapter"), "{}", m.device_reason());
    wait(m.close()).await.unwrap();

    let tokenizer = fetch_text("/www/assets/model/tokenizer.json").await.unwrap();
    let tokenizer = loci::text::WordPiece::from_tokenizer_json(&tokenizer).unwrap();
    let model = fetch_bytes("/www/assets/model/model.onnx").await;
    let dist = loci::embed::OrtDist {
        base_url: absolute("/www/assets/ort/"),
        wrapper_ext: "js".into(),
        threads: None,
        worker: true,
    };
    let (_, env) = loci::embed::web_environment(&dist, loci::embed::WebBuild::Webgpu).await.unwrap();
    let runtime = loci::embed::OnnxRuntime::web(&env, &model, loci::embed::Device::Webgpu).await.unwrap();
    let mut e = loci::embed::Embedder::new(tokenizer, runtime, Default::default()).unwrap();
    let got = e.embed(&[hello.text.as_str()]).await.unwrap();
    let c: f32 = got[0].vector.iter().zip(&hello.vector).map(|(a, b)| a * b).sum();
    assert!(c >= 0.9999, "WebGPU vs Python: cosine {c}");
}
