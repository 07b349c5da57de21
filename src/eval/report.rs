//! Aggregation of per-question results into the benchmark report: for k in [`KS`] = 3, 5, 10, the plain means
//! ×100 of `recall_all@k`, `recall_any@k` and `ndcg_any@k` (see [`super::metrics`]), overall and per category.
//!
//! JSON shape of a [`Report`] (keys of the metric maps exactly `recall_all@3`, `recall_any@3`, `ndcg_any@3`,
//! `recall_all@5`, … in that order; plus `n`, the number of questions):
//!
//! ```json
//! {"overall": {"n": 1986, "recall_all@3": 57.45, "recall_any@3": 70.1, "ndcg_any@3": 59.16, "recall_all@5": …},
//!  "per_category": {"1": {"n": 282, "recall_all@3": …}, "2": {…}}}
//! ```

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use super::metrics::{ndcg_any, recall_all, recall_any};
use super::EvalQuestion;

/// The cut-offs reported.
pub const KS: [usize; 3] = [3, 5, 10];

/// The metric names, in report order.
pub const METRICS: [&str; 3] = ["recall_all", "recall_any", "ndcg_any"];

/// The retrieval outcome of one question.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QuestionResult {
    pub question_id: String,
    pub category: String,
    /// Session ids, best first (at least the top `max(KS)` = 10, or the whole corpus when it is smaller).
    pub ranking: Vec<String>,
    /// Gold session ids.
    pub gold: Vec<String>,
}

impl QuestionResult {
    /// The result of `question` for a ranking of its corpus's session ids.
    pub fn new(question: &EvalQuestion, ranking: Vec<String>) -> Self {
        QuestionResult {
            question_id: question.id.clone(),
            category: question.category.clone(),
            ranking,
            gold: question.gold_sessions.clone(),
        }
    }

    /// The metric `name` (one of [`METRICS`]) at `k` for this question, in [0, 1].
    pub fn metric(&self, name: &str, k: usize) -> f64 {
        match name {
            "recall_all" => recall_all(&self.ranking, &self.gold, k),
            "recall_any" => recall_any(&self.ranking, &self.gold, k),
            "ndcg_any" => ndcg_any(&self.ranking, &self.gold, k),
            _ => panic!("unknown metric {name}"),
        }
    }
}

/// Means ×100 of the nine metrics; serialises as a map with keys `recall_all@3`, `recall_any@3`, `ndcg_any@3`,
/// `recall_all@5`, …, `ndcg_any@10`, in that order.
#[derive(Debug, Clone, PartialEq)]
pub struct Metrics {
    /// `values[ki][mi]` = mean ×100 of metric `METRICS[mi]` at `KS[ki]` (NaN over zero questions).
    pub values: [[f64; 3]; 3],
}

impl Metrics {
    /// The keys in order: `recall_all@3`, `recall_any@3`, `ndcg_any@3`, `recall_all@5`, …
    pub fn keys() -> Vec<String> {
        KS.iter().flat_map(|k| METRICS.iter().map(move |m| format!("{m}@{k}"))).collect()
    }

    /// The value of a key such as `"recall_all@5"`.
    pub fn get(&self, key: &str) -> Option<f64> {
        let (m, k) = key.split_once('@')?;
        let k: usize = k.parse().ok()?;
        let ki = KS.iter().position(|&x| x == k)?;
        let mi = METRICS.iter().position(|&x| x == m)?;
        Some(self.values[ki][mi])
    }

    fn entries(&self) -> impl Iterator<Item = (String, f64)> + '_ {
        KS.iter().enumerate().flat_map(move |(ki, k)| {
            METRICS.iter().enumerate().map(move |(mi, m)| (format!("{m}@{k}"), self.values[ki][mi]))
        })
    }
}

impl Serialize for Metrics {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(KS.len() * METRICS.len()))?;
        for (key, value) in self.entries() {
            map.serialize_entry(&key, &value)?;
        }
        map.end()
    }
}

/// The scores of a group of questions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scores {
    /// Number of questions averaged.
    pub n: usize,
    #[serde(flatten)]
    pub metrics: Metrics,
}

