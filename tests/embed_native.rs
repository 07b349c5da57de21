//! The native embedder reproduces the Python onnxruntime reference (tests/fixtures/reference_vectors.json, made by
//! scripts/make_reference_vectors.py).
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use loci::embed::{Batch, Device, EmbedConfig, OnnxRuntime, Runtime, QUERY_WINDOWS};

#[derive(serde::Deserialize)]
struct Item {
    text: String,
    ids: Vec<u32>,
    vector: Vec<f32>,
}

#[derive(serde::Deserialize)]
struct Reference {
    items: Vec<Item>,
}

fn reference() -> Reference {
    serde_json::from_str(include_str!("fixtures/reference_vectors.json")).expect("fixture")
}

#[test]
fn native_vectors_match_python_onnxruntime() {
    // Truncating, as the reference did for its one long text.
    let mut e = common::embedder(EmbedConfig { truncate: true, ..EmbedConfig::default() });
    let reference = reference();
    let texts: Vec<&str> = reference.items.iter().map(|i| i.text.as_str()).collect();
    let got = pollster::block_on(e.embed(&texts)).expect("embed");
    assert_eq!(got.len(), reference.items.len());
    for (w, item) in got.iter().zip(&reference.items) {
        assert_eq!(e.windows(&item.text)[0], item.ids, "token ids of {:?}", item.text);
        let cos = common::cosine(&w.vector, &item.vector);
        assert!(cos >= 0.9999, "cosine {cos} for {:?}", item.text);
    }
    // The browser test compares its vectors with these (native vs browser, not only each vs Python).
    let vectors: Vec<&Vec<f32>> = got.iter().map(|w| &w.vector).collect();
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target").join("loci-native-vectors.json");
    std::fs::write(out, serde_json::to_string(&vectors).unwrap()).expect("write native vectors");
}

#[test]
fn batching_does_not_change_vectors() {
    let reference = reference();
    let texts: Vec<&str> = reference.items.iter().map(|i| i.text.as_str()).collect();
    let mut batched = common::embedder(EmbedConfig { truncate: true, batch_size: 16, ..EmbedConfig::default() });
    let mut single = common::embedder(EmbedConfig { truncate: true, batch_size: 1, ..EmbedConfig::default() });
    let a = pollster::block_on(batched.embed(&texts)).unwrap();
    let b = pollster::block_on(single.embed(&texts)).unwrap();
    for (x, y) in a.iter().zip(&b) {
        assert!(common::cosine(&x.vector, &y.vector) > 0.99999);
    }
}

#[test]
fn long_text_is_embedded_in_overlapping_windows_not_cut() {
    let mut e = common::embedder(EmbedConfig::default());
    let long = reference().items.last().unwrap().text.clone();
    let windows = e.windows(&long);
    assert!(windows.len() >= 2, "{} windows", windows.len());
    assert!(windows.iter().all(|w| w.len() <= 256));
    let vectors = pollster::block_on(e.embed(&[&long])).unwrap();
    assert_eq!(vectors.len(), windows.len());
    assert_eq!(vectors.iter().map(|v| v.window).collect::<Vec<_>>(), (0..windows.len() as u16).collect::<Vec<_>>());
}

/// What a runtime was asked to do: each call's batch shape, and the pauses between calls.
#[derive(Default, Debug)]
struct Calls {
    shapes: Vec<(usize, usize)>,
    pauses_before: Vec<usize>,
}

/// The real runtime, as the page's WASM backend asks to be driven: calls of at most 512 padded tokens.
struct OnPageThread {
    inner: OnnxRuntime,
    calls: Rc<RefCell<Calls>>,
}

#[async_trait::async_trait(?Send)]
impl Runtime for OnPageThread {
    async fn last_hidden_state(&mut self, batch: &Batch) -> loci::Result<Vec<f32>> {
        self.calls.borrow_mut().shapes.push((batch.rows, batch.seq));
        self.inner.last_hidden_state(batch).await
    }
    fn device(&self) -> Device {
        Device::Wasm
    }
    fn tokens_per_call(&self) -> Option<usize> {
        Some(512)
    }
    async fn between_calls(&mut self) {
        let mut calls = self.calls.borrow_mut();
        let done = calls.shapes.len();
        calls.pauses_before.push(done);
    }
}

fn pasted_report(items: usize) -> String {
    (0..items).map(|i| format!("Item {i}: the kitchen was repainted on day {} by the crew. ", 1 + i % 28)).collect()
}

