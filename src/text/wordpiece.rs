//! The BERT WordPiece tokenizer of the embedding model, reimplemented so that the same code runs natively and in
//! wasm32 (the HuggingFace `tokenizers` crate is heavy there). It must give the ids HuggingFace gives for the
//! model's `tokenizer.json`, or the embeddings silently drift; `tests/tokenizer_parity.rs` checks that.
//!
//! The pipeline mirrors HuggingFace's, step for step, because the order matters:
//! 1. added tokens (`[CLS]`, `[SEP]`…) are cut out of the raw text (they are matched before normalization);
//! 2. `BertNormalizer`: drop control/format chars, whitespace → ' ', pad CJK ideographs with spaces,
//!    NFD + drop nonspacing marks (accents), lowercase;
//! 3. `BertPreTokenizer`: split on whitespace, isolate every punctuation char;
//! 4. `WordPiece`: greedy longest-prefix match with `##` continuations; a word that cannot be covered whole
//!    (or is too long) becomes a single `[UNK]`.

use rustc_hash::FxHashMap;

use serde::Deserialize;
use unicode_categories::UnicodeCategories;

use crate::{Error, Result};

/// A WordPiece tokenizer loaded from a HuggingFace `tokenizer.json`.
#[derive(Debug, Clone)]
pub struct WordPiece {
    vocab: FxHashMap<String, u32>,
    /// Added tokens matched on the raw text (`normalized: false`), and those matched after normalization.
    raw_added: Vec<(String, u32)>,
    norm_added: Vec<(String, u32)>,
    norm: BertNormalizer,
    prefix: String,
    max_chars: usize,
    unk_id: u32,
    cls_id: u32,
    sep_id: u32,
    pad_id: u32,
}

// The parts of tokenizer.json loci reads. Each component's `type` must name the one loci implements, so that
// another tokenizer is refused instead of being tokenized differently from HuggingFace.
#[derive(Deserialize)]
struct TokenizerJson {
    model: ModelJson,
    normalizer: BertNormalizer,
    pre_tokenizer: PreTokenizerJson,
    added_tokens: Vec<AddedTokenJson>,
}

#[derive(Deserialize, Debug, Clone, Copy, PartialEq)]
enum Only {
    WordPiece,
    BertNormalizer,
    BertPreTokenizer,
}

#[derive(Deserialize)]
struct ModelJson {
    #[serde(rename = "type")]
    kind: Only,
    vocab: FxHashMap<String, u32>,
    unk_token: String,
    continuing_subword_prefix: String,
    max_input_chars_per_word: usize,
}

#[derive(Deserialize)]
struct PreTokenizerJson {
    #[serde(rename = "type")]
    kind: Only,
}

#[derive(Deserialize)]
struct AddedTokenJson {
    id: u32,
    content: String,
    single_word: bool,
    lstrip: bool,
    rstrip: bool,
    normalized: bool,
}

/// `strip_accents: null` means "strip when lowercasing", as in HuggingFace.
#[derive(Deserialize, Debug, Clone, Copy)]
struct BertNormalizer {
    #[serde(rename = "type")]
    kind: Only,
    clean_text: bool,
    handle_chinese_chars: bool,
    strip_accents: Option<bool>,
    lowercase: bool,
}

/// A piece of text after cutting out added tokens.
enum Piece<'t> {
    Added(u32),
    Text(&'t str),
}

fn err(msg: impl std::fmt::Display) -> Error {
    Error::Embedder(format!("tokenizer.json: {msg}"))
}