impl Scores {
    /// Averages the questions (plain mean ×100).
    pub fn of<'a>(results: impl IntoIterator<Item = &'a QuestionResult>) -> Scores {
        let mut sums = [[0.0f64; 3]; 3];
        let mut n = 0;
        for r in results {
            n += 1;
            for (ki, &k) in KS.iter().enumerate() {
                for (mi, m) in METRICS.iter().enumerate() {
                    sums[ki][mi] += r.metric(m, k);
                }
            }
        }
        let values = sums.map(|row| row.map(|s| s * 100.0 / n as f64));
        Scores { n, metrics: Metrics { values } }
    }

    /// The value of a metric key such as `"ndcg_any@10"`.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.metrics.get(key)
    }
}

/// The report: overall scores and scores per category (categories ordered numerically when they are numbers,
/// then by name).
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub overall: Scores,
    pub per_category: Vec<(String, Scores)>,
}

impl Serialize for Report {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct PerCategory<'a>(&'a [(String, Scores)]);
        impl Serialize for PerCategory<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(Some(self.0.len()))?;
                for (c, s) in self.0 {
                    map.serialize_entry(c, s)?;
                }
                map.end()
            }
        }
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("overall", &self.overall)?;
        map.serialize_entry("per_category", &PerCategory(&self.per_category))?;
        map.end()
    }
}

/// Averages per-question results overall and per category.
pub fn aggregate(results: &[QuestionResult]) -> Report {
    let mut categories: Vec<&str> = results.iter().map(|r| r.category.as_str()).collect();
    categories.sort_by_key(|c| (c.parse::<i64>().map_or((1, 0), |n| (0, n)), c.to_string()));
    categories.dedup();
    let per_category = categories
        .into_iter()
        .map(|c| {
            let scores = Scores::of(results.iter().filter(|r| r.category == c));
            (c.to_string(), scores)
        })
        .collect();
    Report { overall: Scores::of(results), per_category }
}

impl Report {
    /// The report as a JSON value (see the module docs for its shape).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a report always serialises")
    }

    /// A readable table: one row per category then `all`, one column per metric (2 decimals). `label` names a
    /// category (e.g. [`super::locomo::category_name`]); `None` keeps the raw category.
    pub fn format_table(&self, title: &str, label: fn(&str) -> Option<&'static str>) -> String {
        let headers: Vec<String> = Metrics::keys();
        let row_name = |c: &str| match label(c) {
            Some(l) => format!("{c} {l}"),
            None => c.to_string(),
        };
        let mut rows: Vec<(String, &Scores)> = self.per_category.iter().map(|(c, s)| (row_name(c), s)).collect();
        rows.push(("all".to_string(), &self.overall));

        let name_w = rows.iter().map(|(n, _)| n.chars().count()).chain(["category".len()]).max().unwrap_or(8);
        let col_w = headers.iter().map(String::len).max().unwrap_or(6).max(6);

        let mut out = String::new();
        out.push_str(title);
        out.push('\n');
        out.push_str(&format!("{:<name_w$} {:>5}", "category", "n"));
        for h in &headers {
            out.push_str(&format!(" {h:>col_w$}"));
        }
        out.push('\n');
        let rule_len = name_w + 6 + headers.len() * (col_w + 1);
        out.push_str(&"-".repeat(rule_len));
        out.push('\n');
        for (name, s) in rows {
            out.push_str(&format!("{name:<name_w$} {:>5}", s.n));
            for (_, v) in s.metrics.entries() {
                out.push_str(&format!(" {v:>col_w$.2}"));
            }
            out.push('\n');
        }
        out
    }
}

