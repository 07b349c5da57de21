//! LoCoMo question answering scores: token F1 exactly as LoCoMo's `task_eval/evaluation.py` computes it, BLEU-1 as
//! the memory-system papers report it (NLTK `sentence_bleu` with weights (1,0,0,0) and smoothing method 1), an LLM
//! judge (yes/no: does the answer state the gold answer), and a per-category report with LLM calls and tokens per
//! question.
//!
//! LoCoMo's F1 per category: 1 (multi-hop) splits prediction and gold on `,` and averages, over gold parts, the
//! best F1 against any predicted part; 2, 3, 4 use plain F1, with a category-3 gold cut at its first `;`; 5
//! (adversarial) scores 1 when the prediction says "no information available" or "not mentioned", else 0.
//! Tokens are normalised (lower case, `,` and punctuation removed, `a|an|the|and` dropped) and Porter-stemmed
//! ([`porter_stem`], NLTK's variant).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Serialize;

use crate::error::Result;
use crate::llm::prompts::{self, JudgeReply};
use crate::llm::structured::{chat_json, Structured};
use crate::llm::{Llm, LlmRequest, Usage};

/// LoCoMo's `normalize_answer`: drop `,`, lower-case, drop ASCII punctuation, drop the words a/an/the/and, squeeze
/// whitespace.
pub fn normalize_answer(s: &str) -> String {
    let lowered: String = s.replace(',', "").to_lowercase().chars().filter(|c| !c.is_ascii_punctuation()).collect();
    lowered.split_whitespace().filter(|w| !matches!(*w, "a" | "an" | "the" | "and")).collect::<Vec<_>>().join(" ")
}

fn stems(s: &str) -> Vec<String> {
    normalize_answer(s).split_whitespace().map(porter_stem).collect()
}

/// LoCoMo's `f1_score`: token F1 over normalised, stemmed tokens.
pub fn f1_score(prediction: &str, gold: &str) -> f64 {
    let p = stems(prediction);
    let g = stems(gold);
    let mut counts: HashMap<&str, i64> = HashMap::new();
    for t in &g {
        *counts.entry(t).or_default() += 1;
    }
    let mut same = 0usize;
    for t in &p {
        if let Some(c) = counts.get_mut(t.as_str()) {
            if *c > 0 {
                *c -= 1;
                same += 1;
            }
        }
    }
    if same == 0 {
        return 0.0;
    }
    let precision = same as f64 / p.len() as f64;
    let recall = same as f64 / g.len() as f64;
    2.0 * precision * recall / (precision + recall)
}

/// LoCoMo's `f1` for multi-answer questions: mean over `,`-separated gold parts of the best F1 against any
/// `,`-separated predicted part.
pub fn f1_multi(prediction: &str, gold: &str) -> f64 {
    let preds: Vec<&str> = prediction.split(',').map(str::trim).collect();
    let golds: Vec<&str> = gold.split(',').map(str::trim).collect();
    let total: f64 = golds.iter().map(|g| preds.iter().map(|p| f1_score(p, g)).fold(0.0, f64::max)).sum();
    total / golds.len() as f64
}

/// The F1 LoCoMo reports for a question of `category` (`"1"`…`"5"`).
pub fn locomo_f1(category: &str, prediction: &str, gold: &str) -> f64 {
    match category {
        "1" => f1_multi(prediction, gold),
        "3" => f1_score(prediction, gold.split(';').next().unwrap_or("").trim()),
        "5" => {
            let p = prediction.to_lowercase();
            (p.contains("no information available") || p.contains("not mentioned")) as u8 as f64
        }
        _ => f1_score(prediction, gold),
    }
}