/// A pasted document on the page's thread: calls of at most 512 padded tokens with a pause between each (one call of
/// 16 windows held the page for seconds), and the same vectors as one unrestricted call.
#[test]
fn a_long_text_on_a_thread_it_must_share_goes_in_small_calls_with_pauses_between() {
    let calls = Rc::new(RefCell::new(Calls::default()));
    let mut shared =
        common::embedder_around(EmbedConfig::default(), |inner| OnPageThread { inner, calls: calls.clone() });
    let mut free = common::embedder(EmbedConfig::default());
    let report = pasted_report(120);
    let got = pollster::block_on(shared.embed(&[&report, "a short turn", "another short turn"])).unwrap();
    let want = pollster::block_on(free.embed(&[&report, "a short turn", "another short turn"])).unwrap();
    let calls = calls.borrow();
    assert!(got.len() >= 8, "{} windows", got.len());
    assert!(calls.shapes.iter().all(|&(rows, seq)| rows * seq <= 512), "{:?}", calls.shapes);
    assert!(calls.shapes[0].0 >= 3, "the two short turns share a call with the shortest window: {:?}", calls.shapes);
    assert_eq!(calls.pauses_before, (1..calls.shapes.len()).collect::<Vec<_>>(), "a pause between each two calls");
    assert_eq!(got.len(), want.len());
    for (a, b) in got.iter().zip(&want) {
        assert_eq!((a.text, a.window), (b.text, b.window));
        assert!(common::cosine(&a.vector, &b.vector) > 0.99999);
    }
}

/// A pasted document asked about is embedded as a few windows spread over it, not as every window it holds: the
/// reply waits for the query's embedding.
#[test]
fn a_long_query_is_embedded_as_a_few_windows() {
    let calls = Rc::new(RefCell::new(Calls::default()));
    let mut e = common::embedder_around(EmbedConfig::default(), |inner| OnPageThread { inner, calls: calls.clone() });
    let report = pasted_report(600);
    assert!(e.windows(&report).len() > 4 * QUERY_WINDOWS, "{} windows", e.windows(&report).len());
    let query = pollster::block_on(e.embed_query(&report)).unwrap();
    let rows: usize = calls.borrow().shapes.iter().map(|s| s.0).sum();
    assert_eq!(rows, QUERY_WINDOWS);
    let norm: f32 = query.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "a unit vector: {norm}");
    let short = pollster::block_on(e.embed_query("When was the kitchen repainted?")).unwrap();
    assert!(common::cosine(&query, &short) > 0.3, "still about the report: {}", common::cosine(&query, &short));
}

/// What `addMessages` and its background run ask of the embedder: a few windows of a long text now, with each text's
/// whole window count, then the others a call at a time; the windows embedded either way are the same vectors.
#[test]
fn some_windows_now_and_the_rest_a_call_at_a_time_give_the_same_vectors() {
    let calls = Rc::new(RefCell::new(Calls::default()));
    let mut e = common::embedder_around(EmbedConfig::default(), |inner| OnPageThread { inner, calls: calls.clone() });
    let mut free = common::embedder(EmbedConfig::default());
    let report = pasted_report(300);
    let windows = e.windows(&report);
    assert!(windows.len() > 12, "{} windows", windows.len());
    let (now, counts) = pollster::block_on(e.embed_some(&[&report, "a short turn"], 4)).unwrap();
    assert_eq!(counts, vec![windows.len(), 1]);
    assert_eq!(now.iter().filter(|w| w.text == 0).count(), 4);
    assert_eq!(now.iter().filter(|w| w.text == 1).count(), 1);
    // 512 tokens a call on the page's thread: two full windows.
    assert_eq!(e.windows_per_call(), 2);
    assert_eq!(free.windows_per_call(), EmbedConfig::default().batch_size);
    let all = pollster::block_on(free.embed(&[&report])).unwrap();
    let mut rest = Vec::new();
    for call in windows.chunks(e.windows_per_call()) {
        let before = calls.borrow().shapes.len();
        rest.extend(
            pollster::block_on(e.embed_token_windows(&call.iter().map(|w| &w[..]).collect::<Vec<_>>())).unwrap(),
        );
        assert_eq!(calls.borrow().shapes.len(), before + 1, "one model call");
    }
    assert_eq!(rest.len(), all.len());
    for (a, b) in rest.iter().zip(&all) {
        assert!(common::cosine(a, &b.vector) > 0.99999);
    }
    // The windows embedded now are among them: the first and the last, and two spread between.
    let first = &now.iter().find(|w| w.text == 0).unwrap().vector;
    assert!(common::cosine(first, &all[0].vector) > 0.99999);
    let last = &now.iter().rfind(|w| w.text == 0).unwrap().vector;
    assert!(common::cosine(last, &all[all.len() - 1].vector) > 0.99999);
}
