//! What a memory must change to hold a merged state (docs/SYNC.md, "Applying a merge"): the difference between
//! what it holds, by operation id, and the merge. Pure: the memory carries it out, with its own ids and units.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use crate::sync::log::OpId;
use crate::sync::merge::{Merged, MergedDerived, MergedTurn};

/// What a memory holds, as the sync knows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Held {
    /// Per session, its turns' operation ids in the memory's order.
    pub sessions: BTreeMap<String, Vec<OpId>>,
    /// Per key, the operation of the episode or fact the memory holds for it.
    pub derived: BTreeMap<String, OpId>,
}

/// A session whose order changes: the memory rewrites it from `from` on (the positions and the units there).
#[derive(Debug, Clone, PartialEq)]
pub struct SessionChange {
    /// The first position (among the turns that stay) where the memory's order and the merge's differ.
    pub from: usize,
    /// The session's turns from `from` on, in the merged order: those the memory holds keep their own ids, the
    /// others are new to it.
    pub tail: Vec<MergedTurn>,
}

/// The changes, in the order to make them: forget, then rewrite sessions, then derived records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Turns the memory holds that the merge has forgotten.
    pub forget: Vec<OpId>,
    /// Sessions with turns new to the memory, or in another order, by id.
    pub sessions: BTreeMap<String, SessionChange>,
    /// Episodes and facts to put (new keys, or another device's record won the key).
    pub put_derived: Vec<MergedDerived>,
    /// Keys whose record the memory must delete.
    pub delete_derived: Vec<String>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self == &Plan::default()
    }
}

/// What `held` must change to be `merged`.
pub fn plan(held: &Held, merged: &Merged) -> Plan {
    let kept: HashSet<&OpId> = merged.turns().map(|(_, t)| &t.id).collect();
    let mut out = Plan::default();
    for ids in held.sessions.values() {
        out.forget.extend(ids.iter().filter(|id| !kept.contains(id)).cloned());
    }
    for (session, merged_session) in &merged.sessions {
        let staying: Vec<&OpId> =
            held.sessions.get(session).into_iter().flatten().filter(|id| kept.contains(id)).collect();
        let same = staying.iter().zip(&merged_session.turns).take_while(|(id, t)| **id == &t.id).count();
        if same < staying.len() || same < merged_session.turns.len() {
            let tail = merged_session.turns[same..].to_vec();
            out.sessions.insert(session.clone(), SessionChange { from: same, tail });
        }
    }
    for (key, record) in &merged.derived {
        if held.derived.get(key) != Some(&record.id) {
            out.put_derived.push(record.clone());
        }
    }
    let merged_keys: BTreeSet<&String> = merged.derived.keys().collect();
    out.delete_derived = held.derived.keys().filter(|k| !merged_keys.contains(k)).cloned().collect();
    out
}
