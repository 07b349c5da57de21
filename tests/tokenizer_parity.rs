#![cfg(not(target_arch = "wasm32"))]
//! loci's own WordPiece must give exactly the ids of HuggingFace `tokenizers` for the model's tokenizer.json,
//! or stored vectors would not match those the model was trained to produce. Compares both on every LoCoMo
//! utterance, caption and question, plus hand-written strings aimed at the tricky parts of BERT tokenization.

use std::path::PathBuf;

use loci::text::WordPiece;
use serde_json::Value;

fn tokenizer_path() -> PathBuf {
    // Where `scripts/setup.mjs` puts it (not `~/.cache`: a fresh machine, or a run with its own LOCI_CACHE, has
    // nothing there).
    let path = match std::env::var_os("LOCI_TOKENIZER_JSON") {
        Some(p) => PathBuf::from(p),
        None => loci::embed::default_model_dir().join("tokenizer.json"),
    };
    assert!(
        path.is_file(),
        "tokenizer.json not found at {}: run `node scripts/setup.mjs native` (or set LOCI_TOKENIZER_JSON)",
        path.display()
    );
    path
}

/// Strings aimed at each step of the pipeline: accents, CJK padding, Hangul NFD, scripts without case,
/// emoji and joiners, control/format chars, combining marks, the 100-char limit, whitespace, punctuation.
const HARD: &[&str] = &[
    "Hello world",
    "Café crème brûlée à la façon de Zoë",
    "ÅNGSTRÖM naïve résumé coöperate",
    "İstanbul ıi ß ẞ ﬁ ǅ",
    "我喜欢在北京吃饺子。你呢？",
    "日本語のテキストとカタカナ、ひらがな",
    "안녕하세요 세계, 한국어 텍스트입니다",
    "مرحبا بالعالم، كيف حالك؟",
    "שלום עולם",
    "Привет, мир! Ёлка",
    "Γειά σου Κόσμε ά",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "I love it 😀😂👍🏽 🇫🇷",
    "family: 👨‍👩‍👧‍👦 and zero\u{200d}width\u{200b}space\u{feff}bom",
    "bell\u{7}tab\tnew\nline\rcr\u{0b}vt\u{0c}ff\u{85}nel\u{0}nul\u{fffd}repl",
    "non\u{a0}breaking\u{2003}em\u{3000}ideographic\u{2028}sep",
    "e\u{301}\u{302} a\u{308} combining \u{301}alone \u{20dd}",
    "Pneumonoultramicroscopicsilicovolcanoconiosis is long",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism",
    "don't won't y'all rock'n'roll I'm O'Neil",
    "1,234,567.89 1.000.000 10'000 3/4 -42 +7 1e-9 ½ ²³ ①",
    "Visit https://example.com/path?q=a&b=c#frag or mail me@ex.org",
    "C:\\Users\\me\\file.txt ~/dir/*.rs $HOME {x: [1, 2]}",
    "wait... what?!?! —— – “quoted” ‘single’ «guillemets» „low“",
    "   leading and trailing spaces   ",
    "",
    " \t\n ",
    "[CLS] inside text [SEP] and [PAD][MASK][UNK] and [cls]",
    "##prefix ## # hash#tag @mention",
    "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
    "ＡＢＣ ㈱ ㍿ ℡ ™ ©",
    "Ⅻ ⅻ ℃ ° µ Ω K Å",
    "\u{e000}private\u{f8ff}use \u{10ffff} \u{e0001}tag",
    "mixed中文and English混合text",
    "𠀀𪜀 extension-B ideographs 丽 compat",
    "tokenization-of_hyphenated_and_snake_case words",
    "LoCoMo's Caroline & Melanie: \"support group\" (LGBTQ+)",
    "ǈubljana Ǆ ǲ",
    "a\u{34f}b grapheme joiner, a\u{200c}b non-joiner, soft\u{ad}hyphen",
];