impl WordPiece {
    /// Parses a HuggingFace tokenizer.json (WordPiece model). Errors: crate::Error::Embedder(String) with a clear message.
    ///
    /// Only BertNormalizer + BertPreTokenizer + WordPiece with plain added tokens is accepted.
    pub fn from_tokenizer_json(json: &str) -> Result<WordPiece> {
        let t: TokenizerJson =
            serde_json::from_str(json).map_err(|e| err(format!("not a BERT WordPiece tokenizer ({e})")))?;
        let kinds = (t.model.kind, t.normalizer.kind, t.pre_tokenizer.kind);
        if kinds != (Only::WordPiece, Only::BertNormalizer, Only::BertPreTokenizer) {
            return Err(err("expected a WordPiece model, BertNormalizer and BertPreTokenizer"));
        }
        let id_of = |tok: &str| t.model.vocab.get(tok).copied().ok_or_else(|| err(format!("vocab has no {tok}")));
        let (unk_id, cls_id, sep_id, pad_id) =
            (id_of(&t.model.unk_token)?, id_of("[CLS]")?, id_of("[SEP]")?, id_of("[PAD]")?);
        let mut wp = WordPiece {
            raw_added: Vec::new(),
            norm_added: Vec::new(),
            norm: t.normalizer,
            prefix: t.model.continuing_subword_prefix,
            max_chars: t.model.max_input_chars_per_word,
            unk_id,
            cls_id,
            sep_id,
            pad_id,
            vocab: t.model.vocab,
        };
        for a in t.added_tokens {
            if a.single_word || a.lstrip || a.rstrip {
                return Err(err(format!(
                    "added token {:?} uses single_word/lstrip/rstrip, which loci does not support",
                    a.content
                )));
            }
            // HuggingFace matches `normalized` added tokens against their normalized form.
            let (pattern, list) = if a.normalized {
                (wp.normalize(&a.content), &mut wp.norm_added)
            } else {
                (a.content, &mut wp.raw_added)
            };
            if !pattern.is_empty() {
                list.push((pattern, a.id));
            }
        }
        Ok(wp)
    }

    /// Token ids of `text` WITHOUT special tokens and without truncation.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        for piece in split_added(text, &self.raw_added) {
            let raw = match piece {
                Piece::Added(id) => {
                    out.push(id);
                    continue;
                }
                Piece::Text(raw) => raw,
            };
            let normalized = self.normalize(raw);
            for piece in split_added(&normalized, &self.norm_added) {
                match piece {
                    Piece::Added(id) => out.push(id),
                    Piece::Text(s) => self.pre_tokenize(s, &mut out),
                }
            }
        }
        out
    }

    pub fn cls_id(&self) -> u32 {
        self.cls_id
    }
    pub fn sep_id(&self) -> u32 {
        self.sep_id
    }
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }
    /// Number of entries in the model vocabulary (30522 for all-MiniLM-L6-v2).
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// `BertNormalizer`, in HuggingFace's order: clean, pad CJK, strip accents, lowercase. Lowercasing comes last,
    /// so e.g. 'İ' loses its dot as an accent before it becomes 'i'.
    fn normalize(&self, text: &str) -> String {
        let n = self.norm;
        let mut s = String::with_capacity(text.len());
        for c in text.chars() {
            // ASCII (most chat text) needs no Unicode category table: its "other" characters are the controls, its
            // whitespace is space, tab, CR and LF, and it holds no CJK.
            if c.is_ascii() {
                if n.clean_text && c.is_ascii_control() && !matches!(c, '\t' | '\n' | '\r') {
                    continue;
                }
                s.push(if n.clean_text && matches!(c, '\t' | '\n' | '\r') { ' ' } else { c });
                continue;
            }
            if n.clean_text {
                // Tab/CR/LF are Cc but count as whitespace; other Cc/Cf/Co (incl. zero-width chars) are dropped.
                if c == '\0' || c == '\u{fffd}' || (!matches!(c, '\t' | '\n' | '\r') && c.is_other()) {
                    continue;
                }
                if c.is_whitespace() {
                    s.push(' ');
                    continue;
                }
            }
            if n.handle_chinese_chars && is_chinese_char(c) {
                s.extend([' ', c, ' ']);
            } else {
                s.push(c);
            }
        }
        // ASCII (most chat text) is its own NFD and has no marks: skip the Unicode passes.
        if s.is_ascii() {
            if n.lowercase {
                s.make_ascii_lowercase();
            }
            return s;
        }
        if n.strip_accents.unwrap_or(n.lowercase) {
            // NFD also splits Hangul syllables into jamo, which the vocab then matches one by one.
            s = canonical_decomposition(&s).chars().filter(|c| !c.is_mark_nonspacing()).collect();
        }
        if n.lowercase {
            s = s.chars().flat_map(char::to_lowercase).collect();
        }
        s
    }

    /// `BertPreTokenizer`: whitespace separates words and is dropped; punctuation is a word of its own.
    fn pre_tokenize(&self, text: &str, out: &mut Vec<u32>) {
        let mut start = None;
        for (i, c) in text.char_indices() {
            // Every ASCII character of a Unicode punctuation category is ASCII punctuation, so ASCII skips the table.
            let punct = if c.is_ascii() { c.is_ascii_punctuation() } else { c.is_punctuation() };
            if c.is_whitespace() || punct {
                if let Some(s) = start.take() {
                    self.word_pieces(&text[s..i], out);
                }
                if punct {
                    self.word_pieces(&text[i..i + c.len_utf8()], out);
                }
            } else if start.is_none() {
                start = Some(i);
            }
        }
        if let Some(s) = start {
            self.word_pieces(&text[s..], out);
        }
    }

    /// Greedy longest-match-first WordPiece. All-or-nothing: if any part of the word is not in the vocab, the
    /// whole word is one `[UNK]`, not a partial split.
    fn word_pieces(&self, word: &str, out: &mut Vec<u32>) {
        if word.chars().count() > self.max_chars {
            out.push(self.unk_id);
            return;
        }
        // Most words are in the vocabulary whole: the longest match, tried first anyway.
        if let Some(&id) = self.vocab.get(word) {
            out.push(id);
            return;
        }
        let ends: Vec<usize> = word.char_indices().map(|(i, _)| i).skip(1).chain([word.len()]).collect();
        let first = out.len();
        let mut piece = String::with_capacity(word.len() + self.prefix.len());
        let mut start = 0;
        while start < word.len() {
            let found = ends.iter().rev().take_while(|&&end| end > start).find_map(|&end| {
                piece.clear();
                if start > 0 {
                    piece.push_str(&self.prefix);
                }
                piece.push_str(&word[start..end]);
                self.vocab.get(piece.as_str()).map(|&id| (id, end))
            });
            match found {
                Some((id, end)) => {
                    out.push(id);
                    start = end;
                }
                None => {
                    out.truncate(first);
                    out.push(self.unk_id);
                    return;
                }
            }
        }
    }
}

