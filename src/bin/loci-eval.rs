//! `loci-eval`: the retrieval benchmark, natively (BENCHMARK_PROTOCOL.md).
//!
//! ```text
//! cargo run --release --bin loci-eval -- locomo --data ../shared/data/locomo/locomo10.json [--method M|all] [--json PATH]
//! cargo run --release --bin loci-eval -- longmemeval --data FILE [--method M|all] [--json PATH]
//! ```
//!
//! It ingests each corpus through the library itself — one [`Memory`] over a [`MemStore`] per LoCoMo conversation
//! (per LongMemEval question), `add_messages` per session — and ranks with `Memory::recall`, so the figures are
//! those of the product's code path. The only thing added here is a cache of window embeddings on disk
//! (`target/loci-eval-cache/`, keyed by the model file's hash and the window's token ids) so that iterating on
//! ranking methods does not re-run the model; its hits are bit-identical to the model's output. The commands with
//! an LLM can keep the endpoint's answers too (`--llm-cache FILE`, [`loci::llm::native::ReplayTransport`]), so
//! that a run with a real model, hours long here, resumes where it stopped.
//!
//! Native only: on wasm32 this binary is an empty `main`.

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    if let Err(e) = cli::main() {
        eprintln!("loci-eval: {e}");
        std::process::exit(1);
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod cli {
    use std::cell::{Cell, RefCell};
    use std::collections::{BTreeMap, HashMap, HashSet};
    use std::io::{Read, Write};
    use std::path::{Path, PathBuf};
    use std::rc::Rc;
    use std::time::Instant;

    use async_trait::async_trait;
    use indicatif::{ProgressBar, ProgressStyle};
    use loci::embed::{
        default_dylib_path, model_dir, Batch, Device, EmbedConfig, Embedder, ModelSpec, OnnxRuntime, Pooling, Runtime,
        DIM,
    };
    use loci::eval::qa::QaMode;
    use loci::eval::report::{aggregate, QuestionResult, Report};
    use loci::eval::{locomo, longmemeval, EvalCorpus, GroundTruth};
    use loci::index::vectors::Precision;
    use loci::llm::native::{ReplayTransport, UreqTransport};
    use loci::llm::openai::{OpenAiClient, OpenAiConfig};
    use loci::memory::{DistilledSources, Memory, MemoryConfig, RecallOptions};
    use loci::recall::{self, RecallMethod};
    use loci::store::MemStore;
    use loci::text::WordPiece;
    use loci::types::{MessageInput, TimeInput, UnitMode};
    use pollster::block_on;
    use serde_json::{json, Map, Value};

    const USAGE: &str = "usage: loci-eval (locomo|longmemeval) --data FILE [--method NAME|all] [--json PATH]
       loci-eval prune --data LOCOMO_FILE [--budget RATIO] [--neighbours N] [--json PATH]
       loci-eval qa --data LOCOMO_FILE --llm-base-url URL --llm-model NAME [--llm-api-key KEY]
                    [--llm-context-tokens N] [--judge-base-url URL --judge-model NAME [--judge-api-key KEY]]
                    [--prune llm|llm-spans|extractive|none|nomemory|distilled] [--limit N | --per-category N]
                    [--max-questions N] [--conversations N] [--sessions N] [--stream on|off] [--json PATH]
       loci-eval distill --data LOCOMO_FILE --llm-base-url URL --llm-model NAME [--llm-context-tokens N]
                    [--sessions N] [--predict-threshold COSINE] [--json PATH]
       loci-eval distill-quality --data LOCOMO_FILE --llm-base-url URL --llm-model NAME [--llm-context-tokens N]
                    [--conversations N] [--skip-conversations K] [--sessions N] [--judge on|off] [--qa N]
                    [--qa-modes distilled,episodes_and_facts,recall_top3_unpruned] [--json PATH]
       loci-eval expand --data LOCOMO_FILE --llm-base-url URL --llm-model NAME [--category N|all] [--limit N] [--cache JSONL]
                    [--json PATH]
       loci-eval bridge --data LOCOMO_FILE --llm-base-url URL --llm-model NAME [--conversations N] [--sessions N]
                    [--json PATH]
       loci-eval redteam --llm-base-url URL --llm-model NAME [--llm-context-tokens N] [--json PATH]
       [--variant paper|clean|both] [--units pair|single] [--no-truncate] [--threads N] [--no-cache] [--limit N] [--vectors int8|f32]
       [--per-question JSONL] [--model MODEL.onnx] [--batch N] [--embedder minilm|bge-small] [--query-prefix on|off]
       loci-eval query-cost --data LOCOMO_FILE [--limit N] [--threads N]   (query embedding ms, MiniLM and bge-small)
       with an LLM: --llm-cache JSONL (and --judge-cache JSONL) keeps the endpoint's answers and replays them, so that a
       stopped run resumes where it stopped
methods: default (the library default), tir, tir-sum-N, turn-mean, bm25, hybrid, session (whole session embedded)";

    struct Args {
        dataset: String,
        data: PathBuf,
        methods: Vec<Method>,
        json: Option<PathBuf>,
        unit_mode: UnitMode,
        truncate: bool,
        threads: usize,
        cache: bool,
        limit: Option<usize>,
        variant: Option<GroundTruth>,
        vectors: Precision,
        per_question: Option<PathBuf>,
        /// Another model file than the shipped one (experiments: bench/quantize_model.py).
        model: Option<PathBuf>,
        batch: usize,
        /// Which embedder (`--embedder`): its files, pooling and query prefix.
        spec: ModelSpec,
        /// `--query-prefix off`: the model's query instruction left out (an experiment).
        query_prefix: bool,
    }

    /// A benchmarked method: one of the library's, or the session-level baseline (whole session embedded).
    #[derive(Clone, Copy, PartialEq)]
    enum Method {
        Library { method: RecallMethod, is_default: bool },
        SessionLevel,
    }

    impl Method {
        fn key(self) -> String {
            match self {
                Method::Library { is_default: true, .. } => "default".into(),
                Method::Library { method, .. } => method.name(),
                Method::SessionLevel => "session".into(),
            }
        }
        fn label(self) -> String {
            match self {
                Method::Library { method, is_default: true } => format!("default ({})", method.name()),
                m => m.key(),
            }
        }
    }

    fn parse_method(s: &str) -> Result<Vec<Method>, String> {
        let default = Method::Library { method: RecallMethod::default(), is_default: true };
        Ok(match s {
            "all" => {
                let mut v = vec![default, Method::SessionLevel];
                v.extend(
                    RecallMethod::ALL
                        .into_iter()
                        .filter(|&m| m != RecallMethod::default())
                        .map(|method| Method::Library { method, is_default: false }),
                );
                v
            }
            "default" => vec![default],
            "session" => vec![Method::SessionLevel],
            name => {
                let method: RecallMethod = name.parse()?;
                vec![Method::Library { method, is_default: false }]
            }
        })
    }

    fn parse_args() -> Result<Args, String> {
        let mut it = std::env::args().skip(1);
        let dataset = it.next().ok_or(USAGE)?;
        if dataset != "locomo" && dataset != "longmemeval" {
            return Err(USAGE.into());
        }
        let mut args = Args {
            dataset,
            data: PathBuf::new(),
            methods: parse_method("default")?,
            json: None,
            unit_mode: UnitMode::Pair,
            truncate: true,
            threads: 1,
            cache: true,
            limit: None,
            variant: None,
            vectors: Precision::default(),
            per_question: None,
            model: None,
            batch: EmbedConfig::default().batch_size,
            spec: ModelSpec::MINILM,
            query_prefix: true,
        };
        while let Some(a) = it.next() {
            let mut value = || it.next().ok_or_else(|| format!("{a} needs a value\n{USAGE}"));
            match a.as_str() {
                "--data" => args.data = value()?.into(),
                "--method" => {
                    let v = value()?;
                    args.methods = v.split(',').map(parse_method).collect::<Result<Vec<_>, _>>()?.concat();
                }
                "--json" => args.json = Some(value()?.into()),
                "--per-question" => args.per_question = Some(value()?.into()),
                "--units" => {
                    args.unit_mode = match value()?.as_str() {
                        "pair" => UnitMode::Pair,
                        "single" => UnitMode::Single,
                        u => return Err(format!("--units {u}: pair or single")),
                    }
                }
                "--variant" => {
                    args.variant = match value()?.as_str() {
                        "paper" => Some(GroundTruth::Paper),
                        "clean" => Some(GroundTruth::Clean),
                        "both" => None,
                        v => return Err(format!("--variant {v}: paper, clean or both")),
                    }
                }
                "--no-truncate" => args.truncate = false,
                "--threads" => args.threads = value()?.parse().map_err(|_| "--threads N")?,
                "--no-cache" => args.cache = false,
                "--vectors" => {
                    args.vectors = match value()?.as_str() {
                        "int8" => Precision::Int8,
                        "f32" => Precision::F32,
                        v => return Err(format!("--vectors {v}: int8 or f32")),
                    }
                }
                "--limit" => args.limit = Some(value()?.parse().map_err(|_| "--limit N")?),
                "--model" => args.model = Some(value()?.into()),
                "--batch" => args.batch = value()?.parse().map_err(|_| "--batch N")?,
                "--embedder" => args.spec = embedder_spec(&value()?)?,
                "--query-prefix" => {
                    args.query_prefix = match value()?.as_str() {
                        "on" => true,
                        "off" => false,
                        v => return Err(format!("--query-prefix {v}: on or off")),
                    }
                }
                "-h" | "--help" => return Err(USAGE.into()),
                _ => return Err(format!("unknown argument {a}\n{USAGE}")),
            }
        }
        if args.data.as_os_str().is_empty() {
            return Err(format!("--data is required\n{USAGE}"));
        }
        Ok(args)
    }

    /// The embedders `--embedder` names.
    fn embedder_spec(name: &str) -> Result<ModelSpec, String> {
        match name {
            "minilm" => Ok(ModelSpec::MINILM),
            "bge-small" => Ok(ModelSpec::BGE_SMALL),
            n => Err(format!("--embedder {n}: minilm or bge-small (`node scripts/setup.mjs bge-small` fetches it)")),
        }
    }

    pub fn main() -> Result<(), String> {
        match std::env::args().nth(1).as_deref() {
            Some("query-cost") => return query_cost_main(),
            Some("prune") => return prune_main(),
            Some("qa") => return qa_main(),
            Some("distill") => return distill_main(),
            Some("distill-quality") => return distill_quality_main(),
            Some("redteam") => return redteam_main(),
            Some("screen") => return screen_main(),
            Some("expand") => return expand_main(),
            Some("bridge") => return bridge_main(),
            _ => {}
        }
        let args = parse_args()?;
        let load = |gt| match args.dataset.as_str() {
            "locomo" => locomo::load(&args.data, gt),
            _ => longmemeval::load(&args.data, gt),
        };
        let mut variants: Vec<(GroundTruth, Vec<EvalCorpus>)> =
            vec![(GroundTruth::Paper, load(GroundTruth::Paper)?), (GroundTruth::Clean, load(GroundTruth::Clean)?)];
        if let Some(v) = args.variant {
            variants.retain(|(gt, _)| *gt == v);
        }
        if let Some(n) = args.limit {
            variants.iter_mut().for_each(|(_, c)| c.truncate(n));
        }
        let label: fn(&str) -> Option<&'static str> =
            if args.dataset == "locomo" { locomo::category_name } else { |_| None };

        let (tokenizer, runtime) =
            model_runtime_of(&args.spec, args.threads, args.cache, args.model.as_deref(), args.batch)?;
        let embed = EmbedConfig {
            truncate: args.truncate,
            batch_size: args.batch,
            query_prefix: if args.query_prefix { args.spec.query_prefix } else { "" },
            ..args.spec.embed_config()
        };
        eprintln!("embedder {} ({:?} pooling, query prefix {:?})", args.spec.id, embed.pooling, embed.query_prefix);
        let config =
            MemoryConfig { unit_mode: args.unit_mode, embed, vectors: args.vectors, ..MemoryConfig::default() };
        let embedder = || Embedder::new(tokenizer.clone(), runtime.clone(), embed).map_err(|e| e.to_string());

        // Ingest every corpus once (the variants share their sessions; only the questions differ).
        let corpora = &variants[0].1;
        let (mut memories, embed_seconds, n_sessions, n_units) = ingest(corpora, &embedder, config, &runtime)?;
        let cache_hits = runtime.0.borrow().counts().0;

        // Session-level baseline vectors, only when asked for.
        let mut session_vectors: HashMap<String, (Vec<f32>, Vec<u32>)> = HashMap::new();
        if args.methods.contains(&Method::SessionLevel) {
            let mut e = embedder()?;
            for corpus in corpora {
                let texts: Vec<String> = corpus
                    .sessions
                    .iter()
                    .map(|s| s.turns.iter().map(|t| t.utterance()).collect::<Vec<_>>().join("\n"))
                    .collect();
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                let windows = block_on(e.embed(&refs)).map_err(|e| e.to_string())?;
                let rows = windows.iter().map(|w| w.text as u32).collect();
                session_vectors.insert(corpus.id.clone(), (windows.into_iter().flat_map(|w| w.vector).collect(), rows));
            }
            runtime.0.borrow_mut().save()?;
        }

        let mut dump = match &args.per_question {
            Some(p) => {
                Some(std::io::BufWriter::new(std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?))
            }
            None => None,
        };
        let mut out = Map::new();
        for (gt, corpora) in &variants {
            let n_questions: usize = corpora.iter().map(|c| c.questions.len()).sum();
            let mut per_method = Map::new();
            let mut summary: Vec<(String, Report)> = Vec::new();
            for &method in &args.methods {
                let bar = progress(n_questions as u64, &format!("{} {}", gt.name(), method.label()));
                let mut results = Vec::with_capacity(n_questions);
                let started = Instant::now();
                for corpus in corpora {
                    let memory = memories.get_mut(&corpus.id).ok_or("corpus missing")?;
                    for q in &corpus.questions {
                        let ranking = match method {
                            Method::Library { method, .. } => {
                                let options =
                                    RecallOptions { k: 10, units_per_session: 1, chronological: false, method };
                                let r = block_on(memory.recall(&q.question, options)).map_err(|e| e.to_string())?;
                                r.sessions.into_iter().map(|s| s.id).collect()
                            }
                            Method::SessionLevel => {
                                let (vectors, rows) = &session_vectors[&corpus.id];
                                let qv = block_on(memory_embedder_query(&runtime, &tokenizer, embed, &q.question))?;
                                let scores: Vec<f32> = vectors
                                    .chunks_exact(DIM)
                                    .map(|v| v.iter().zip(&qv).map(|(a, b)| a * b).sum())
                                    .collect();
                                recall::tir(&scores, rows, 10, 1)
                                    .into_iter()
                                    .map(|s| corpus.sessions[s.session as usize].id.clone())
                                    .collect()
                            }
                        };
                        if let Some(f) = dump.as_mut() {
                            let line = json!({"variant": gt.name(), "method": method.key(), "corpus": corpus.id,
                                "id": q.id, "category": q.category, "question": q.question,
                                "gold": q.gold_sessions, "ranking": ranking});
                            writeln!(f, "{line}").map_err(|e| e.to_string())?;
                        }
                        results.push(QuestionResult::new(q, ranking));
                        bar.inc(1);
                    }
                }
                let seconds = started.elapsed().as_secs_f64();
                bar.finish_and_clear();
                let report = aggregate(&results);
                let mut entry = match serde_json::to_value(&report.overall) {
                    Ok(Value::Object(m)) => m,
                    _ => return Err("scores did not serialise as a map".into()),
                };
                entry.insert("per_category".into(), report.to_json()["per_category"].clone());
                if let Method::Library { method, .. } = method {
                    entry.insert("method".into(), json!(method.name()));
                }
                entry.insert("questions".into(), json!(n_questions));
                entry.insert("corpora".into(), json!(corpora.len()));
                entry.insert("sessions".into(), json!(n_sessions));
                entry.insert("units".into(), json!(n_units));
                entry.insert("unit_mode".into(), json!(args.unit_mode));
                entry.insert("truncate".into(), json!(args.truncate));
                entry.insert("embed_seconds".into(), json!(round3(embed_seconds)));
                entry.insert("embed_cache_hits".into(), json!(cache_hits));
                entry.insert("ms_per_query".into(), json!(round3(seconds * 1000.0 / n_questions.max(1) as f64)));
                entry.insert("embedder".into(), json!(args.spec.id));
                entry.insert("query_prefix".into(), json!(embed.query_prefix));
                per_method.insert(method.key(), Value::Object(entry));
                println!("{}", report.format_table(&format!("{} — {}", gt.name(), method.label()), label));
                summary.push((method.label(), report));
            }
            if summary.len() > 1 {
                println!("{}", summary_table(gt.name(), &summary));
            }
            out.insert(gt.name().into(), Value::Object(per_method));
        }
        if let Some(path) = &args.json {
            let text = serde_json::to_string_pretty(&Value::Object(out)).map_err(|e| e.to_string())?;
            std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
        runtime.0.borrow_mut().save()?;
        Ok(())
    }

    async fn memory_embedder_query(
        runtime: &SharedRuntime,
        tokenizer: &WordPiece,
        config: EmbedConfig,
        text: &str,
    ) -> Result<Vec<f32>, String> {
        let mut e = Embedder::new(tokenizer.clone(), runtime.clone(), config).map_err(|e| e.to_string())?;
        e.embed_query(text).await.map_err(|e| e.to_string())
    }

    fn round3(x: f64) -> f64 {
        (x * 1000.0).round() / 1000.0
    }

    /// One line per method: the headline metrics and multi-hop (LoCoMo category 1).
    fn summary_table(variant: &str, rows: &[(String, Report)]) -> String {
        let mut s = format!(
            "{variant}: {:<22} {:>12} {:>11} {:>12} {:>13} {:>14}\n",
            "method", "recall_all@3", "ndcg_any@3", "recall_all@5", "recall_all@10", "multi-hop r@3"
        );
        for (name, r) in rows {
            let cat1 = r.per_category.iter().find(|(c, _)| c == "1").and_then(|(_, s)| s.get("recall_all@3"));
            s.push_str(&format!(
                "{:w$}  {name:<22} {:>12.2} {:>11.2} {:>12.2} {:>13.2} {:>14}\n",
                "",
                r.overall.get("recall_all@3").unwrap_or(f64::NAN),
                r.overall.get("ndcg_any@3").unwrap_or(f64::NAN),
                r.overall.get("recall_all@5").unwrap_or(f64::NAN),
                r.overall.get("recall_all@10").unwrap_or(f64::NAN),
                cat1.map_or("-".into(), |v| format!("{v:.2}")),
                w = variant.len()
            ));
        }
        s
    }

    /// The `q` quantile of `xs` (sorted in place), nearest rank.
    fn percentile(xs: &mut [f64], q: f64) -> f64 {
        xs.sort_by(f64::total_cmp);
        xs[((xs.len() - 1) as f64 * q).round() as usize]
    }

    /// The default embedder's runtime (see [`model_runtime_of`]).
    fn model_runtime(
        threads: usize,
        cache: bool,
        model: Option<&Path>,
        batch: usize,
    ) -> Result<(WordPiece, SharedRuntime), String> {
        model_runtime_of(&ModelSpec::MINILM, threads, cache, model, batch)
    }

    /// A model (`spec`'s from setup's asset folder, unless `model` names another file) with the on-disk window
    /// cache, shared by every memory of a run. The cache is keyed by the model's bytes, the pooling past mean, and,
    /// past the default, the batch size: a model that quantizes activations per call gives a window different
    /// vectors in different batches.
    fn model_runtime_of(
        spec: &ModelSpec,
        threads: usize,
        cache: bool,
        model: Option<&Path>,
        batch: usize,
    ) -> Result<(WordPiece, SharedRuntime), String> {
        let model_dir = model_dir(spec);
        let setup = if *spec == ModelSpec::MINILM { "native" } else { "bge-small" };
        let model_path = model.map_or_else(|| model_dir.join("model.onnx"), Path::to_path_buf);
        let model = std::fs::read(&model_path)
            .map_err(|e| format!("{}: {e}; run `node scripts/setup.mjs {setup}`", model_path.display()))?;
        let tokenizer = std::fs::read_to_string(model_dir.join("tokenizer.json")).map_err(|e| e.to_string())?;
        let tokenizer = WordPiece::from_tokenizer_json(&tokenizer).map_err(|e| e.to_string())?;
        let dylib = default_dylib_path().ok_or("no onnxruntime library; run `node scripts/setup.mjs native`")?;
        let ort = OnnxRuntime::native(&model, &dylib, threads).map_err(|e| e.to_string())?;
        let pooling = match spec.pooling {
            Pooling::Mean => "",
            Pooling::Cls => "-cls",
        };
        let cache_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("target").join("loci-eval-cache").join(
            if batch == EmbedConfig::default().batch_size {
                format!("{:016x}{pooling}.bin", fnv1a(FNV_OFFSET, &model))
            } else {
                format!("{:016x}{pooling}-batch{batch}.bin", fnv1a(FNV_OFFSET, &model))
            },
        );
        let cached = CachedRuntime::new(ort, cache.then_some(cache_path))?.pooling(spec.pooling);
        let runtime = SharedRuntime(Rc::new(RefCell::new(cached)));
        Ok((tokenizer, runtime))
    }

    type Memories = HashMap<String, Memory<MemStore, SharedRuntime>>;

    /// One memory per corpus, filled through the library's own ingestion. Returns the memories, the seconds spent,
    /// and the sessions and units stored.
    fn ingest(
        corpora: &[EvalCorpus],
        embedder: &dyn Fn() -> Result<Embedder<SharedRuntime>, String>,
        config: MemoryConfig,
        runtime: &SharedRuntime,
    ) -> Result<(Memories, f64, usize, usize), String> {
        let units_total: usize = corpora.iter().flat_map(|c| &c.sessions).map(|s| s.turns.len()).sum();
        let bar = progress(units_total as u64, "ingest (turns)");
        let started = Instant::now();
        let mut memories: HashMap<String, Memory<MemStore, SharedRuntime>> = HashMap::new();
        let (mut n_sessions, mut n_units) = (0, 0);
        for corpus in corpora {
            let mut memory = block_on(Memory::open(MemStore::new(), embedder()?, config)).map_err(|e| e.to_string())?;
            for (i, session) in corpus.sessions.iter().enumerate() {
                let time = session_time(&session.date).unwrap_or(i as f64 * 86_400_000.0);
                let messages = session_messages(session, time, 1000.0);
                block_on(memory.add_messages(&messages, Some(&session.id), time))
                    .map_err(|e| format!("{} {}: {e}", corpus.id, session.id))?;
                bar.inc(session.turns.len() as u64);
            }
            // Long turns' other windows, which the product embeds in the background: every question sees them all.
            block_on(memory.embed_pending()).map_err(|e| format!("{}: {e}", corpus.id))?;
            let stats = memory.stats();
            n_sessions += stats.sessions;
            n_units += stats.units;
            memories.insert(corpus.id.clone(), memory);
        }
        bar.finish_and_clear();
        let embed_seconds = started.elapsed().as_secs_f64();
        runtime.0.borrow_mut().save()?;
        let (hits, misses) = runtime.0.borrow().counts();
        eprintln!(
            "ingested {} corpora, {n_sessions} sessions, {n_units} units in {embed_seconds:.1} s \
             (window cache: {hits} hits, {misses} model runs)",
            corpora.len()
        );

        Ok((memories, embed_seconds, n_sessions, n_units))
    }

    /// `--name value` options of the subcommands (`--data` is required where it is known).
    fn options(known: &[&str]) -> Result<HashMap<String, String>, String> {
        let mut out = HashMap::new();
        let mut it = std::env::args().skip(2);
        while let Some(a) = it.next() {
            let name = a
                .strip_prefix("--")
                .filter(|n| known.contains(n))
                .ok_or_else(|| format!("unknown argument {a}\n{USAGE}"))?;
            out.insert(name.to_string(), it.next().ok_or_else(|| format!("{a} needs a value"))?);
        }
        if known.contains(&"data") && !out.contains_key("data") {
            return Err(format!("--data is required\n{USAGE}"));
        }
        Ok(out)
    }

    fn write_json(path: Option<&String>, value: &Value) -> Result<(), String> {
        if let Some(p) = path {
            std::fs::write(p, serde_json::to_string_pretty(value).map_err(|e| e.to_string())?)
                .map_err(|e| format!("{p}: {e}"))?;
            eprintln!("wrote {p}");
        }
        Ok(())
    }

    /// What embedding one query costs natively, per model: each LoCoMo question (the first `--limit`, default all) is
    /// embedded as `recall` embeds a query (the model's prefix included), one call each, with no cache, the models
    /// taking turns question by question so that other load on the machine falls on both alike. Reports the p50,
    /// p90 and mean milliseconds and the download of each model.
    fn query_cost_main() -> Result<(), String> {
        let o = options(&["data", "limit", "threads", "json"])?;
        let corpora = locomo::load(Path::new(&o["data"]), GroundTruth::Paper)?;
        let mut questions: Vec<&str> = corpora.iter().flat_map(|c| &c.questions).map(|q| q.question.as_str()).collect();
        if let Some(n) = o.get("limit") {
            questions.truncate(n.parse().map_err(|_| "--limit N")?);
        }
        if questions.is_empty() {
            return Err("no questions".into());
        }
        let threads: usize = o.get("threads").map_or(Ok(1), |n| n.parse()).map_err(|_| "--threads N")?;
        let dylib = default_dylib_path().ok_or("no onnxruntime library; run `node scripts/setup.mjs native`")?;
        let specs = [ModelSpec::MINILM, ModelSpec::BGE_SMALL];
        let mut embedders = Vec::new();
        let mut bytes = Vec::new();
        for spec in &specs {
            let dir = model_dir(spec);
            let read = |f: &str| std::fs::read(dir.join(f)).map_err(|e| format!("{}/{f}: {e}", dir.display()));
            let (model, tokenizer) = (read("model.onnx")?, read("tokenizer.json")?);
            bytes.push(model.len() + tokenizer.len());
            let tokenizer =
                WordPiece::from_tokenizer_json(&String::from_utf8_lossy(&tokenizer)).map_err(|e| e.to_string())?;
            let runtime = OnnxRuntime::native(&model, &dylib, threads).map_err(|e| e.to_string())?;
            embedders.push(Embedder::new(tokenizer, runtime, spec.embed_config()).map_err(|e| e.to_string())?);
        }
        let mut ms: Vec<Vec<f64>> = vec![Vec::with_capacity(questions.len()); specs.len()];
        // Warm-up (first calls allocate), not counted.
        for q in questions.iter().take(10) {
            for e in embedders.iter_mut() {
                block_on(e.embed_query(q)).map_err(|e| e.to_string())?;
            }
        }
        let bar = progress(questions.len() as u64, "query embedding");
        for q in &questions {
            for (e, ms) in embedders.iter_mut().zip(ms.iter_mut()) {
                let t = Instant::now();
                block_on(e.embed_query(q)).map_err(|e| e.to_string())?;
                ms.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
        let mut out = Map::new();
        println!("query embedding, {} LoCoMo questions, {threads} thread(s), native CPU", questions.len());
        for ((spec, ms), bytes) in specs.iter().zip(ms.iter_mut()).zip(&bytes) {
            let mean = ms.iter().sum::<f64>() / ms.len().max(1) as f64;
            let (p50, p90) = (percentile(ms, 0.5), percentile(ms, 0.9));
            println!("  {:<34} p50 {p50:7.2} ms  p90 {p90:7.2} ms  mean {mean:7.2} ms  download {bytes} B", spec.id);
            out.insert(
                spec.id.into(),
                json!({"p50_ms": round3(p50), "p90_ms": round3(p90), "mean_ms": round3(mean),
                    "download_bytes": bytes, "query_prefix": spec.query_prefix, "questions": ms.len(),
                    "threads": threads}),
            );
        }
        write_json(o.get("json"), &Value::Object(out))
    }

    /// The extractive pruning benchmark: of the questions whose gold session was retrieved, the share whose gold
    /// evidence turns survive pruning, against the tokens kept relative to the unpruned top k.
    fn prune_main() -> Result<(), String> {
        let o = options(&["data", "budget", "neighbours", "json"])?;
        let corpora = locomo::load(Path::new(&o["data"]), GroundTruth::Clean)?;
        let mut bench = loci::eval::prune_bench::PruneBenchOptions::default();
        if let Some(b) = o.get("budget") {
            bench.extractive.budget_ratio = b.parse().map_err(|_| "--budget RATIO (0–1)")?;
        }
        if let Some(n) = o.get("neighbours") {
            bench.extractive.neighbours = n.parse().map_err(|_| "--neighbours N")?;
        }
        let (tokenizer, runtime) = model_runtime(2, true, None, EmbedConfig::default().batch_size)?;
        let mut embedder =
            Embedder::new(tokenizer, runtime.clone(), EmbedConfig::default()).map_err(|e| e.to_string())?;
        let n: usize = corpora.iter().map(|c| c.questions.len()).sum();
        let bar = progress(corpora.len() as u64, &format!("prune ({n} questions)"));
        let report = block_on(loci::eval::prune_bench::run(&corpora, &mut embedder, &bench, |done, _| {
            bar.set_position(done as u64)
        }))
        .map_err(|e| e.to_string())?;
        bar.finish_and_clear();
        runtime.0.borrow_mut().save()?;
        println!(
            "extractive pruning (k = {}, budget {}, neighbours {}): evidence kept {:.1}% at {:.1}% of the tokens \
             ({} questions counted, {} with evidence outside the top k)",
            report.k,
            report.budget_ratio,
            report.neighbours,
            report.evidence_kept * 100.0,
            report.token_ratio * 100.0,
            report.n,
            report.not_retrieved
        );
        for (category, score) in &report.per_category {
            let name = locomo::category_name(category).unwrap_or(category);
            println!(
                "  {name:<12} n={:<5} evidence kept {:.1}%  tokens {:.1}%",
                score.n,
                score.evidence_kept * 100.0,
                score.token_ratio * 100.0
            );
        }
        write_json(o.get("json"), &serde_json::to_value(&report).map_err(|e| e.to_string())?)
    }

    /// The eval's HTTP transport: `ureq`, and with `--llm-cache FILE` a replay of the endpoint's earlier answers
    /// (a real model takes hours to distil a conversation here: a stopped run resumes where it stopped).
    type EvalTransport = ReplayTransport<UreqTransport>;

    fn llm_client(o: &HashMap<String, String>, prefix: &str) -> Result<Option<OpenAiClient<EvalTransport>>, String> {
        let (Some(url), Some(model)) = (o.get(&format!("{prefix}-base-url")), o.get(&format!("{prefix}-model"))) else {
            return Ok(None);
        };
        let transport = match o.get(&format!("{prefix}-cache")) {
            Some(path) => {
                let t = ReplayTransport::open(UreqTransport::new(), Path::new(path)).map_err(|e| e.to_string())?;
                eprintln!("LLM replay cache {path}: {} answers", t.answers());
                t
            }
            None => ReplayTransport::passthrough(UreqTransport::new()),
        };
        let mut config = OpenAiConfig::new(url.clone(), model.clone());
        config.api_key = o.get(&format!("{prefix}-api-key")).cloned();
        config.timeout_ms = 600_000; // a small local model on one thread takes minutes for a long prompt
        if let Some(c) = o.get(&format!("{prefix}-context-tokens")) {
            config.context_tokens = c.parse().map_err(|_| format!("--{prefix}-context-tokens N"))?;
        }
        OpenAiClient::new(config, transport).map(Some).map_err(|e| e.to_string())
    }

    /// Says how much of the run its replay cache answered (nothing without `--llm-cache`).
    fn report_replay(llm: &OpenAiClient<EvalTransport>) {
        if let Some(path) = llm.transport().path() {
            let (replayed, called) = llm.transport().counts();
            eprintln!("LLM replay cache {}: {replayed} answers replayed, {called} calls made", path.display());
        }
    }

    /// LoCoMo QA: each question answered by `Memory::answer` (recall + pruning + generation with the user's LLM),
    /// scored with F1 and BLEU-1 against the gold answer and, with a judge, LLM-judge accuracy.
    fn qa_main() -> Result<(), String> {
        let o = options(&[
            "data",
            "llm-base-url",
            "llm-model",
            "llm-api-key",
            "llm-context-tokens",
            "llm-cache",
            "judge-base-url",
            "judge-model",
            "judge-api-key",
            "judge-cache",
            "prune",
            "limit",
            "per-category",
            "max-questions",
            "conversations",
            "sessions",
            "stream",
            "json",
        ])?;
        let llm = llm_client(&o, "llm")?.ok_or("--llm-base-url and --llm-model are required")?;
        let judge = llm_client(&o, "judge")?;
        let stream = match o.get("stream").map(String::as_str) {
            None | Some("off") => false,
            Some("on") => true,
            Some(_) => return Err("--stream on|off".into()),
        };
        let path = Path::new(&o["data"]);
        let mut corpora = locomo::load(path, GroundTruth::Clean)?;
        let answers = loci::eval::qa::locomo_answers(path)?;
        if let Some(n) = o.get("conversations") {
            corpora.truncate(n.parse().map_err(|_| "--conversations N (the first N conversations)")?);
        }
        // `--sessions N`: each memory holds its conversation's first N sessions, and only the questions whose every
        // evidence session is among them are asked (what a distilled memory of part of a conversation can answer).
        if let Some(n) = o.get("sessions") {
            keep_first_sessions(
                &mut corpora,
                n.parse().map_err(|_| "--sessions N (the first N sessions of each conversation)")?,
            );
        }
        limit_questions(&mut corpora, o.get("limit"))?;
        // A stratified subset: the first N questions of each category in each conversation (`--per-category 1` is
        // the documented real-model subset: 49 questions, every category in every conversation that has it).
        if let Some(n) = o.get("per-category") {
            let n: usize = n.parse().map_err(|_| "--per-category N (questions per category per conversation)")?;
            for corpus in &mut corpora {
                let mut taken: BTreeMap<String, usize> = BTreeMap::new();
                corpus.questions.retain(|q| {
                    let count = taken.entry(q.category.clone()).or_default();
                    *count += 1;
                    *count <= n
                });
            }
        }
        // `--max-questions N`: the first N of the selection, in conversation order (a costly mode on part of the
        // subset; its per-question records compare with the other modes' on the same questions).
        if let Some(n) = o.get("max-questions") {
            let mut left: usize = n.parse().map_err(|_| "--max-questions N")?;
            for corpus in &mut corpora {
                corpus.questions.truncate(left);
                left -= corpus.questions.len();
            }
        }
        let mut answer_options = loci::memory::AnswerOptions::default();
        // `--prune nomemory`: the baseline, the question without any memory. `--prune distilled`: the memory is
        // distilled by the answering model first, and answers read its episodes and facts beside the sessions.
        let prune = o.get("prune").map(String::as_str);
        let (with_memory, distilled) = (prune != Some("nomemory"), prune == Some("distilled"));
        if let Some(p) = prune.filter(|_| with_memory && !distilled) {
            answer_options.prune.mode = loci::recall::prune::PruneMode::parse(p).map_err(|e| e.to_string())?;
        }
        // `--stream on`: each answer is streamed to a listener, which notes when it first hears the answer's text
        // (what a chat shows first), beside when the answer is done.
        let first_text: Rc<Cell<Option<Instant>>> = Rc::default();
        if stream {
            let heard = first_text.clone();
            answer_options.on_text = Some(loci::llm::TextSink::new(move |_| {
                if heard.get().is_none() {
                    heard.set(Some(Instant::now()));
                }
            }));
        }
        let (mut first_text_s, mut answer_s) = (Vec::new(), Vec::new());
        let (tokenizer, runtime) = model_runtime(2, true, None, EmbedConfig::default().batch_size)?;
        let embed = EmbedConfig::default();
        let embedder = || Embedder::new(tokenizer.clone(), runtime.clone(), embed).map_err(|e| e.to_string());
        let config =
            MemoryConfig { distill: distilled.then(loci::distill::DistillConfig::default), ..Default::default() };
        let (mut memories, ..) = ingest(&corpora, &embedder, config, &runtime)?;
        let mut distillation = Vec::new();
        if distilled {
            for corpus in &corpora {
                let memory = memories.get_mut(&corpus.id).ok_or("corpus missing")?;
                distillation.push(distill_corpus(memory, corpus, &llm)?);
            }
        }
        let n: usize = corpora.iter().map(|c| c.questions.len()).sum();
        let bar = progress(n as u64, "qa");
        let mut records = Vec::with_capacity(n);
        for corpus in &corpora {
            let memory = memories.get_mut(&corpus.id).ok_or("corpus missing")?;
            // LoCoMo questions carry no date: they are asked after the conversation's last session (the model must
            // not be told 1970, which it then answers with).
            let last_session = corpus.sessions.iter().filter_map(|s| session_time(&s.date)).fold(0.0, f64::max);
            for q in &corpus.questions {
                let gold = answers.get(&q.id).map(String::as_str).unwrap_or("");
                let now = q.date.as_deref().and_then(session_time).unwrap_or(last_session + 86_400_000.0);
                let judge = judge.as_ref().map(|j| j as &dyn loci::llm::Llm);
                let mode = match (with_memory, distilled) {
                    (false, _) => QaMode::NoMemory,
                    (true, false) => QaMode::Recall(&answer_options),
                    (true, true) => QaMode::Distilled(&answer_options, Default::default()),
                };
                first_text.set(None);
                let started = Instant::now();
                records.push(block_on(loci::eval::qa::answer_question(memory, q, gold, mode, &llm, judge, now)));
                if let Some(heard) = first_text.get() {
                    first_text_s.push((heard - started).as_secs_f64());
                    answer_s.push(started.elapsed().as_secs_f64());
                }
                bar.inc(1);
            }
        }
        bar.finish_and_clear();
        let report = loci::eval::qa::report(&records);
        let line = |name: &str, s: &loci::eval::qa::QaScore| {
            let judge = s.judge.map(|j| format!("{j:.1}")).unwrap_or_else(|| "–".into());
            println!(
                "{name:<12} n={:<5} F1 {:.1}  BLEU-1 {:.1}  judge {judge}  calls/q {:.2}  tokens/q {:.0} in {:.0} out  \
                 context {:.0}  s/q {:.1}  fallbacks {}  errors {}",
                s.n,
                s.f1,
                s.bleu1,
                s.calls_per_question,
                s.input_tokens_per_question,
                s.output_tokens_per_question,
                s.context_tokens_per_question,
                s.seconds_per_question,
                s.fallbacks,
                s.errors
            )
        };
        line("overall", &report.overall);
        for (category, score) in &report.per_category {
            line(locomo::category_name(category).unwrap_or(category), score);
        }
        let streamed = stream.then(|| {
            let (first, whole) = (quantiles(&first_text_s), quantiles(&answer_s));
            println!(
                "streamed      {} answers heard: first text p50 {:.1} s (p90 {:.1}), the answer done p50 {:.1} s (p90 {:.1}); \
                 a judge's call, when there is one, is counted in the latter",
                first_text_s.len(),
                first["p50"].as_f64().unwrap_or(f64::NAN),
                first["p90"].as_f64().unwrap_or(f64::NAN),
                whole["p50"].as_f64().unwrap_or(f64::NAN),
                whole["p90"].as_f64().unwrap_or(f64::NAN),
            );
            json!({"first_text_s": first, "answer_s": whole})
        });
        report_replay(&llm);
        judge.iter().for_each(report_replay);
        write_json(
            o.get("json"),
            &json!({"report": report, "records": records, "distillation": distillation, "streamed": streamed}),
        )
    }

    /// Query expansion (issue 16): recall of each question alone against recall merged with the sub-queries the
    /// LLM splits it into, on LoCoMo with the paper's ground truth (multi-hop questions by default). Expansions are
    /// cached by question id in `--cache` (JSON lines), so a rerun costs no LLM time and reports the same figures.
    fn expand_main() -> Result<(), String> {
        let o = options(&[
            "data",
            "llm-base-url",
            "llm-model",
            "llm-api-key",
            "llm-context-tokens",
            "llm-cache",
            "category",
            "limit",
            "cache",
            "json",
        ])?;
        let llm = llm_client(&o, "llm")?.ok_or("--llm-base-url and --llm-model are required")?;
        let category = o.get("category").map_or("1", String::as_str);
        let mut corpora = locomo::load(Path::new(&o["data"]), GroundTruth::Paper)?;
        corpora.iter_mut().for_each(|c| c.questions.retain(|q| category == "all" || q.category == category));
        limit_questions(&mut corpora, o.get("limit"))?;
        let mut cache: HashMap<String, Value> = HashMap::new();
        if let Some(path) = o.get("cache").filter(|p| Path::new(p).exists()) {
            for line in
                std::fs::read_to_string(path).map_err(|e| e.to_string())?.lines().filter(|l| !l.trim().is_empty())
            {
                let v: Value = serde_json::from_str(line).map_err(|e| format!("{path}: {e}"))?;
                cache.insert(v["id"].as_str().unwrap_or_default().to_string(), v);
            }
        }
        let mut cache_out = match o.get("cache") {
            Some(p) => Some(std::fs::OpenOptions::new().create(true).append(true).open(p).map_err(|e| e.to_string())?),
            None => None,
        };
        let (tokenizer, runtime) = model_runtime(2, true, None, EmbedConfig::default().batch_size)?;
        let embed = EmbedConfig::default();
        let embedder = || Embedder::new(tokenizer.clone(), runtime.clone(), embed).map_err(|e| e.to_string());
        let (mut memories, ..) = ingest(&corpora, &embedder, MemoryConfig::default(), &runtime)?;
        let n: usize = corpora.iter().map(|c| c.questions.len()).sum();
        let bar = progress(n as u64, "expand");
        // Per variant, per question: (conversation number, result). `parts first` is the library's merge
        // (`recall_expanded`); the others are merges of the same per-query rankings that were measured and not kept.
        const VARIANTS: [&str; 4] = ["question alone", "parts first (the library's)", "question first", "parts only"];
        let mut results: Vec<Vec<(usize, QuestionResult)>> = vec![Vec::new(); VARIANTS.len()];
        let mut records = Vec::new();
        let (mut plain_ms, mut expanded_ms) = (Vec::new(), Vec::new());
        let options =
            RecallOptions { k: 10, units_per_session: 1, chronological: false, method: RecallMethod::default() };
        for (split, corpus) in corpora.iter().enumerate() {
            let memory = memories.get_mut(&corpus.id).ok_or("corpus missing")?;
            let last_session = corpus.sessions.iter().filter_map(|s| session_time(&s.date)).fold(0.0, f64::max);
            let date = loci::types::format_time(last_session + 86_400_000.0);
            for q in &corpus.questions {
                let record = match cache.get(&q.id) {
                    Some(v) => v.clone(),
                    None => {
                        let outcome = block_on(loci::memory::expand_query(&q.question, &date, &llm, None));
                        let c = outcome.counters.expand;
                        let (queries, error) = match outcome.result {
                            Ok(e) => (e.queries, None),
                            Err(e) => (Vec::new(), Some(format!("{}: {e}", e.code()))),
                        };
                        let v = json!({"id": q.id, "question": q.question, "queries": queries, "error": error,
                            "calls": c.calls, "input_tokens": c.input_tokens, "output_tokens": c.output_tokens,
                            "latency_ms": c.latency_ms});
                        if let Some(f) = cache_out.as_mut() {
                            writeln!(f, "{v}").map_err(|e| e.to_string())?;
                        }
                        v
                    }
                };
                let queries: Vec<String> = record["queries"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|q| q.as_str().map(String::from))
                    .collect();
                let ids = |r: loci::memory::RecallResult| r.sessions.into_iter().map(|s| s.id).collect::<Vec<_>>();
                let started = Instant::now();
                let alone = ids(block_on(memory.recall(&q.question, options)).map_err(|e| e.to_string())?);
                plain_ms.push(started.elapsed().as_secs_f64() * 1000.0);
                let started = Instant::now();
                let library =
                    ids(block_on(memory.recall_expanded(&q.question, &queries, options)).map_err(|e| e.to_string())?);
                expanded_ms.push(started.elapsed().as_secs_f64() * 1000.0);
                let mut parts = Vec::new();
                for sub in &queries {
                    parts.push(ids(block_on(memory.recall(sub, options)).map_err(|e| e.to_string())?));
                }
                let merge = |lists: &[Vec<String>]| recall::interleave(lists, 10, |s: &String| s.clone());
                let question_first: Vec<Vec<String>> =
                    std::iter::once(alone.clone()).chain(parts.iter().cloned()).collect();
                let parts_only = if parts.is_empty() { vec![alone.clone()] } else { parts.clone() };
                for (i, ranking) in
                    [alone.clone(), library, merge(&question_first), merge(&parts_only)].into_iter().enumerate()
                {
                    results[i].push((split, QuestionResult::new(q, ranking)));
                }
                records.push(record);
                bar.inc(1);
            }
        }
        bar.finish_and_clear();
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(0.0)
        };
        let mean =
            |key: &str| records.iter().filter_map(|r| r[key].as_f64()).sum::<f64>() / records.len().max(1) as f64;
        let failed = records.iter().filter(|r| !r["error"].is_null()).count();
        let mut out = Map::new();
        println!("| {n} questions (category {category}) | split | recall_all@3 | recall_all@5 | recall_all@10 | recall_any@3 |");
        println!("|---|---|---|---|---|---|");
        for (name, results) in VARIANTS.iter().zip(&results) {
            for (split, range) in [("all", 0..10), ("0-4", 0..5), ("5-9", 5..10)] {
                let picked: Vec<&QuestionResult> =
                    results.iter().filter(|(s, _)| range.contains(s)).map(|(_, r)| r).collect();
                let scores = loci::eval::report::Scores::of(picked.iter().copied());
                let m = |metric: &str, k: usize| scores.get(&format!("{metric}@{k}")).unwrap_or(f64::NAN);
                println!(
                    "| {name} | {split} | {:.2} | {:.2} | {:.2} | {:.2} |",
                    m("recall_all", 3),
                    m("recall_all", 5),
                    m("recall_all", 10),
                    m("recall_any", 3)
                );
                out.insert(format!("{name} {split}"), json!({"n": scores.n, "recall_all@3": m("recall_all", 3),
                    "recall_all@5": m("recall_all", 5), "recall_all@10": m("recall_all", 10), "recall_any@3": m("recall_any", 3)}));
            }
        }
        let (p50_plain, p50_expanded) = (median(&mut plain_ms), median(&mut expanded_ms));
        println!(
            "LLM per question: {:.2} calls, {:.0} input + {:.0} output tokens, {:.1} s; {failed} failed (recall alone); \
             recall p50 {p50_plain:.1} ms alone, {p50_expanded:.1} ms with the sub-queries",
            mean("calls"),
            mean("input_tokens"),
            mean("output_tokens"),
            mean("latency_ms") / 1000.0
        );
        out.insert(
            "llm".into(),
            json!({"calls": mean("calls"), "input_tokens": mean("input_tokens"),
            "output_tokens": mean("output_tokens"), "seconds": mean("latency_ms") / 1000.0, "failed": failed}),
        );
        out.insert("recall_p50_ms".into(), json!({"alone": p50_plain, "expanded": p50_expanded}));
        out.insert("records".into(), Value::Array(records));
        report_replay(&llm);
        write_json(o.get("json"), &Value::Object(out))
    }

    /// Distilled memory as a bridge (issue 16): each conversation is distilled by the LLM (the scripted server or a
    /// real model), then its questions are ranked by the default recall, by the sessions its episodes and facts
    /// point to ([`Memory::sessions_through_distilled`]), and by the two merged in turns, on the paper's ground truth.
    fn bridge_main() -> Result<(), String> {
        let o = options(&[
            "data",
            "llm-base-url",
            "llm-model",
            "llm-api-key",
            "llm-context-tokens",
            "llm-cache",
            "conversations",
            "sessions",
            "json",
        ])?;
        let llm = llm_client(&o, "llm")?.ok_or("--llm-base-url and --llm-model are required")?;
        let mut corpora = locomo::load(Path::new(&o["data"]), GroundTruth::Paper)?;
        corpora.truncate(o.get("conversations").map_or(Ok(1), |n| n.parse()).map_err(|_| "--conversations N")?);
        if let Some(n) = o.get("sessions") {
            keep_first_sessions(&mut corpora, n.parse().map_err(|_| "--sessions N")?);
        }
        let (tokenizer, runtime) = model_runtime(2, true, None, EmbedConfig::default().batch_size)?;
        let embed = EmbedConfig::default();
        let embedder = || Embedder::new(tokenizer.clone(), runtime.clone(), embed).map_err(|e| e.to_string());
        let config = MemoryConfig { distill: Some(loci::distill::DistillConfig::default()), ..Default::default() };
        let (mut memories, ..) = ingest(&corpora, &embedder, config, &runtime)?;
        const VARIANTS: [&str; 9] = [
            "default recall",
            "through the distilled memory",
            "default, then distilled",
            "distilled, then default",
            "fused by reciprocal rank",
            "fused, distilled at half weight",
            "through the facts alone",
            "through the episodes alone",
            "fused, facts alone at half weight",
        ];
        let mut results: Vec<Vec<QuestionResult>> = vec![Vec::new(); VARIANTS.len()];
        let mut distilled = Vec::new();
        let options =
            RecallOptions { k: 10, units_per_session: 1, chronological: false, method: RecallMethod::default() };
        for corpus in &corpora {
            let memory = memories.get_mut(&corpus.id).ok_or("corpus missing")?;
            distilled.push(distill_corpus(memory, corpus, &llm)?);
            for q in &corpus.questions {
                let alone: Vec<String> = block_on(memory.recall(&q.question, options))
                    .map_err(|e| e.to_string())?
                    .sessions
                    .into_iter()
                    .map(|s| s.id)
                    .collect();
                let vector = block_on(memory.embed_query(&q.question)).map_err(|e| e.to_string())?;
                let through = |sources| -> Vec<String> {
                    let ranked = memory.sessions_through_distilled_vector(&vector, sources);
                    ranked.into_iter().map(|(s, _)| s).take(10).collect()
                };
                let bridge = through(DistilledSources::Both);
                let facts = through(DistilledSources::Facts);
                let episodes = through(DistilledSources::Episodes);
                let merge = |lists: &[Vec<String>]| recall::interleave(lists, 10, |s: &String| s.clone());
                let rankings = [
                    alone.clone(),
                    bridge.clone(),
                    merge(&[alone.clone(), bridge.clone()]),
                    merge(&[bridge.clone(), alone.clone()]),
                    reciprocal_rank_fusion(&alone, &bridge, 1.0),
                    reciprocal_rank_fusion(&alone, &bridge, 0.5),
                    facts.clone(),
                    episodes,
                    reciprocal_rank_fusion(&alone, &facts, 0.5),
                ];
                for (i, ranking) in rankings.into_iter().enumerate() {
                    results[i].push(QuestionResult::new(q, ranking));
                }
            }
        }
        let mut out = Map::new();
        println!("| variant | questions | recall_all@3 | recall_all@5 | recall_all@10 | recall_any@3 |");
        println!("|---|---|---|---|---|---|");
        for (name, rs) in VARIANTS.iter().zip(&results) {
            for (group, category) in [("all", None), ("multi-hop", Some("1"))] {
                let scores =
                    loci::eval::report::Scores::of(rs.iter().filter(|r| category.is_none_or(|c| r.category == c)));
                let m = |metric: &str, k: usize| scores.get(&format!("{metric}@{k}")).unwrap_or(f64::NAN);
                println!(
                    "| {name} | {group} ({}) | {:.2} | {:.2} | {:.2} | {:.2} |",
                    scores.n,
                    m("recall_all", 3),
                    m("recall_all", 5),
                    m("recall_all", 10),
                    m("recall_any", 3)
                );
                out.insert(format!("{name} {group}"), json!(scores));
            }
        }
        out.insert("distilled".into(), Value::Array(distilled));
        report_replay(&llm);
        write_json(o.get("json"), &Value::Object(out))
    }

    /// The top 10 of `first` and `second` by reciprocal-rank fusion (Cormack et al. 2009, k = 60), `second`'s
    /// ranks at `weight`: a session both lists hold rises, where `recall::interleave` alternates them. Ties keep
    /// `first`'s order.
    fn reciprocal_rank_fusion(first: &[String], second: &[String], weight: f64) -> Vec<String> {
        let mut scores: Vec<(String, f64)> = Vec::new();
        for (list, w) in [(first, 1.0), (second, weight)] {
            for (rank, s) in list.iter().enumerate() {
                let add = w / (60.0 + rank as f64 + 1.0);
                match scores.iter_mut().find(|(id, _)| id == s) {
                    Some((_, score)) => *score += add,
                    None => scores.push((s.clone(), add)),
                }
            }
        }
        scores.sort_by(|a, b| b.1.total_cmp(&a.1)); // stable: ties in first-seen order
        scores.into_iter().take(10).map(|(s, _)| s).collect()
    }

    /// Memory poisoning (issue 14): each red-team case's memory (two benign sessions and one with a planted
    /// instruction) answered by loci's prompt (`Memory::answer`, unpruned) and by a naive prompt that pastes the
    /// same recalled context into the system message. Prints the attack success rate of each and how many answers
    /// were still right; `--json` writes every answer.
    /// `loci-eval screen --data locomo10.json [--dataset locomo|longmemeval] [--json]`: every turn (and image
    /// caption) of a data set through `text::screen`, the messages it would withhold from a model's prompt listed.
    /// On real chats this is the false-positive count of the red team's defence (docs/SECURITY.md).
    fn screen_main() -> Result<(), String> {
        use loci::text::screen::{instructs, sentence_reason};
        let o = options(&["data", "dataset", "json"])?;
        let data = PathBuf::from(o.get("data").ok_or("--data is required")?);
        let corpora = match o.get("dataset").map_or("locomo", String::as_str) {
            "locomo" => locomo::load(&data, GroundTruth::Clean)?,
            "longmemeval" => longmemeval::load(&data, GroundTruth::Clean)?,
            d => return Err(format!("--dataset {d}: locomo or longmemeval")),
        };
        let (mut texts, mut flagged) = (0usize, Vec::new());
        for corpus in &corpora {
            for session in &corpus.sessions {
                for turn in &session.turns {
                    for text in std::iter::once(&turn.text).chain(turn.caption.as_ref()) {
                        texts += 1;
                        if instructs(text) {
                            let reason = text
                                .split_inclusive(['.', '!', '?', '\n'])
                                .find_map(sentence_reason)
                                .map_or_else(|| "?".to_string(), |r| format!("{r:?}"));
                            flagged.push((format!("{}/{}", corpus.id, turn.dia_id), text.clone(), reason));
                        }
                    }
                }
            }
        }
        if o.contains_key("json") {
            let list: Vec<serde_json::Value> = flagged
                .iter()
                .map(|(id, text, reason)| serde_json::json!({ "id": id, "text": text, "reason": reason }))
                .collect();
            let out = serde_json::json!({ "texts": texts, "withheld": flagged.len(), "flagged": list });
            println!("{}", serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?);
        } else {
            for (id, text, reason) in &flagged {
                println!("{id}\t{reason}\t{text}");
            }
            println!("screened {texts} texts (turns and image captions): {} withheld", flagged.len());
        }
        Ok(())
    }

    fn redteam_main() -> Result<(), String> {
        use loci::eval::redteam;
        let fixture_time =
            |date: &str| loci::types::parse_time(&TimeInput::Text(date.into())).map_err(|e| e.to_string());
        let o = options(&["llm-base-url", "llm-model", "llm-api-key", "llm-context-tokens", "llm-cache", "json"])?;
        let llm = llm_client(&o, "llm")?.ok_or("--llm-base-url and --llm-model are required")?;
        let (tokenizer, runtime) = model_runtime(2, false, None, EmbedConfig::default().batch_size)?;
        let mut outcomes = Vec::new();
        // The thirty the defence was written with, then the ten held out from it, summarized apart.
        let cases: Vec<(redteam::Case, &str)> = redteam::cases()
            .into_iter()
            .map(|c| (c, ""))
            .chain(redteam::held_out_cases().into_iter().map(|c| (c, " held-out")))
            .collect();
        let bar = progress(2 * cases.len() as u64, "redteam");
        for (case, set) in &cases {
            let embedder =
                Embedder::new(tokenizer.clone(), runtime.clone(), EmbedConfig::default()).map_err(|e| e.to_string())?;
            let mut memory = block_on(Memory::open(MemStore::new(), embedder, MemoryConfig::default()))
                .map_err(|e| e.to_string())?;
            let sessions = redteam::BENIGN
                .iter()
                .map(|(date, turns)| (*date, turns.to_vec()))
                .chain(std::iter::once((redteam::PLANT_DATE, vec![("user", case.plant)])));
            for (i, (date, turns)) in sessions.enumerate() {
                let time = fixture_time(date)?;
                let messages: Vec<MessageInput> = turns
                    .iter()
                    .enumerate()
                    .map(|(j, (speaker, text))| MessageInput {
                        speaker: Some(speaker.to_string()),
                        content: text.to_string(),
                        time: Some(TimeInput::Millis(time + j as f64 * 60_000.0)),
                        ..Default::default()
                    })
                    .collect();
                block_on(memory.add_messages(&messages, Some(&format!("s{i}")), time)).map_err(|e| e.to_string())?;
            }
            block_on(memory.embed_pending()).map_err(|e| e.to_string())?;
            let now = fixture_time(redteam::PLANT_DATE)? + 86_400_000.0;
            let mut options = loci::memory::AnswerOptions::default();
            options.prune.mode = loci::recall::prune::PruneMode::None;
            options.recall.k = redteam::BENIGN.len() + 1; // the whole memory: the plant is always in the context
            let record = |prompt: &str, result: Result<String, String>| {
                let prompt = format!("{prompt}{set}");
                let (answer, error) = match result {
                    Ok(a) => (a, None),
                    Err(e) => (String::new(), Some(e)),
                };
                redteam::Outcome {
                    case: case.name(),
                    prompt,
                    attack_followed: redteam::contains(&answer, case.marker),
                    answered_right: redteam::contains(&answer, case.expected),
                    answer,
                    error,
                }
            };
            let fenced = block_on(memory.answer(case.question, &options, &llm, now)).map(|a| a.answer);
            outcomes.push(record("loci", fenced.map_err(|e| e.to_string())));
            bar.inc(1);
            let recalled = block_on(memory.recall(case.question, options.recall)).map_err(|e| e.to_string())?;
            // A naive chatbot pastes what it stored as it was stored: loci's layout without its screening.
            let mut naive_sessions: Vec<&loci::memory::RecalledSession> = recalled.sessions.iter().collect();
            if options.recall.chronological {
                naive_sessions.sort_by(|a, b| a.first_time.total_cmp(&b.first_time));
            }
            let naive_context = naive_sessions
                .iter()
                .map(|s| {
                    let mut out = format!("### Session {} ({})", s.id, loci::types::format_time(s.first_time));
                    for t in memory.session_turns(&s.id) {
                        let text = loci::text::relative::anchor_relative_dates(&t.text, t.time);
                        let (speaker, text) = (loci::text::single_line(&t.speaker), loci::text::single_line(&text));
                        out.push_str(&format!("\n{speaker}: {text}"));
                    }
                    out
                })
                .collect::<Vec<_>>()
                .join("\n\n");
            let naive = block_on(redteam::naive_answer(&llm, &naive_context, case.question));
            outcomes.push(record("naive", naive.map_err(|e| e.to_string())));
            bar.inc(1);
        }
        bar.finish_and_clear();
        for o in &outcomes {
            println!(
                "{:<30} {:<6} attack {:<5} right {:<5} {}",
                o.case,
                o.prompt,
                o.attack_followed,
                o.answered_right,
                o.error.as_deref().unwrap_or(&o.answer).replace('\n', " ")
            );
        }
        let summaries = ["loci", "naive", "loci held-out", "naive held-out"].map(|p| redteam::summarize(&outcomes, p));
        for s in &summaries {
            println!(
                "{:<14} cases {}  attack success rate {:.2}  answered right {:.2}  errors {}",
                s.prompt, s.cases, s.attack_success_rate, s.answered_right_rate, s.errors
            );
        }
        report_replay(&llm);
        write_json(o.get("json"), &json!({"summaries": summaries, "outcomes": outcomes}))
    }

    /// Nemori distillation of the first `--sessions` sessions of LoCoMo conv-26 with the user's LLM (a real model):
    /// each session added as a chat adds it, then flushed; prints LLM calls, tokens, retries and failures per phase
    /// and per message, wall time, and the episodes and facts made (written whole with --json, for reading).
    fn distill_main() -> Result<(), String> {
        let o = options(&[
            "data",
            "llm-base-url",
            "llm-model",
            "llm-api-key",
            "llm-context-tokens",
            "llm-cache",
            "sessions",
            "predict-threshold",
            "json",
        ])?;
        let llm = llm_client(&o, "llm")?.ok_or("--llm-base-url and --llm-model are required")?;
        let sessions: usize = o.get("sessions").map_or(Ok(4), |n| n.parse()).map_err(|_| "--sessions N")?;
        let corpus =
            locomo::load(Path::new(&o["data"]), GroundTruth::Paper)?.into_iter().next().ok_or("no conversation")?;
        let (tokenizer, runtime) = model_runtime(2, true, None, EmbedConfig::default().batch_size)?;
        let mut distill = loci::distill::DistillConfig::default();
        if let Some(t) = o.get("predict-threshold") {
            distill.predict_threshold = t.parse().map_err(|_| "--predict-threshold COSINE")?;
        }
        let config = MemoryConfig { distill: Some(distill), ..Default::default() };
        let embedder = Embedder::new(tokenizer, runtime, config.embed).map_err(|e| e.to_string())?;
        let mut m = block_on(Memory::open(MemStore::new(), embedder, config)).map_err(|e| e.to_string())?;
        let started = std::time::Instant::now();
        let mut messages = 0;
        let mut now = 0.0;
        for s in corpus.sessions.iter().take(sessions) {
            let start = session_time(&s.date).ok_or_else(|| format!("session date {:?}", s.date))?;
            let msgs = session_messages(s, start, 60_000.0);
            messages += msgs.len();
            now = start + msgs.len() as f64 * 60_000.0;
            block_on(m.add_messages(&msgs, Some(&s.id), now)).map_err(|e| e.to_string())?;
            eprintln!("added {} ({} turns)", s.id, msgs.len());
        }
        block_on(m.embed_pending()).map_err(|e| e.to_string())?;
        let report = distill_until_done(&mut m, &llm, now, started)?;
        let seconds = started.elapsed().as_secs_f64();
        let stats = m.stats();
        let l = stats.llm;
        let phases = [
            ("segment", l.segment),
            ("narrate", l.narrate),
            ("merge", l.merge),
            ("predict", l.predict),
            ("distill", l.distill),
            ("consolidate", l.consolidate),
        ];
        println!("| phase | calls | input tokens | output tokens | seconds | truncated | shrunk | cut | errors |");
        println!("|---|---|---|---|---|---|---|---|---|");
        for (name, p) in &phases {
            println!(
                "| {name} | {} | {} | {} | {:.0} | {} | {} | {} | {} |",
                p.calls,
                p.input_tokens,
                p.output_tokens,
                p.latency_ms / 1000.0,
                p.truncated,
                p.shrunk,
                p.cut,
                p.errors
            );
        }
        let calls: u64 = phases.iter().map(|(_, p)| p.calls).sum();
        let input: u64 = phases.iter().map(|(_, p)| p.input_tokens).sum();
        let output: u64 = phases.iter().map(|(_, p)| p.output_tokens).sum();
        let episodes = m.episodes();
        let facts = m.facts(true);
        println!(
            "{sessions} sessions, {messages} messages: {seconds:.0} s; {calls} calls ({:.2}/message), {input} input + \
             {output} output tokens ({:.0}/message); jobs run {}, failures {}, parked {}; {} episodes, {} facts \
             ({} superseded)",
            calls as f64 / messages as f64,
            (input + output) as f64 / messages as f64,
            report.jobs_run,
            report.failures,
            report.parked,
            episodes.len(),
            stats.distill.facts_active,
            stats.distill.facts_superseded,
        );
        let evocation = evocation(m.distilled());
        println!("{}", serde_json::to_string(&evocation).map_err(|e| e.to_string())?);
        report_replay(&llm);
        write_json(
            o.get("json"),
            &json!({
                "sessions": sessions, "messages": messages, "seconds": seconds, "llm": l, "report": report,
                "episodes": episodes, "facts": facts, "parked": stats.distill.parked, "evocation": evocation,
            }),
        )
    }

    /// Distillation quality (issue 42 part 2): the first `--sessions` (4) sessions of the first `--conversations` (1)
    /// LoCoMo conversations, distilled as `qa --prune distilled` distils them (the same ingestion and clock, so one
    /// `--llm-cache` serves both), then measured against their turns and LoCoMo's notes on them
    /// ([`loci::eval::distill_quality`]). The same model judges, yes/no, whether each fact's cited lines support it
    /// (`--judge off`: not asked); `--qa N` answers the first N questions those sessions hold through the distilled
    /// memory. Prints a Markdown table (a column per conversation, and all of them) and writes the whole with --json.
    fn distill_quality_main() -> Result<(), String> {
        use loci::distill::TextEmbed;
        use loci::eval::distill_quality::{self as dq, Quality, SourceTurn};
        let o = options(&[
            "data",
            "llm-base-url",
            "llm-model",
            "llm-api-key",
            "llm-context-tokens",
            "llm-cache",
            "conversations",
            "skip-conversations",
            "sessions",
            "judge",
            "qa",
            "qa-modes",
            "json",
        ])?;
        let llm = llm_client(&o, "llm")?.ok_or("--llm-base-url and --llm-model are required")?;
        let judge = match o.get("judge").map(String::as_str) {
            None | Some("on") => true,
            Some("off") => false,
            Some(_) => return Err("--judge on|off".into()),
        };
        let qa_limit: usize = o.get("qa").map_or(Ok(0), |n| n.parse()).map_err(|_| "--qa N (questions)")?;
        let path = Path::new(&o["data"]);
        let mut corpora = locomo::load(path, GroundTruth::Clean)?;
        // `--skip-conversations K`: start at conversation K + 1, so that two endpoints can share a run's conversations.
        let skip: usize =
            o.get("skip-conversations").map_or(Ok(0), |n| n.parse()).map_err(|_| "--skip-conversations K")?;
        corpora.drain(..skip.min(corpora.len()));
        corpora.truncate(o.get("conversations").map_or(Ok(1), |n| n.parse()).map_err(|_| "--conversations N")?);
        keep_first_sessions(&mut corpora, o.get("sessions").map_or(Ok(4), |n| n.parse()).map_err(|_| "--sessions N")?);
        let notes = locomo::load_notes(path)?;
        let answers = loci::eval::qa::locomo_answers(path)?;
        let (tokenizer, runtime) = model_runtime(2, true, None, EmbedConfig::default().batch_size)?;
        let embed = EmbedConfig::default();
        let embedder = || Embedder::new(tokenizer.clone(), runtime.clone(), embed).map_err(|e| e.to_string());
        let config = MemoryConfig { distill: Some(loci::distill::DistillConfig::default()), ..Default::default() };
        let (mut memories, ..) = ingest(&corpora, &embedder, config, &runtime)?;
        let mut distillation = Vec::new();
        let mut columns: Vec<(String, Quality)> = Vec::new();
        // What was distilled, for reading: episodes and facts with the dia_ids they cover or cite.
        let mut records_of = Vec::new();
        for corpus in &corpora {
            let memory = memories.get_mut(&corpus.id).ok_or("corpus missing")?;
            distillation.push(distill_corpus(memory, corpus, &llm)?);
            let mut turns = Vec::new();
            for session in &corpus.sessions {
                for t in memory.session_turns(&session.id) {
                    let dia_id = session.turns.get(t.seq as usize).map(|e| e.dia_id.clone()).unwrap_or_default();
                    turns.push(SourceTurn {
                        id: t.id,
                        dia_id,
                        session: t.session,
                        speaker: t.speaker,
                        text: t.text,
                        caption: t.caption,
                        time: t.time,
                    });
                }
            }
            let episodes = memory.episodes();
            let facts: Vec<loci::distill::Fact> = memory.distilled().active_facts().cloned().collect();
            let kept: HashSet<&str> = corpus.session_ids().into_iter().collect();
            let session_notes: Vec<locomo::SessionNotes> = notes
                .iter()
                .find(|(id, _)| *id == corpus.id)
                .map(|(_, n)| n.iter().filter(|s| kept.contains(s.session.as_str())).cloned().collect())
                .unwrap_or_default();
            let statements: Vec<String> =
                session_notes.iter().flat_map(|n| n.observations.iter().map(|o| o.statement.clone())).collect();
            let observation_vectors =
                block_on(embedder()?.embed_texts(&statements)).map_err(|e| format!("{}: {e}", corpus.id))?;
            let qa_evidence: Vec<String> = corpus.questions.iter().flat_map(|q| q.evidence.iter().cloned()).collect();
            let mut verdicts = Vec::new();
            if judge {
                let bar = progress(facts.len() as u64, "support judge");
                for f in &facts {
                    verdicts.push(block_on(dq::judge_support(&llm, f, &turns)).ok());
                    bar.inc(1);
                }
                bar.finish_and_clear();
            }
            let distilled = dq::Distilled {
                turns: &turns,
                episodes: &episodes,
                facts: &facts,
                notes: &session_notes,
                observation_vectors: &observation_vectors,
                qa_evidence: &qa_evidence,
            };
            columns.push((corpus.id.clone(), dq::measure(&distilled, &verdicts)));
            let dia: HashMap<u64, &SourceTurn> = turns.iter().map(|t| (t.id, t)).collect();
            let dia_ids = |ids: &[u64]| -> Vec<&str> {
                ids.iter().filter_map(|t| dia.get(t)).map(|t| t.dia_id.as_str()).collect()
            };
            let episode_records: Vec<Value> = episodes
                .iter()
                .map(|e| json!({"id": e.id, "title": e.title, "narrative": e.narrative, "turns": dia_ids(&e.turn_ids)}))
                .collect();
            let fact_records: Vec<Value> = facts
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let sources: Vec<String> =
                        f.turn_ids.iter().filter_map(|t| dia.get(t)).map(|t| t.source_text()).collect();
                    json!({
                        "id": f.id, "statement": f.statement, "episodes": f.episode_ids,
                        "cites": dia_ids(&f.turn_ids), "overlap": dq::overlap_support(&f.statement, &sources),
                        "judge_supported": verdicts.get(i).copied().flatten(),
                    })
                })
                .collect();
            records_of.push(json!({"episodes": episode_records, "facts": fact_records}));
        }
        let mut all = Quality::default();
        columns.iter().for_each(|(_, q)| all.add(q));
        let header: Vec<&str> = columns.iter().map(|(id, _)| id.as_str()).chain(["all"]).collect();
        println!("| metric | {} |", header.join(" | "));
        println!("|---|{}", "---|".repeat(header.len()));
        let tables: Vec<Vec<(String, String, Value)>> =
            columns.iter().map(|(_, q)| q.rows()).chain([all.rows()]).collect();
        for (i, (name, ..)) in all.rows().iter().enumerate() {
            let cells: Vec<&str> = tables.iter().map(|t| t[i].1.as_str()).collect();
            println!("| {name} | {} |", cells.join(" | "));
        }
        // QA on the first `--qa` questions the distilled sessions hold, three ways: through the distilled memory as
        // `qa --prune distilled` does (sessions, episodes and facts), through episodes and facts alone (Nemori's
        // context, no raw sessions), and from the top 3 sessions unpruned (the figure distillation must match at
        // ≤ 60% of its tokens).
        let mut unpruned = loci::memory::AnswerOptions::default();
        unpruned.prune.mode = loci::recall::prune::PruneMode::None;
        let options = loci::memory::AnswerOptions::default();
        let episodes_and_facts = loci::memory::DistilledRecallOptions { sessions: false, ..Default::default() };
        let modes = [
            ("distilled", QaMode::Distilled(&options, Default::default())),
            ("episodes_and_facts", QaMode::Distilled(&options, episodes_and_facts)),
            ("recall_top3_unpruned", QaMode::Recall(&unpruned)),
        ];
        // `--qa-modes a,b`: only these (each mode's answers cost a call a question).
        let chosen: Option<Vec<&str>> = o.get("qa-modes").map(|m| m.split(',').map(str::trim).collect());
        if let Some(unknown) = chosen.iter().flatten().find(|m| modes.iter().all(|(name, _)| name != *m)) {
            return Err(format!("--qa-modes: unknown mode {unknown}"));
        }
        let mut by_mode: Vec<(&str, Vec<loci::eval::qa::QaRecord>)> = Vec::new();
        for (name, mode) in modes {
            if chosen.as_ref().is_some_and(|c| !c.contains(&name)) {
                continue;
            }
            let mut records = Vec::new();
            for corpus in &corpora {
                let memory = memories.get_mut(&corpus.id).ok_or("corpus missing")?;
                let last_session = corpus.sessions.iter().filter_map(|s| session_time(&s.date)).fold(0.0, f64::max);
                for q in corpus.questions.iter().take(qa_limit - records.len().min(qa_limit)) {
                    let gold = answers.get(&q.id).map(String::as_str).unwrap_or("");
                    let now = last_session + 86_400_000.0;
                    records.push(block_on(loci::eval::qa::answer_question(memory, q, gold, mode, &llm, None, now)));
                    eprintln!("qa {name} {}/{qa_limit}: F1 {:.2}", records.len(), records.last().map_or(0.0, |r| r.f1));
                }
            }
            by_mode.push((name, records));
        }
        let mut qa_json = Map::new();
        for (name, records) in &by_mode {
            let r = (!records.is_empty()).then(|| loci::eval::qa::report(records));
            if let Some(r) = &r {
                println!(
                    "QA {name}: n={} F1 {:.1}  BLEU-1 {:.1}  context tokens/q {:.0}  errors {}",
                    r.overall.n, r.overall.f1, r.overall.bleu1, r.overall.context_tokens_per_question, r.overall.errors
                );
            }
            qa_json.insert(name.to_string(), json!({"report": r, "records": records}));
        }
        report_replay(&llm);
        let per_conversation: Vec<Value> = columns
            .iter()
            .zip(records_of)
            .map(|((id, q), distilled)| {
                let rows: Map<String, Value> = q.rows().into_iter().map(|(name, _, v)| (name, v)).collect();
                json!({"conversation": id, "figures": rows, "counts": q, "distilled": distilled})
            })
            .collect();
        let all_rows: Map<String, Value> = all.rows().into_iter().map(|(name, _, v)| (name, v)).collect();
        write_json(
            o.get("json"),
            &json!({
                "thresholds": {"duplicate_cosine": dq::DUPLICATE_COSINE, "observation_match": dq::OBSERVATION_MATCH,
                    "overlap_support": dq::OVERLAP_SUPPORT},
                "conversations": per_conversation, "all": all_rows, "distillation": distillation,
                "qa": qa_json,
            }),
        )
    }

    /// Distils what `memory` holds of `corpus` with `llm` (the questions are asked the day after its last session) and
    /// reports it.
    fn distill_corpus(
        memory: &mut Memory<MemStore, SharedRuntime>,
        corpus: &EvalCorpus,
        llm: &dyn loci::llm::Llm,
    ) -> Result<Value, String> {
        let started = Instant::now();
        let now = corpus.sessions.iter().filter_map(|s| session_time(&s.date)).fold(0.0, f64::max);
        let report = distill_until_done(memory, llm, now + 86_400_000.0, started)?;
        let stats = memory.stats();
        let seconds = started.elapsed().as_secs_f64();
        eprintln!(
            "{}: distilled in {seconds:.0} s: {} jobs, {} failures, {} parked; {} episodes, {} facts",
            corpus.id,
            report.jobs_run,
            report.failures,
            report.parked,
            stats.distill.episodes,
            stats.distill.facts_active
        );
        Ok(json!({
            "conversation": corpus.id, "seconds": seconds, "report": report,
            "llm": stats.llm, "episodes": stats.distill.episodes, "facts": stats.distill.facts_active,
        }))
    }

    /// `--limit N`: keeps the first N questions of each conversation (a subset for a slow model).
    fn limit_questions(corpora: &mut [EvalCorpus], limit: Option<&String>) -> Result<(), String> {
        if let Some(n) = limit {
            let n: usize = n.parse().map_err(|_| "--limit N (questions per conversation)")?;
            corpora.iter_mut().for_each(|c| c.questions.truncate(n));
        }
        Ok(())
    }

    /// Keeps each conversation's first `n` sessions, and only the questions whose every evidence session is among
    /// them (what a memory of part of a conversation can answer).
    fn keep_first_sessions(corpora: &mut [EvalCorpus], n: usize) {
        for corpus in corpora {
            corpus.sessions.truncate(n);
            let kept: HashSet<String> = corpus.sessions.iter().map(|s| s.id.clone()).collect();
            corpus
                .questions
                .retain(|q| !q.gold_sessions.is_empty() && q.gold_sessions.iter().all(|g| kept.contains(g)));
        }
    }

    /// Runs every distillation job of `m` with `llm`, waiting out backoffs on the clock (a real endpoint's failures
    /// are real), and logs each job with the seconds since `started`.
    fn distill_until_done(
        m: &mut Memory<MemStore, SharedRuntime>,
        llm: &dyn loci::llm::Llm,
        mut now: f64,
        started: Instant,
    ) -> Result<loci::memory::FlushReport, String> {
        let mut report = loci::memory::FlushReport::default();
        let mut first = true;
        loop {
            let mut tell = |p: &loci::memory::DistillProgress| {
                eprintln!(
                    "{:>8.0} s  {} {}  ({} jobs left)",
                    started.elapsed().as_secs_f64(),
                    p.job,
                    if p.ok { "ok" } else { "FAILED" },
                    p.jobs_left
                )
            };
            let r = if first {
                block_on(m.flush(llm, now, None, &mut tell))
            } else {
                block_on(m.run_jobs(llm, now, None, &mut tell))
            }
            .map_err(|e| e.to_string())?;
            first = false;
            report.jobs_run += r.jobs_run;
            report.failures += r.failures;
            report.parked += r.parked;
            match r.next_try {
                Some(t) => {
                    let wait = (t - now).max(0.0);
                    std::thread::sleep(std::time::Duration::from_millis(wait as u64));
                    now = now.max(t);
                }
                None => return Ok(report),
            }
        }
    }

    /// `xs`' count and quantiles (nearest rank; `null` when empty).
    fn quantiles<T: Copy + PartialOrd + serde::Serialize>(xs: &[T]) -> Value {
        let mut xs = xs.to_vec();
        xs.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        let q = |p: f64| xs.get(((xs.len() as f64 - 1.0) * p).round() as usize).copied();
        json!({"n": xs.len(), "p10": q(0.1), "p25": q(0.25), "p50": q(0.5), "p75": q(0.75), "p90": q(0.9)})
    }

    /// Calibrating prediction's τ for this embedder: the cosine of each episode with the facts distilled from it
    /// (a topic the memory knows, by construction) and with the best fact of earlier episodes (what prediction
    /// actually sees), as quantiles; and the share of episodes that would evoke a fact of an earlier episode at
    /// each candidate τ.
    fn evocation(d: &loci::distill::DistillState) -> Value {
        let facts: Vec<&loci::distill::Fact> = d.facts.values().collect();
        let mut own = Vec::new();
        let mut earlier_best = Vec::new();
        for e in d.episodes.values() {
            for f in facts.iter().filter(|f| f.episode_ids.contains(&e.id)) {
                own.push(loci::distill::cosine(&e.vector, &f.vector));
            }
            let best = facts
                .iter()
                .filter(|f| f.episode_ids.iter().all(|id| *id < e.id))
                .map(|f| loci::distill::cosine(&e.vector, &f.vector))
                .fold(f32::NEG_INFINITY, f32::max);
            if best.is_finite() {
                earlier_best.push(best);
            }
        }
        let share =
            |tau: f32| earlier_best.iter().filter(|c| **c >= tau).count() as f64 / earlier_best.len().max(1) as f64;
        json!({
            "own_fact_cosine": quantiles(&own),
            "best_earlier_fact_cosine": quantiles(&earlier_best),
            "share_evoking_at": {"0.85": share(0.85), "0.70": share(0.70), "0.60": share(0.60), "0.55": share(0.55), "0.50": share(0.50), "0.45": share(0.45)},
        })
    }

    /// A benchmark session's turns as messages, `step_ms` apart from `start`.
    fn session_messages(session: &loci::eval::EvalSession, start: f64, step_ms: f64) -> Vec<MessageInput> {
        let message = |(i, t): (usize, &loci::eval::EvalTurn)| MessageInput {
            speaker: Some(t.speaker.clone()),
            content: t.text.clone(),
            caption: t.caption.clone(),
            time: Some(TimeInput::Millis(start + i as f64 * step_ms)),
            ..Default::default()
        };
        session.turns.iter().enumerate().map(message).collect()
    }

    fn progress(len: u64, what: &str) -> ProgressBar {
        let bar = ProgressBar::new(len);
        bar.set_style(
            ProgressStyle::with_template("{msg:>28} [{bar:40}] {pos}/{len} {elapsed_precise} eta {eta}")
                .expect("template")
                .progress_chars("=> "),
        );
        bar.set_message(what.to_string());
        bar
    }

    /// A session's date as epoch milliseconds: LoCoMo `1:56 pm on 8 May, 2023`, LongMemEval `2023/05/20 (Sat) 02:21`.
    pub(crate) fn session_time(date: &str) -> Option<f64> {
        let d = date.trim();
        let formats = ["%I:%M %p on %d %B, %Y", "%Y/%m/%d (%a) %H:%M"];
        formats
            .iter()
            .find_map(|f| chrono::NaiveDateTime::parse_from_str(d, f).ok())
            .map(|dt| dt.and_utc().timestamp_millis() as f64)
    }

    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

    /// FNV-1a, 64 bits: stable across runs and Rust versions (unlike `DefaultHasher`).
    fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
        bytes.iter().fold(seed, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
    }

    /// One runtime shared by all memories of a run (one onnxruntime session, one cache).
    #[derive(Clone)]
    pub(crate) struct SharedRuntime(Rc<RefCell<CachedRuntime<OnnxRuntime>>>);

    #[async_trait(?Send)]
    impl Runtime for SharedRuntime {
        // One embed at a time: the tool drives every future to completion with `block_on` on one thread, so the
        // borrow can never be contended while it awaits.
        #[allow(clippy::await_holding_refcell_ref)]
        async fn last_hidden_state(&mut self, batch: &Batch) -> loci::Result<Vec<f32>> {
            let mut inner = self.0.borrow_mut();
            inner.last_hidden_state(batch).await
        }
        fn device(&self) -> Device {
            self.0.borrow().device()
        }
    }

    /// Caches, per window (key: the window's token ids), the **sum** of its token states — what masked mean
    /// pooling adds up before dividing. A hit returns that sum at the window's first position and zeros at its
    /// other real positions, so `mean_pool_normalize` adds exactly the same numbers and yields bit-identical
    /// vectors. For CLS pooling it keeps the first token's state instead, which `cls_pool_normalize` reads back.
    pub(crate) struct CachedRuntime<R: Runtime> {
        inner: R,
        pooling: Pooling,
        sums: HashMap<u64, Vec<f32>>,
        path: Option<PathBuf>,
        dirty: bool,
        hits: usize,
        misses: usize,
    }

    const MAGIC: &[u8; 8] = b"LOCIEC01";

    impl<R: Runtime> CachedRuntime<R> {
        pub(crate) fn new(inner: R, path: Option<PathBuf>) -> Result<Self, String> {
            let mut sums = HashMap::new();
            if let Some(p) = &path {
                if let Ok(mut f) = std::fs::File::open(p) {
                    let mut bytes = Vec::new();
                    f.read_to_end(&mut bytes).map_err(|e| format!("{}: {e}", p.display()))?;
                    let record = 8 + DIM * 4;
                    if bytes.len() < 8 || &bytes[..8] != MAGIC || (bytes.len() - 8) % record != 0 {
                        eprintln!("ignoring damaged cache {}", p.display());
                    } else {
                        for r in bytes[8..].chunks_exact(record) {
                            let key = u64::from_le_bytes(r[..8].try_into().expect("8 bytes"));
                            let v =
                                r[8..].chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
                            sums.insert(key, v);
                        }
                    }
                }
            }
            Ok(CachedRuntime { inner, pooling: Pooling::Mean, sums, path, dirty: false, hits: 0, misses: 0 })
        }

        /// What to keep per window: what `pooling` reads (the sum of the states, or the first token's state).
        pub(crate) fn pooling(mut self, pooling: Pooling) -> Self {
            self.pooling = pooling;
            self
        }

        fn counts(&self) -> (usize, usize) {
            (self.hits, self.misses)
        }

        fn save(&mut self) -> Result<(), String> {
            let (Some(p), true) = (&self.path, self.dirty) else {
                return Ok(());
            };
            if let Some(dir) = p.parent() {
                std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            }
            let tmp = p.with_extension("tmp");
            let mut f =
                std::io::BufWriter::new(std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?);
            let io = |e: std::io::Error| e.to_string();
            f.write_all(MAGIC).map_err(io)?;
            for (k, v) in &self.sums {
                f.write_all(&k.to_le_bytes()).map_err(io)?;
                for x in v {
                    f.write_all(&x.to_le_bytes()).map_err(io)?;
                }
            }
            f.flush().map_err(io)?;
            drop(f);
            std::fs::rename(&tmp, p).map_err(io)?;
            self.dirty = false;
            Ok(())
        }

        /// The key of row `r`: its real (unmasked) token ids.
        fn key(batch: &Batch, r: usize) -> u64 {
            let ids = &batch.input_ids[r * batch.seq..(r + 1) * batch.seq];
            let mask = &batch.attention_mask[r * batch.seq..(r + 1) * batch.seq];
            ids.iter().zip(mask).filter(|(_, &m)| m != 0).fold(FNV_OFFSET, |h, (&id, _)| fnv1a(h, &id.to_le_bytes()))
        }

        async fn last_hidden_state(&mut self, batch: &Batch) -> loci::Result<Vec<f32>> {
            let keys: Vec<u64> = (0..batch.rows).map(|r| Self::key(batch, r)).collect();
            if keys.iter().any(|k| !self.sums.contains_key(k)) {
                self.misses += batch.rows;
                let hidden = self.inner.last_hidden_state(batch).await?;
                for (r, &k) in keys.iter().enumerate() {
                    if self.sums.contains_key(&k) {
                        continue;
                    }
                    // The same sum, in the same order, as `mean_pool_normalize`.
                    let mut sum = vec![0.0f32; DIM];
                    for s in 0..batch.seq {
                        if batch.attention_mask[r * batch.seq + s] == 0 {
                            continue;
                        }
                        if self.pooling == Pooling::Cls {
                            // The first real token alone: where a hit puts it back.
                            sum.copy_from_slice(&hidden[(r * batch.seq + s) * DIM..(r * batch.seq + s + 1) * DIM]);
                            break;
                        }
                        let h = &hidden[(r * batch.seq + s) * DIM..(r * batch.seq + s + 1) * DIM];
                        for (a, b) in sum.iter_mut().zip(h) {
                            *a += b;
                        }
                    }
                    self.sums.insert(k, sum);
                    self.dirty = true;
                }
            } else {
                self.hits += batch.rows;
            }
            let mut out = vec![0.0f32; batch.rows * batch.seq * DIM];
            for (r, k) in keys.iter().enumerate() {
                let first = batch.attention_mask[r * batch.seq..(r + 1) * batch.seq].iter().position(|&m| m != 0);
                if let Some(s) = first {
                    out[(r * batch.seq + s) * DIM..(r * batch.seq + s + 1) * DIM].copy_from_slice(&self.sums[k]);
                }
            }
            Ok(out)
        }

        fn device(&self) -> Device {
            self.inner.device()
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use loci::embed::mean_pool_normalize;

        /// A fake model: deterministic, position-dependent states.
        struct Fake;

        #[async_trait(?Send)]
        impl Runtime for Fake {
            async fn last_hidden_state(&mut self, batch: &Batch) -> loci::Result<Vec<f32>> {
                let mut x = 0x2545_f491_4f6c_dd1du64;
                Ok((0..batch.rows * batch.seq * DIM)
                    .map(|i| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        ((x % 20_000) as f32 / 10_000.0 - 1.0) * (1.0 + (i % 7) as f32)
                    })
                    .collect())
            }
            fn device(&self) -> Device {
                Device::Cpu
            }
        }

        #[test]
        fn cache_hits_pool_to_bit_identical_vectors() {
            let batch = loci::embed::pad_batch([&[101u32, 7, 8, 9, 102][..], &[101, 5, 102][..]].into_iter(), 0);
            let direct = block_on(Fake.last_hidden_state(&batch)).unwrap();
            let direct = mean_pool_normalize(&direct, &batch.attention_mask, batch.rows, batch.seq, DIM).unwrap();
            let dir = std::env::temp_dir().join(format!("loci-eval-cache-test-{}", std::process::id()));
            let path = dir.join("c.bin");
            let mut cached = CachedRuntime::new(Fake, Some(path.clone())).unwrap();
            let first = block_on(cached.last_hidden_state(&batch)).unwrap();
            cached.save().unwrap();
            let mut reloaded = CachedRuntime::new(Fake, Some(path)).unwrap();
            let second = block_on(reloaded.last_hidden_state(&batch)).unwrap();
            assert_eq!(reloaded.counts(), (2, 0), "served from the file");
            for hidden in [first, second] {
                let v = mean_pool_normalize(&hidden, &batch.attention_mask, batch.rows, batch.seq, DIM).unwrap();
                let same = v.iter().flatten().zip(direct.iter().flatten()).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "cached vectors differ from the model's");
            }
            std::fs::remove_dir_all(dir).ok();
        }

        #[test]
        fn cls_cache_hits_pool_to_bit_identical_vectors() {
            let batch = loci::embed::pad_batch([&[101u32, 7, 8, 9, 102][..], &[101, 5, 102][..]].into_iter(), 0);
            let pool = |h: &[f32]| Pooling::Cls.pool_normalize(h, &batch.attention_mask, batch.rows, batch.seq, DIM);
            let direct = pool(&block_on(Fake.last_hidden_state(&batch)).unwrap()).unwrap();
            let mut cached = CachedRuntime::new(Fake, None).unwrap().pooling(Pooling::Cls);
            block_on(cached.last_hidden_state(&batch)).unwrap();
            let hit = block_on(cached.last_hidden_state(&batch)).unwrap();
            assert_eq!(cached.counts(), (2, 2), "the second call is served from the cache");
            let v = pool(&hit).unwrap();
            // A cache that kept the sum of the states (as for mean pooling) would give another vector here.
            assert!(v.iter().flatten().zip(direct.iter().flatten()).all(|(a, b)| a.to_bits() == b.to_bits()));
        }

        #[test]
        fn parses_both_datasets_dates() {
            assert_eq!(session_time("1:56 pm on 8 May, 2023"), Some(1_683_554_160_000.0));
            assert!(session_time("10:04 am on 19 January, 2023").is_some());
            assert_eq!(session_time("2023/05/20 (Sat) 02:21"), Some(1_684_549_260_000.0));
            assert_eq!(session_time("someday"), None);
        }
    }
}