fn locomo_strings() -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/locomo/locomo10.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let samples: Vec<Value> = serde_json::from_str(&text).expect("locomo10.json parses");
    let mut out = Vec::new();
    for sample in &samples {
        let conversation = sample["conversation"].as_object().expect("conversation object");
        for (key, session) in conversation {
            let is_session = key.strip_prefix("session_").is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()));
            let Some(turns) = session.as_array().filter(|_| is_session) else {
                continue;
            };
            for turn in turns {
                let speaker = turn["speaker"].as_str().unwrap_or_default();
                let text = turn["text"].as_str().unwrap_or_default();
                out.push(format!("[{speaker}]: {text}"));
                if let Some(caption) = turn.get("blip_caption").and_then(Value::as_str) {
                    out.push(caption.to_string());
                }
            }
        }
        for qa in sample["qa"].as_array().expect("qa array") {
            if let Some(q) = qa["question"].as_str() {
                out.push(q.to_string());
            }
        }
    }
    out
}

#[test]
fn matches_huggingface_tokenizers() {
    let path = tokenizer_path();
    let json = std::fs::read_to_string(&path).expect("read tokenizer.json");
    let ours = WordPiece::from_tokenizer_json(&json).expect("loci parses tokenizer.json");
    let mut hf = tokenizers::Tokenizer::from_file(&path).expect("HuggingFace parses tokenizer.json");
    hf.with_truncation(None).expect("disable truncation");
    hf.with_padding(None);

    assert_eq!(ours.encode("Hello world"), vec![7592, 2088]);
    assert_eq!((ours.cls_id(), ours.sep_id(), ours.pad_id(), ours.vocab_size()), (101, 102, 0, 30522));

    // Special tokens written in the text are matched on the raw text, before lowercasing: `[cls]` is not one.
    assert_eq!(ours.encode("a [CLS] b [MASK]")[1], 101);
    assert_eq!(ours.encode("a [CLS] b [MASK]")[3], 103);

    let long_word = "x".repeat(100) + " " + &"y".repeat(101) + " " + &"ab".repeat(60);
    let mut strings: Vec<String> = HARD.iter().map(|s| s.to_string()).collect();
    strings.push(long_word);
    strings.extend(locomo_strings());

    for s in &strings {
        let expected = hf.encode(s.as_str(), false).expect("HuggingFace encodes").get_ids().to_vec();
        let got = ours.encode(s);
        assert_eq!(got, expected, "first mismatch on {s:?}\n  loci:        {got:?}\n  huggingface: {expected:?}");
    }
    println!("tokenizer parity: {} strings compared, all identical", strings.len());
    assert!(strings.len() >= 1000, "only {} strings compared", strings.len());
}

/// The ids HuggingFace gives for [`HARD`] (and the over-long words), kept for `tests/browser.rs`, which checks that
/// the tokenizer gives them in the browser too: there NFD is the platform's `String.normalize`, not the
/// unicode-normalization crate (see `src/text/wordpiece.rs`). `LOCI_WRITE_FIXTURES=1` rewrites the file.
#[test]
fn the_browser_fixture_holds_huggingface_ids() {
    let path = tokenizer_path();
    let mut hf = tokenizers::Tokenizer::from_file(&path).expect("HuggingFace parses tokenizer.json");
    hf.with_truncation(None).expect("disable truncation");
    hf.with_padding(None);
    let mut strings: Vec<String> = HARD.iter().map(|s| s.to_string()).collect();
    strings.push("x".repeat(100) + " " + &"y".repeat(101) + " " + &"ab".repeat(60));
    let expected: Vec<Value> = strings
        .iter()
        .map(|s| {
            let ids = hf.encode(s.as_str(), false).expect("HuggingFace encodes").get_ids().to_vec();
            serde_json::json!({ "text": s, "ids": ids })
        })
        .collect();
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizer_hard.json");
    if std::env::var_os("LOCI_WRITE_FIXTURES").is_some() {
        let lines: Vec<String> = expected.iter().map(|case| serde_json::to_string(case).unwrap()).collect();
        std::fs::write(&fixture, format!("[\n{}\n]\n", lines.join(",\n"))).expect("write the fixture");
    }
    let kept: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&fixture).expect("read the fixture"))
        .expect("the fixture parses");
    assert_eq!(kept, expected, "tests/fixtures/tokenizer_hard.json is stale: LOCI_WRITE_FIXTURES=1 rewrites it");
}