/// Prints [`Report::format_table`] to stdout.
pub fn print_table(title: &str, report: &Report, label: fn(&str) -> Option<&'static str>) {
    print!("{}", report.format_table(title, label));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(category: &str, ranking: &[&str], gold: &[&str]) -> QuestionResult {
        QuestionResult {
            question_id: String::new(),
            category: category.to_string(),
            ranking: ranking.iter().map(|s| s.to_string()).collect(),
            gold: gold.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    fn tiny() -> Vec<QuestionResult> {
        let r: Vec<String> = (1..=12).map(|i| format!("s{i}")).collect();
        let r: Vec<&str> = r.iter().map(String::as_str).collect();
        vec![
            // category 2: gold ranked 1st → all metrics 1 at every k.
            result("2", &r, &["s1"]),
            // category 10: gold at ranks 2 and 4.
            result("10", &r, &["s2", "s4"]),
            // category 2: gold ranked 11th → all 0 at k ≤ 10.
            result("2", &r, &["s11"]),
            // category 10: empty gold → recall_all 1, others 0.
            result("10", &r, &[]),
        ]
    }

    #[test]
    fn aggregation_overall_and_per_category() {
        let report = aggregate(&tiny());
        assert_eq!(report.overall.n, 4);
        let cats: Vec<&str> = report.per_category.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(cats, vec!["2", "10"]); // numeric order

        // q2 at k=3: any 1, all 0, ndcg = 1 / (1 + 1) = 0.5; at k=5 and 10: all 1, ndcg = (1 + 1/2) / 2 = 0.75.
        let o = &report.overall;
        assert!(close(o.get("recall_all@3").unwrap(), (1.0 + 0.0 + 0.0 + 1.0) / 4.0 * 100.0));
        assert!(close(o.get("recall_any@3").unwrap(), (1.0 + 1.0 + 0.0 + 0.0) / 4.0 * 100.0));
        assert!(close(o.get("ndcg_any@3").unwrap(), (1.0 + 0.5) / 4.0 * 100.0));
        assert!(close(o.get("recall_all@5").unwrap(), 75.0));
        assert!(close(o.get("ndcg_any@10").unwrap(), (1.0 + 0.75) / 4.0 * 100.0));

        let (_, c2) = &report.per_category[0];
        assert_eq!(c2.n, 2);
        assert!(close(c2.get("recall_all@10").unwrap(), 50.0));
        assert!(close(c2.get("ndcg_any@10").unwrap(), 50.0));
        let (_, c10) = &report.per_category[1];
        assert!(close(c10.get("recall_all@3").unwrap(), 50.0));
        assert!(close(c10.get("recall_all@5").unwrap(), 100.0));
        assert!(close(c10.get("recall_any@5").unwrap(), 50.0));
        assert!(close(c10.get("ndcg_any@5").unwrap(), 37.5));
    }

    #[test]
    fn json_keys_are_exact_and_ordered() {
        let report = aggregate(&tiny());
        let text = serde_json::to_string(&report.overall.metrics).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        let mut expected = Metrics::keys();
        assert_eq!(expected[..3], ["recall_all@3", "recall_any@3", "ndcg_any@3"].map(String::from));
        // serialisation order follows KS × METRICS
        let positions: Vec<usize> = expected.iter().map(|k| text.find(k.as_str()).unwrap()).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]));
        keys.sort();
        expected.sort();
        assert_eq!(keys, expected);

        let json = report.to_json();
        assert_eq!(json["overall"]["n"], 4);
        assert_eq!(json["overall"]["recall_all@5"], 75.0);
        assert_eq!(json["per_category"]["10"]["ndcg_any@5"], 37.5);
        assert_eq!(json["per_category"]["2"]["n"], 2);
    }

    #[test]
    fn table_lists_categories_and_all() {
        let report = aggregate(&tiny());
        let t = report.format_table("tiny", |c| if c == "2" { Some("temporal") } else { None });
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "tiny");
        assert!(lines[1].contains("recall_all@3") && lines[1].contains("ndcg_any@10"));
        assert!(lines[3].starts_with("2 temporal"));
        assert!(lines[4].starts_with("10 "));
        assert!(lines[5].starts_with("all ") && lines[5].contains("75.00"));
        print_table("tiny", &report, |_| None);
    }

    #[test]
    fn empty_results_give_nan_means() {
        let report = aggregate(&[]);
        assert_eq!(report.overall.n, 0);
        assert!(report.overall.get("recall_all@3").unwrap().is_nan());
        assert!(report.per_category.is_empty());
    }
}
