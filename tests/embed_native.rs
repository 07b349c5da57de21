//! The native embedder reproduces the Python onnxruntime reference (tests/fixtures/reference_vectors.json, made by
//! scripts/make_reference_vectors.py).
#![cfg(not(target_arch = "wasm32"))]

mod common;

use loci::embed::EmbedConfig;

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