/// Lower-cased word tokens with punctuation as separate tokens (close to NLTK's `word_tokenize` on short answers).
pub fn bleu_tokens(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for c in s.to_lowercase().chars() {
        if c.is_alphanumeric() || c == '\'' && !word.is_empty() {
            word.push(c);
        } else {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            if !c.is_whitespace() {
                out.push(c.to_string());
            }
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// BLEU-1 of `prediction` against one reference: brevity penalty × clipped unigram precision, with NLTK's
/// smoothing method 1 (a zero match count becomes 0.1). 0 for an empty prediction.
pub fn bleu1(prediction: &str, gold: &str) -> f64 {
    let p = bleu_tokens(prediction);
    let r = bleu_tokens(gold);
    if p.is_empty() || r.is_empty() {
        return 0.0;
    }
    let mut counts: HashMap<&str, i64> = HashMap::new();
    for t in &r {
        *counts.entry(t).or_default() += 1;
    }
    let mut matched = 0usize;
    for t in &p {
        if let Some(c) = counts.get_mut(t.as_str()) {
            if *c > 0 {
                *c -= 1;
                matched += 1;
            }
        }
    }
    let precision = if matched == 0 { 0.1 / p.len() as f64 } else { matched as f64 / p.len() as f64 };
    let (c, rl) = (p.len() as f64, r.len() as f64);
    let bp = if c > rl { 1.0 } else { (1.0 - rl / c).exp() };
    bp * precision
}

/// Asks `llm` whether `generated` states `gold` (LoCoMo-style judge). Returns the verdict and the call's cost.
pub async fn judge(llm: &dyn Llm, question: &str, gold: &str, generated: &str) -> Result<Structured<JudgeReply>> {
    let request = LlmRequest {
        json_schema: Some(prompts::judge_schema()),
        max_tokens: Some(20),
        ..LlmRequest::new(prompts::judge(question, gold, generated))
    };
    chat_json(llm, &request).await
}

/// One answered question.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct QaRecord {
    pub id: String,
    pub category: String,
    pub question: String,
    pub gold: String,
    pub prediction: String,
    pub f1: f64,
    pub bleu1: f64,
    /// `None` when no judge ran (or it failed).
    pub judge: Option<bool>,
    /// Calls and tokens spent answering (recall/prune/generate), judge excluded.
    pub calls: u32,
    pub usage: Usage,
    /// Set when answering failed; the prediction is then empty and scores 0.
    pub error: Option<String>,
    /// Tokens of the context the answering model saw (after pruning).
    pub context_tokens: usize,
    /// Wall time of answering (pruning included, judge excluded).
    pub seconds: f64,
    /// LLM pruning kept nothing and extractive pruning stood in.
    pub fallback: bool,
}

impl QaRecord {
    /// Scores `prediction` for a question.
    pub fn scored(id: &str, category: &str, question: &str, gold: &str, prediction: &str) -> Self {
        QaRecord {
            id: id.into(),
            category: category.into(),
            question: question.into(),
            gold: gold.into(),
            prediction: prediction.into(),
            f1: locomo_f1(category, prediction, gold),
            bleu1: bleu1(prediction, gold),
            judge: None,
            calls: 0,
            usage: Usage::default(),
            error: None,
            context_tokens: 0,
            seconds: 0.0,
            fallback: false,
        }
    }
}

/// Means over a group of questions (scores ×100, as the papers print them).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct QaScore {
    pub n: usize,
    pub f1: f64,
    pub bleu1: f64,
    /// Share judged correct ×100, over judged questions; `None` when none was judged.
    pub judge: Option<f64>,
    pub judged: usize,
    pub errors: usize,
    pub calls_per_question: f64,
    pub input_tokens_per_question: f64,
    pub output_tokens_per_question: f64,
    /// Tokens of the answering model's context (what the papers compare), per question.
    pub context_tokens_per_question: f64,
    pub seconds_per_question: f64,
    pub fallbacks: usize,
}

/// The QA report: overall and per category.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct QaReport {
    pub overall: QaScore,
    pub per_category: BTreeMap<String, QaScore>,
}

