//! The opt-in bge-small-en-v1.5 int8 embedder (issue 44) reproduces Python onnxruntime
//! (tests/fixtures/bge_small_reference.json, made by scripts/make_bge_reference.py): CLS pooling, not mean, and the
//! query instruction before queries only, through the same `ort` code as MiniLM (its int8 activations included).
#![cfg(not(target_arch = "wasm32"))]

mod common;

use loci::embed::{default_dylib_path, model_dir, Embedder, ModelSpec, OnnxRuntime, Pooling};
use loci::text::WordPiece;

#[derive(serde::Deserialize)]
struct Item {
    text: String,
    ids: Vec<u32>,
    cls: Vec<f32>,
    mean: Vec<f32>,
}

#[derive(serde::Deserialize)]
struct Reference {
    query_prefix: String,
    passages: Vec<Item>,
    queries: Vec<Item>,
}

/// The bge embedder, or `None` where `node scripts/setup.mjs bge-small` has not been run (it is opt-in; `npm test`
/// runs it, so the suite always checks this).
fn bge() -> Option<Embedder<OnnxRuntime>> {
    let dir = model_dir(&ModelSpec::BGE_SMALL);
    let Ok(model) = std::fs::read(dir.join("model.onnx")) else {
        eprintln!("SKIPPED: {} is missing; run `node scripts/setup.mjs bge-small`", dir.display());
        return None;
    };
    let tokenizer = std::fs::read_to_string(dir.join("tokenizer.json")).expect("tokenizer.json");
    let dylib = default_dylib_path().expect("onnxruntime library path; run `node scripts/setup.mjs native`");
    let runtime = OnnxRuntime::native(&model, &dylib, 1).expect("onnxruntime session");
    let tokenizer = WordPiece::from_tokenizer_json(&tokenizer).expect("bge's tokenizer.json loads");
    // One text per call: bge quantizes activations per call, so its batch-mates move a vector a little.
    let config = loci::embed::EmbedConfig { batch_size: 1, ..ModelSpec::BGE_SMALL.embed_config() };
    Some(Embedder::new(tokenizer, runtime, config).expect("embedder"))
}

fn reference() -> Reference {
    serde_json::from_str(include_str!("fixtures/bge_small_reference.json")).expect("fixture")
}

/// The vector is the reference's CLS one, and measurably not its mean-pooled one. Int8 kernels differ a little
/// between CPUs (VNNI or not), so "the same" is a cosine of 0.995, while the two poolings are ≤ 0.97 apart.
fn assert_cls(got: &[f32], item: &Item) {
    let (cls, mean) = (common::cosine(got, &item.cls), common::cosine(got, &item.mean));
    assert!(cls >= 0.995, "cosine {cls} with the reference CLS vector of {:?}", item.text);
    assert!(cls - mean >= 0.02, "as close to mean pooling ({mean}) as to CLS ({cls}) for {:?}", item.text);
}

#[test]
fn bge_passages_are_cls_pooled_like_python_onnxruntime() {
    let Some(mut e) = bge() else { return };
    assert_eq!(e.config().pooling, Pooling::Cls);
    let reference = reference();
    let texts: Vec<&str> = reference.passages.iter().map(|i| i.text.as_str()).collect();
    let got = pollster::block_on(e.embed(&texts)).expect("embed");
    assert_eq!(got.len(), texts.len());
    for (w, item) in got.iter().zip(&reference.passages) {
        assert_eq!(e.windows(&item.text)[0], item.ids, "token ids of {:?}", item.text);
        assert_cls(&w.vector, item);
    }
}

#[test]
fn bge_queries_carry_the_instruction_and_rank_the_right_passage_first() {
    let Some(mut e) = bge() else { return };
    let reference = reference();
    assert_eq!(ModelSpec::BGE_SMALL.query_prefix, reference.query_prefix);
    let query = &reference.queries[0];
    let q = pollster::block_on(e.embed_query(&query.text)).expect("embed query");
    assert_cls(&q, query);
    let passages: Vec<&str> = reference.passages.iter().map(|i| i.text.as_str()).collect();
    let p = pollster::block_on(e.embed(&passages)).expect("embed");
    let scores: Vec<f32> = p.iter().map(|w| common::cosine(&q, &w.vector)).collect();
    assert!(scores[1] > scores[0] + 0.2 && scores[1] > scores[2] + 0.2, "taekwondo first: {scores:?}");
}