/// NFD (canonical decomposition). In the browser it is the platform's own `String.prototype.normalize` (ICU): the
/// unicode-normalization crate links its compatibility tables beside the canonical ones (its decomposer picks the
/// table at run time), ~100 KB of the wasm for a step only non-ASCII text takes. `tests/browser.rs` checks the
/// browser's ids against HuggingFace's on the same hard strings as `tests/tokenizer_parity.rs`.
#[cfg(target_arch = "wasm32")]
fn canonical_decomposition(s: &str) -> String {
    js_sys::JsString::from(s).normalize("NFD").into()
}

/// NFD (canonical decomposition), natively by the unicode-normalization crate.
#[cfg(not(target_arch = "wasm32"))]
fn canonical_decomposition(s: &str) -> String {
    unicode_normalization::UnicodeNormalization::nfd(s).collect()
}

/// Cuts `text` at added tokens, leftmost-longest like HuggingFace's Aho-Corasick matcher. There are only a few
/// added tokens, so a direct scan is enough.
fn split_added<'t>(text: &'t str, tokens: &[(String, u32)]) -> Vec<Piece<'t>> {
    let mut pieces = Vec::new();
    let mut rest_start = 0;
    let mut i = 0;
    while i < text.len() {
        let tail = &text[i..];
        // Jump to the next byte that can start an added token (all of BERT's start with '[').
        if let Some(skip) = tail.bytes().position(|b| tokens.iter().any(|(t, _)| t.as_bytes().first() == Some(&b))) {
            if skip > 0 {
                i += skip;
                continue;
            }
        } else {
            break;
        }
        let best = tokens.iter().filter(|(t, _)| tail.starts_with(t.as_str())).max_by_key(|(t, _)| t.len());
        if let Some((t, id)) = best {
            if rest_start < i {
                pieces.push(Piece::Text(&text[rest_start..i]));
            }
            pieces.push(Piece::Added(*id));
            i += t.len();
            rest_start = i;
        } else {
            i += tail.chars().next().map_or(1, char::len_utf8);
        }
    }
    if rest_start < text.len() {
        pieces.push(Piece::Text(&text[rest_start..]));
    }
    pieces
}