fn score(records: &[&QaRecord]) -> QaScore {
    let n = records.len();
    let d = n.max(1) as f64;
    let judged: Vec<bool> = records.iter().filter_map(|r| r.judge).collect();
    QaScore {
        n,
        f1: 100.0 * records.iter().map(|r| r.f1).sum::<f64>() / d,
        bleu1: 100.0 * records.iter().map(|r| r.bleu1).sum::<f64>() / d,
        judge: (!judged.is_empty()).then(|| 100.0 * judged.iter().filter(|j| **j).count() as f64 / judged.len() as f64),
        judged: judged.len(),
        errors: records.iter().filter(|r| r.error.is_some()).count(),
        calls_per_question: records.iter().map(|r| r.calls as f64).sum::<f64>() / d,
        input_tokens_per_question: records.iter().map(|r| r.usage.input_tokens as f64).sum::<f64>() / d,
        output_tokens_per_question: records.iter().map(|r| r.usage.output_tokens as f64).sum::<f64>() / d,
        context_tokens_per_question: records.iter().map(|r| r.context_tokens as f64).sum::<f64>() / d,
        seconds_per_question: records.iter().map(|r| r.seconds).sum::<f64>() / d,
        fallbacks: records.iter().filter(|r| r.fallback).count(),
    }
}

/// Aggregates records overall and per category.
pub fn report(records: &[QaRecord]) -> QaReport {
    let mut cats: BTreeMap<String, Vec<&QaRecord>> = BTreeMap::new();
    for r in records {
        cats.entry(r.category.clone()).or_default().push(r);
    }
    QaReport {
        overall: score(&records.iter().collect::<Vec<_>>()),
        per_category: cats.iter().map(|(c, v)| (c.clone(), score(v))).collect(),
    }
}

