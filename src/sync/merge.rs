//! The merge: the state that a set of segments means (docs/SYNC.md, "The merge rules"). A function of the set
//! alone, so every device that holds the same segments holds the same memory, whatever order they came in.

use std::collections::{BTreeMap, HashSet};

use crate::error::{Error, Result};
use crate::sync::log::{DerivedOp, Op, OpId, Segment, TurnOp};
use crate::types::TimeMs;

/// A turn that survives the merge.
#[derive(Debug, Clone, PartialEq)]
pub struct MergedTurn {
    pub id: OpId,
    pub turn: TurnOp,
}

/// A session: its surviving turns, in order, and its title.
#[derive(Debug, Clone, PartialEq)]
pub struct MergedSession {
    pub title: Option<String>,
    pub turns: Vec<MergedTurn>,
}

impl MergedSession {
    pub fn first_time(&self) -> Option<TimeMs> {
        self.turns.first().map(|t| t.turn.time)
    }

    pub fn last_time(&self) -> Option<TimeMs> {
        self.turns.last().map(|t| t.turn.time)
    }
}

/// The episode or fact kept for a key.
#[derive(Debug, Clone, PartialEq)]
pub struct MergedDerived {
    pub id: OpId,
    pub record: DerivedOp,
}

/// What a set of segments means.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Merged {
    /// By session id.
    pub sessions: BTreeMap<String, MergedSession>,
    /// By key.
    pub derived: BTreeMap<String, MergedDerived>,
}

impl Merged {
    pub fn turn_count(&self) -> usize {
        self.sessions.values().map(|s| s.turns.len()).sum()
    }

    /// Every surviving turn, session by session.
    pub fn turns(&self) -> impl Iterator<Item = (&str, &MergedTurn)> + '_ {
        self.sessions.iter().flat_map(|(id, s)| s.turns.iter().map(move |t| (id.as_str(), t)))
    }
}

/// Merges `segments`. The same segment twice counts once; two different ones under one name (device, n) are
/// `SYNC_FAILED`: a device never reuses a number, so one of them is not what that device sent.
pub fn merge<'a>(segments: impl IntoIterator<Item = &'a Segment>) -> Result<Merged> {
    let mut unique: BTreeMap<(&str, u64), &Segment> = BTreeMap::new();
    for s in segments {
        match unique.get(&(s.device.as_str(), s.n)) {
            Some(held) if *held != s => {
                return Err(Error::SyncFailed(format!("device {} sent two different segments {}", s.device, s.n)))
            }
            Some(_) => {}
            None => {
                unique.insert((s.device.as_str(), s.n), s);
            }
        }
    }
    // An operation as (its segment, its index): what causality and order are read from.
    type At<'s> = (&'s Segment, u32);
    let mut turns: Vec<(At, &TurnOp)> = Vec::new();
    let mut titles: Vec<(At, &str, &str)> = Vec::new();
    let mut derived: Vec<(At, &DerivedOp)> = Vec::new();
    let mut forgotten_turns: HashSet<OpId> = HashSet::new();
    let mut session_forgets: BTreeMap<&str, Vec<At>> = BTreeMap::new();
    let mut all_forgets: Vec<At> = Vec::new();
    let mut derived_forgets: BTreeMap<&str, Vec<At>> = BTreeMap::new();
    for s in unique.values() {
        for (i, op) in s.ops.iter().enumerate() {
            let at = (*s, i as u32);
            match op {
                Op::Turn(t) => turns.push((at, t)),
                Op::Title { session, title } => titles.push((at, session, title)),
                Op::ForgetTurn { turn } => {
                    forgotten_turns.insert(turn.clone());
                }
                Op::ForgetSession { session } => session_forgets.entry(session).or_default().push(at),
                Op::ForgetAll => all_forgets.push(at),
                Op::Derived(d) => derived.push((at, d)),
                Op::ForgetDerived { key } => derived_forgets.entry(key).or_default().push(at),
            }
        }
    }
    // Remove-wins: an operation survives a forget only if it happened after it.
    let survives = |(s, i): At, forgets: &[At]| forgets.iter().all(|&(fs, fi)| s.happened_after(i, fs, fi));
    let session_kept = |at: At, session: &str| {
        survives(at, &all_forgets) && survives(at, session_forgets.get(session).map_or(&[][..], Vec::as_slice))
    };

    let mut merged = Merged::default();
    let mut kept_turns: HashSet<OpId> = HashSet::new();
    let mut by_session: BTreeMap<&str, Vec<(At, &TurnOp)>> = BTreeMap::new();
    for (at, t) in turns {
        let id = at.0.op_id(at.1);
        if !forgotten_turns.contains(&id) && session_kept(at, &t.session) {
            kept_turns.insert(id);
            by_session.entry(&t.session).or_default().push((at, t));
        }
    }
    for (session, mut list) in by_session {
        // When they were said, then the causal order: each device's own order holds, two devices interleave.
        list.sort_by(|(a, ta), (b, tb)| {
            ta.time.total_cmp(&tb.time).then_with(|| a.0.order_key(a.1).cmp(&b.0.order_key(b.1)))
        });
        let turns = list.into_iter().map(|((s, i), t)| MergedTurn { id: s.op_id(i), turn: t.clone() }).collect();
        merged.sessions.insert(session.to_string(), MergedSession { title: None, turns });
    }
    // The last title written wins, among those its session's forgets left.
    titles.sort_by(|(a, ..), (b, ..)| a.0.order_key(a.1).cmp(&b.0.order_key(b.1)));
    for (at, session, title) in titles {
        if let (Some(s), true) = (merged.sessions.get_mut(session), session_kept(at, session)) {
            s.title = Some(title.to_string());
        }
    }
    // Per key the first record made wins (the same everywhere); it goes with any of its turns, its forget, or a
    // forgetAll it did not happen after (a record with no sources too).
    derived.sort_by(|(a, _), (b, _)| a.0.order_key(a.1).cmp(&b.0.order_key(b.1)));
    for ((s, i), d) in derived {
        let sources_kept = d.sources.iter().all(|t| kept_turns.contains(t));
        let forgets = derived_forgets.get(d.key.as_str()).map_or(&[][..], Vec::as_slice);
        let kept = sources_kept && survives((s, i), forgets) && survives((s, i), &all_forgets);
        if kept && !merged.derived.contains_key(&d.key) {
            merged.derived.insert(d.key.clone(), MergedDerived { id: s.op_id(i), record: d.clone() });
        }
    }
    Ok(merged)
}