/// The "CJK Unified Ideographs" blocks, exactly as HuggingFace defines them (Hangul, kana are not included:
/// they are written with spaces and tokenized like any other script).
fn is_chinese_char(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F | 0x2B920..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_json() -> String {
        let words = [
            "[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world", "cafe", "!", ",", "'", "un", "##aff", "##able", "中",
            "文", "a", "##a", "don", "t",
        ];
        let vocab: serde_json::Map<String, serde_json::Value> =
            words.iter().enumerate().map(|(i, w)| (w.to_string(), i.into())).collect();
        let json = serde_json::json!({
            "added_tokens": [
                {"id": 0, "content": "[PAD]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
                {"id": 2, "content": "[CLS]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
                {"id": 4, "content": "HELLO", "single_word": false, "lstrip": false, "rstrip": false, "normalized": true, "special": false},
            ],
            "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": vocab},
        });
        json.to_string()
    }

    fn tiny() -> WordPiece {
        WordPiece::from_tokenizer_json(&tiny_json()).expect("tiny vocab parses")
    }

    #[test]
    fn lowercases_and_strips_accents() {
        assert_eq!(tiny().encode("HELLO Café WÖRLD"), vec![4, 6, 5]);
    }

    #[test]
    fn splits_punctuation() {
        assert_eq!(tiny().encode("hello,world!"), vec![4, 8, 5, 7]);
        assert_eq!(tiny().encode("don't"), vec![17, 9, 18]);
    }

    #[test]
    fn splits_cjk_chars() {
        assert_eq!(tiny().encode("hello中文world"), vec![4, 13, 14, 5]);
    }

    #[test]
    fn continuation_pieces() {
        assert_eq!(tiny().encode("unaffable"), vec![10, 11, 12]);
    }

    #[test]
    fn unknown_word_is_one_unk() {
        // "unaffx" starts with known pieces, but the word as a whole cannot be covered.
        assert_eq!(tiny().encode("hello unaffx zzz"), vec![4, 1, 1]);
    }

    #[test]
    fn long_word_is_unk() {
        let wp = tiny();
        assert_eq!(wp.encode(&"a".repeat(101)), vec![1]);
        let ok = wp.encode(&"a".repeat(100));
        assert_eq!(ok.len(), 100);
        assert_eq!((ok[0], ok[99]), (15, 16));
    }

    #[test]
    fn removes_control_and_zero_width_chars() {
        assert_eq!(tiny().encode("hel\u{200b}lo\u{0007}\tworld\u{200d}\u{0000}\u{fffd}"), vec![4, 5]);
    }

    #[test]
    fn added_tokens_match_raw_text() {
        assert_eq!(tiny().encode("hello[CLS]world [PAD]"), vec![4, 2, 5, 0]);
        // Not an added token in this vocab: tokenized as text.
        assert_eq!(tiny().encode("[SEP]"), vec![1, 1, 1]);
        // `normalized: true` added tokens match the normalized text, even inside a word.
        assert_eq!(tiny().encode("zzHELLOzz"), vec![1, 4, 1]);
    }

    #[test]
    fn special_ids_and_errors() {
        let wp = tiny();
        assert_eq!((wp.cls_id(), wp.sep_id(), wp.pad_id(), wp.vocab_size()), (2, 3, 0, 19));
        assert!(tiny().encode("").is_empty());
        let other_pre = tiny_json().replace("BertPreTokenizer", "Whitespace");
        let swapped = tiny_json().replace("BertPreTokenizer", "WordPiece");
        for bad in ["{}", "not json", &other_pre, &swapped] {
            let e = WordPiece::from_tokenizer_json(bad).expect_err("must be refused");
            assert!(matches!(e, Error::Embedder(_)), "{e:?}");
        }
    }
}