/// Answers one benchmark question with `memory.answer` and scores it; with a `judge_llm`, asks it too. Failures of
/// the answer or the judge are recorded in the record (`error`, `judge: None`), never abort the run.
/// How the QA benchmark answers a question: the modes it compares.
#[derive(Debug, Clone, Copy)]
pub enum QaMode<'a> {
    /// The answer prompt with an empty memory: the baseline every memory mode must beat.
    NoMemory,
    /// [`Memory::answer`](crate::memory::Memory::answer): recall, pruning as the options say, answer.
    Recall(&'a crate::memory::AnswerOptions),
    /// [`Memory::answer_distilled`](crate::memory::Memory::answer_distilled): recalled sessions with the episodes and
    /// facts distillation made (Nemori's context), unpruned.
    Distilled(&'a crate::memory::AnswerOptions, crate::memory::DistilledRecallOptions),
}

/// Answers `question` from `memory` in `mode` and scores the answer against `gold` (and with `judge_llm`, when given).
/// A failed answer is recorded with its error code, never dropped.
pub async fn answer_question<S: crate::store::Store, R: crate::embed::Runtime>(
    memory: &mut crate::memory::Memory<S, R>,
    question: &super::EvalQuestion,
    gold: &str,
    mode: QaMode<'_>,
    llm: &dyn Llm,
    judge_llm: Option<&dyn Llm>,
    now: crate::types::TimeMs,
) -> QaRecord {
    let started = std::time::Instant::now();
    let result = match mode {
        QaMode::NoMemory => answer_without_memory(&question.question, llm, now).await,
        QaMode::Recall(options) => memory.answer(&question.question, options, llm, now).await,
        QaMode::Distilled(options, sources) => {
            memory.answer_distilled(&question.question, sources, options, llm, now).await
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    let (prediction, calls, usage, error, context_tokens, fallback) = match result {
        Ok(a) => {
            let fallback = matches!(mode, QaMode::Recall(o)
                if o.prune.mode != a.prune && a.prune != crate::recall::prune::PruneMode::None);
            (a.answer, a.spent.calls, a.spent.usage, None, a.context_tokens, fallback)
        }
        Err(e) => (String::new(), 0, Usage::default(), Some(format!("{}: {e}", e.code())), 0, false),
    };
    let mut record = QaRecord::scored(&question.id, &question.category, &question.question, gold, &prediction);
    record.calls = calls;
    record.usage = usage;
    record.error = error;
    record.context_tokens = context_tokens;
    record.seconds = seconds;
    record.fallback = fallback;
    if let (Some(j), None) = (judge_llm, &record.error) {
        record.judge = judge(j, &question.question, gold, &prediction).await.ok().map(|r| r.value.is_correct());
    }
    record
}

/// The baseline every memory mode must beat: the answer prompt with an empty memory.
async fn answer_without_memory(question: &str, llm: &dyn Llm, now: f64) -> Result<crate::memory::AnswerResult> {
    let date = crate::types::format_time(now);
    let request = LlmRequest {
        json_schema: Some(prompts::answer_schema()),
        max_tokens: crate::memory::AnswerOptions::default().max_tokens,
        ..LlmRequest::new(prompts::answer("", question, &date))
    };
    let reply: Structured<prompts::AnswerReply> = chat_json(llm, &request).await?;
    Ok(crate::memory::AnswerResult {
        question: question.into(),
        answer: reply.value.answer.trim().to_string(),
        sessions: Vec::new(),
        kept: Vec::new(),
        context: String::new(),
        context_tokens: 0,
        unpruned_tokens: 0,
        prune: crate::recall::prune::PruneMode::None,
        spent: crate::memory::Spent { calls: reply.calls, usage: reply.usage, latency_ms: reply.latency_ms },
    })
}

/// Gold answers of LoCoMo, by question id (`{sample_id}_q{index}`, the loader's ids): the `answer` field (numbers
/// as text), or `adversarial_answer` for category 5 questions that have no `answer`.
pub fn locomo_answers(path: &Path) -> std::result::Result<HashMap<String, String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let data: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = HashMap::new();
    for sample in data.as_array().ok_or("LoCoMo data must be a list")? {
        let id = sample["sample_id"].as_str().unwrap_or_default();
        for (i, qa) in sample["qa"].as_array().into_iter().flatten().enumerate() {
            let answer = match (&qa["answer"], &qa["adversarial_answer"]) {
                (serde_json::Value::String(s), _) => s.clone(),
                (serde_json::Value::Null, serde_json::Value::String(s)) => s.clone(),
                (serde_json::Value::Null, _) => String::new(),
                (v, _) => v.to_string(),
            };
            out.insert(format!("{id}_q{i}"), answer);
        }
    }
    Ok(out)
}

/// The Porter stemmer as NLTK's `PorterStemmer()` (mode `NLTK_EXTENSIONS`) applies it to lower-case words: Martin
/// Porter's algorithm plus NLTK's irregular forms, `ies`/`ied` on four-letter words, `y`→`i` only after a
/// consonant, and the `fulli`/`lessli`/`logi` rules. Words of one or two letters, and words with non-ASCII
/// letters, are returned as they are.
pub fn porter_stem(word: &str) -> String {
    const IRREGULAR: [(&str, &str); 16] = [
        ("skies", "sky"),
        ("sky", "sky"),
        ("dying", "die"),
        ("lying", "lie"),
        ("tying", "tie"),
        ("news", "news"),
        ("innings", "inning"),
        ("inning", "inning"),
        ("outings", "outing"),
        ("outing", "outing"),
        ("cannings", "canning"),
        ("canning", "canning"),
        ("howe", "howe"),
        ("proceed", "proceed"),
        ("exceed", "exceed"),
        ("succeed", "succeed"),
    ];
    if let Some((_, s)) = IRREGULAR.iter().find(|(w, _)| *w == word) {
        return s.to_string();
    }
    if word.len() <= 2 || !word.bytes().all(|b| b.is_ascii_lowercase()) {
        return word.to_string();
    }
    let mut s = Stemmer { b: word.as_bytes().to_vec() };
    s.step1a();
    s.step1b();
    s.step1c();
    s.step2();
    s.step3();
    s.step4();
    s.step5();
    String::from_utf8(s.b).unwrap_or_default()
}

struct Stemmer {
    b: Vec<u8>,
}

impl Stemmer {
    fn cons(&self, i: usize) -> bool {
        match self.b[i] {
            b'a' | b'e' | b'i' | b'o' | b'u' => false,
            b'y' => i == 0 || !self.cons(i - 1),
            _ => true,
        }
    }

    /// Porter's m: the number of VC sequences in the first `len` letters.
    fn measure(&self, len: usize) -> usize {
        let mut m = 0;
        let mut i = 0;
        while i < len && self.cons(i) {
            i += 1;
        }
        while i < len {
            while i < len && !self.cons(i) {
                i += 1;
            }
            if i >= len {
                break;
            }
            while i < len && self.cons(i) {
                i += 1;
            }
            m += 1;
        }
        m
    }

    fn has_vowel(&self, len: usize) -> bool {
        (0..len).any(|i| !self.cons(i))
    }

    fn double_cons(&self, len: usize) -> bool {
        len >= 2 && self.b[len - 1] == self.b[len - 2] && self.cons(len - 1)
    }

    /// cvc ending at `len - 1`, the last consonant not w, x or y.
    fn cvc(&self, len: usize) -> bool {
        len >= 3
            && self.cons(len - 3)
            && !self.cons(len - 2)
            && self.cons(len - 1)
            && !matches!(self.b[len - 1], b'w' | b'x' | b'y')
    }

    fn ends(&self, suffix: &str) -> bool {
        self.b.ends_with(suffix.as_bytes())
    }

    /// Length of the stem before `suffix` (which the word must end with).
    fn stem_len(&self, suffix: &str) -> usize {
        self.b.len() - suffix.len()
    }

    fn replace(&mut self, suffix: &str, with: &str) {
        let n = self.stem_len(suffix);
        self.b.truncate(n);
        self.b.extend_from_slice(with.as_bytes());
    }

    /// Replaces the first matching suffix of `rules` when the stem's measure exceeds `min_m`; stops at the first
    /// suffix that matches either way.
    fn rules(&mut self, rules: &[(&str, &str)], min_m: usize) -> bool {
        for (suffix, with) in rules {
            if self.ends(suffix) {
                if self.measure(self.stem_len(suffix)) > min_m {
                    self.replace(suffix, with);
                    return true;
                }
                return false;
            }
        }
        false
    }

    fn step1a(&mut self) {
        if self.ends("ies") && self.b.len() == 4 {
            self.replace("ies", "ie");
        } else if self.ends("sses") {
            self.replace("sses", "ss");
        } else if self.ends("ies") {
            self.replace("ies", "i");
        } else if self.ends("ss") {
        } else if self.ends("s") {
            self.b.pop();
        }
    }

    fn step1b(&mut self) {
        if self.ends("ied") {
            let with = if self.b.len() == 4 { "ie" } else { "i" };
            self.replace("ied", with);
            return;
        }
        if self.ends("eed") {
            if self.measure(self.stem_len("eed")) > 0 {
                self.b.pop();
            }
            return;
        }
        let suffix = if self.ends("ed") {
            "ed"
        } else if self.ends("ing") {
            "ing"
        } else {
            return;
        };
        let n = self.stem_len(suffix);
        if !self.has_vowel(n) {
            return;
        }
        self.b.truncate(n);
        if self.ends("at") || self.ends("bl") || self.ends("iz") {
            self.b.push(b'e');
        } else if self.double_cons(self.b.len()) && !matches!(self.b[self.b.len() - 1], b'l' | b's' | b'z') {
            self.b.pop();
        } else if self.measure(self.b.len()) == 1 && self.cvc(self.b.len()) {
            self.b.push(b'e');
        }
    }

    fn step1c(&mut self) {
        let n = self.b.len();
        if self.ends("y") && n > 2 && self.cons(n - 2) {
            self.b[n - 1] = b'i';
        }
    }

    fn step2(&mut self) {
        if self.ends("alli") && self.measure(self.stem_len("alli")) > 0 {
            self.replace("alli", "al");
            self.step2();
            return;
        }
        self.rules(
            &[
                ("ational", "ate"),
                ("tional", "tion"),
                ("enci", "ence"),
                ("anci", "ance"),
                ("izer", "ize"),
                ("bli", "ble"),
                ("alli", "al"),
                ("entli", "ent"),
                ("eli", "e"),
                ("ousli", "ous"),
                ("ization", "ize"),
                ("ation", "ate"),
                ("ator", "ate"),
                ("alism", "al"),
                ("iveness", "ive"),
                ("fulness", "ful"),
                ("ousness", "ous"),
                ("aliti", "al"),
                ("iviti", "ive"),
                ("biliti", "ble"),
                ("fulli", "ful"),
                ("lessli", "less"),
                ("logi", "log"),
            ],
            0,
        );
    }

    fn step3(&mut self) {
        self.rules(
            &[
                ("icate", "ic"),
                ("ative", ""),
                ("alize", "al"),
                ("iciti", "ic"),
                ("ical", "ic"),
                ("ful", ""),
                ("ness", ""),
            ],
            0,
        );
    }

    fn step4(&mut self) {
        const SUFFIXES: [&str; 19] = [
            "al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ion", "ou", "ism", "ate",
            "iti", "ous", "ive", "ize",
        ];
        // The longest matching suffix decides (ement before ment before ent).
        let Some(suffix) = SUFFIXES.iter().filter(|s| self.ends(s)).max_by_key(|s| s.len()) else { return };
        let n = self.stem_len(suffix);
        if *suffix == "ion" && !(n > 0 && matches!(self.b[n - 1], b's' | b't')) {
            return;
        }
        if self.measure(n) > 1 {
            self.b.truncate(n);
        }
    }

    fn step5(&mut self) {
        let n = self.b.len();
        if self.ends("e") {
            let m = self.measure(n - 1);
            if m > 1 || (m == 1 && !self.cvc(n - 1)) {
                self.b.pop();
            }
        }
        let n = self.b.len();
        if self.measure(n) > 1 && self.double_cons(n) && self.b[n - 1] == b'l' {
            self.b.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn porter_stems_the_papers_examples() {
        let cases = [
            ("caresses", "caress"),
            ("ponies", "poni"),
            ("ties", "tie"),
            ("caress", "caress"),
            ("cats", "cat"),
            ("feed", "feed"),
            ("agreed", "agre"),
            ("plastered", "plaster"),
            ("bled", "bled"),
            ("motoring", "motor"),
            ("sing", "sing"),
            ("conflated", "conflat"),
            ("troubled", "troubl"),
            ("sized", "size"),
            ("hopping", "hop"),
            ("tanned", "tan"),
            ("falling", "fall"),
            ("hissing", "hiss"),
            ("fizzed", "fizz"),
            ("failing", "fail"),
            ("filing", "file"),
            ("happy", "happi"),
            ("sky", "sky"),
            ("relational", "relat"),
            ("conditional", "condit"),
            ("rational", "ration"),
            ("digitizer", "digit"),
            ("differentli", "differ"),
            ("vietnamization", "vietnam"),
            ("predication", "predic"),
            ("operator", "oper"),
            ("feudalism", "feudal"),
            ("decisiveness", "decis"),
            ("hopefulness", "hope"),
            ("callousness", "callous"),
            ("formaliti", "formal"),
            ("sensitiviti", "sensit"),
            ("sensibiliti", "sensibl"),
            ("triplicate", "triplic"),
            ("formative", "form"),
            ("formalize", "formal"),
            ("electrical", "electr"),
            ("hopeful", "hope"),
            ("goodness", "good"),
            ("revival", "reviv"),
            ("allowance", "allow"),
            ("inference", "infer"),
            ("airliner", "airlin"),
            ("adjustable", "adjust"),
            ("defensible", "defens"),
            ("irritant", "irrit"),
            ("replacement", "replac"),
            ("adjustment", "adjust"),
            ("dependent", "depend"),
            ("adoption", "adopt"),
            ("communism", "commun"),
            ("activate", "activ"),
            ("homologous", "homolog"),
            ("effective", "effect"),
            ("bowdlerize", "bowdler"),
            ("probate", "probat"),
            ("rate", "rate"),
            ("cease", "ceas"),
            ("controll", "control"),
            ("roll", "roll"),
            ("generously", "gener"),
            ("dying", "die"),
            ("lies", "lie"),
            ("cried", "cri"),
            ("painting", "paint"),
            ("adoption", "adopt"),
            ("2023", "2023"),
            ("is", "is"),
        ];
        for (word, stem) in cases {
            assert_eq!(porter_stem(word), stem, "{word}");
        }
    }

    #[test]
    fn normalisation_follows_locomo() {
        assert_eq!(normalize_answer("The cat, and a Dog!"), "cat dog");
        assert_eq!(normalize_answer("  7 May 2023. "), "7 may 2023");
    }

    #[test]
    fn f1_on_known_inputs() {
        assert_eq!(f1_score("7 May 2023", "7 May 2023"), 1.0);
        // Stems match across inflections: "paintings" ~ "painting".
        assert_eq!(f1_score("Paintings", "painting"), 1.0);
        // pred {went, to, paris} vs gold {paris}: P = 1/3, R = 1 → F1 = 0.5.
        assert!((f1_score("went to Paris", "Paris") - 0.5).abs() < 1e-12);
        assert_eq!(f1_score("London", "Paris"), 0.0);
        assert_eq!(f1_score("", "Paris"), 0.0);
        // Multi-hop: gold parts {pottery, camping}; predictions {pottery, swimming} → (1 + 0) / 2.
        assert!((locomo_f1("1", "pottery, swimming", "pottery, camping") - 0.5).abs() < 1e-12);
        // Category 3 keeps the gold's first `;` part.
        assert_eq!(locomo_f1("3", "likely yes", "likely yes; she enjoys it"), 1.0);
        assert_eq!(locomo_f1("5", "No information available.", "anything"), 1.0);
        assert_eq!(locomo_f1("5", "Yes, in May", "anything"), 0.0);
    }

    #[test]
    fn bleu1_on_known_inputs() {
        assert!((bleu1("the cat sat", "the cat sat") - 1.0).abs() < 1e-12);
        // 2 of 4 predicted tokens match; prediction longer than reference: no brevity penalty.
        assert!((bleu1("a cat on mat", "the cat mat") - 0.5).abs() < 1e-12);
        // Shorter than the reference: BP = exp(1 - 4/2); precision 1.
        assert!((bleu1("cat sat", "the cat sat down") - (1.0f64 - 2.0).exp()).abs() < 1e-12);
        // No match: smoothing gives 0.1 / len.
        assert!((bleu1("dog", "cat") - 0.1).abs() < 1e-12);
        assert_eq!(bleu_tokens("May 7, 2023."), vec!["may", "7", ",", "2023", "."]);
    }

    #[test]
    fn report_averages_per_category_and_counts_spend() {
        let mut a = QaRecord::scored("q1", "4", "q", "Paris", "Paris");
        a.judge = Some(true);
        a.calls = 2;
        a.usage = Usage { input_tokens: 100, output_tokens: 10, estimated: false };
        let mut b = QaRecord::scored("q2", "4", "q", "Paris", "London");
        b.judge = Some(false);
        b.calls = 2;
        b.usage = Usage { input_tokens: 300, output_tokens: 30, estimated: false };
        let c = QaRecord::scored("q3", "5", "q", "x", "Not mentioned in the conversation");
        let r = report(&[a, b, c]);
        let cat4 = &r.per_category["4"];
        assert_eq!((cat4.n, cat4.f1, cat4.judge, cat4.judged), (2, 50.0, Some(50.0), 2));
        assert_eq!((cat4.calls_per_question, cat4.input_tokens_per_question), (2.0, 200.0));
        assert_eq!(r.per_category["5"].f1, 100.0);
        assert_eq!(r.per_category["5"].judge, None);
        assert!((r.overall.f1 - 200.0 / 3.0).abs() < 1e-9);
        assert_eq!(r.overall.judged, 2);
    }

    #[test]
    fn judge_reads_the_verdict() {
        let llm = crate::llm::ScriptedLlm::new([Ok("```json\n{\"label\": \"CORRECT\"}\n```".to_string())]);
        let r = pollster::block_on(judge(&llm, "Where?", "Paris", "In Paris")).unwrap();
        assert!(r.value.is_correct());
        assert!(llm.requests.borrow()[0].messages[1].content.contains("Gold answer: Paris"));
    }
}
