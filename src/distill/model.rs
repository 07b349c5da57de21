//! What distillation does with its records: a fact's history, and forgetting (a fact, an episode, a session's
//! turns) as one [`DistillWrite`] that cuts every link. The records themselves are the data model
//! (`crate::types::distilled`), re-exported here.

use crate::sort;
use std::collections::{BTreeMap, BTreeSet, HashSet};

pub use crate::types::distilled::*;

impl DistillState {
    /// A fact's lineage, oldest first: every fact it superseded (transitively) and every fact that superseded it,
    /// up to the current one. Empty when the id is unknown.
    pub fn history(&self, id: u64) -> Vec<Fact> {
        if !self.facts.contains_key(&id) {
            return Vec::new();
        }
        let mut seen = BTreeSet::new();
        let mut stack = vec![id];
        while let Some(f) = stack.pop() {
            if !seen.insert(f) {
                continue;
            }
            if let Some(fact) = self.facts.get(&f) {
                stack.extend(fact.supersedes.iter().copied());
                stack.extend(fact.superseded_by);
            }
        }
        let mut out: Vec<Fact> = seen.iter().filter_map(|f| self.facts.get(f)).cloned().collect();
        sort::sort_by(&mut out, |a, b| a.ingested.total_cmp(&b.ingested).then(a.id.cmp(&b.id)));
        out
    }

    /// Every turn id some episode covers.
    pub fn covered_turns(&self) -> HashSet<u64> {
        self.episodes.values().flat_map(|e| e.turn_ids.iter().copied()).collect()
    }

    /// Forgets one fact: the record is erased (the user asked), and links to it are cut so no chain dangles.
    pub fn forget_fact(&self, id: u64) -> DistillWrite {
        let mut w = DistillWrite::default();
        if !self.facts.contains_key(&id) {
            return w;
        }
        w.delete_facts.push(id);
        for f in self.facts.values().filter(|f| f.id != id) {
            if f.supersedes.contains(&id) || f.superseded_by == Some(id) {
                let mut f = f.clone();
                f.supersedes.retain(|&x| x != id);
                if f.superseded_by == Some(id) {
                    f.superseded_by = None;
                }
                w.facts.push(f);
            }
        }
        w
    }

    /// Forgets one episode and the facts distilled only from it. Its turns stay (they are the user's messages) but
    /// are not distilled again.
    pub fn forget_episode(&self, id: u64) -> DistillWrite {
        let mut w = DistillWrite::default();
        if !self.episodes.contains_key(&id) {
            return w;
        }
        w.delete_episodes.push(id);
        self.drop_episode_facts(&HashSet::from([id]), &HashSet::new(), &mut w);
        self.drop_jobs_mentioning(&HashSet::from([id]), &HashSet::new(), &mut w);
        w
    }

    /// Forgets what was distilled from `turns` (a session being forgotten): episodes made only of them go; an
    /// episode that also covers other turns goes too (its narrative tells the forgotten text) and its other turns
    /// are queued for segmentation again; facts whose evidence lies only in `turns` go, others lose those turn ids.
    /// The forgotten turns leave the buffer and every queued job.
    pub fn forget_turns(&self, turns: &HashSet<u64>) -> DistillWrite {
        let mut w = DistillWrite::default();
        let mut meta = self.meta.clone();
        meta.pending.retain(|t| !turns.contains(t));
        let mut gone = HashSet::new();
        let mut requeue = Vec::new();
        for e in self.episodes.values() {
            if e.turn_ids.iter().any(|t| turns.contains(t)) {
                gone.insert(e.id);
                w.delete_episodes.push(e.id);
                requeue.extend(e.turn_ids.iter().copied().filter(|t| !turns.contains(t)));
            }
        }
        requeue.sort_unstable();
        for t in requeue {
            if !meta.pending.contains(&t) {
                meta.pending.push(t);
            }
        }
        self.drop_episode_facts(&gone, turns, &mut w);
        self.drop_jobs_mentioning(&gone, turns, &mut w);
        w.meta = Some(meta);
        w
    }

    /// Facts tied to `episodes` or `turns`. Forgetting episodes (`turns` empty): a fact goes when all its
    /// episodes go, else it loses them and their turns. Forgetting turns: a fact goes when none of its evidence
    /// turns is left, else it loses those turns and the removed episodes.
    fn drop_episode_facts(&self, episodes: &HashSet<u64>, turns: &HashSet<u64>, w: &mut DistillWrite) {
        let by_episode: HashSet<u64> = if turns.is_empty() {
            episodes.iter().filter_map(|e| self.episodes.get(e)).flat_map(|e| e.turn_ids.iter().copied()).collect()
        } else {
            HashSet::new()
        };
        let mut deleted = HashSet::new();
        let mut kept = Vec::new();
        for f in self.facts.values() {
            let touched =
                f.episode_ids.iter().any(|e| episodes.contains(e)) || f.turn_ids.iter().any(|t| turns.contains(t));
            if !touched {
                continue;
            }
            let episode_ids: Vec<u64> = f.episode_ids.iter().copied().filter(|e| !episodes.contains(e)).collect();
            let turn_ids: Vec<u64> =
                f.turn_ids.iter().copied().filter(|t| !turns.contains(t) && !by_episode.contains(t)).collect();
            if turn_ids.is_empty() || (turns.is_empty() && episode_ids.is_empty()) {
                deleted.insert(f.id);
                w.delete_facts.push(f.id);
            } else {
                let mut f = f.clone();
                f.turn_ids = turn_ids;
                f.episode_ids = episode_ids;
                kept.push(f);
            }
        }
        // Cut links to deleted facts.
        let mut touched: BTreeMap<u64, Fact> = crate::sort::map_from(kept.into_iter().map(|f| (f.id, f)));
        for f in self.facts.values() {
            if deleted.contains(&f.id) {
                continue;
            }
            let links = f.supersedes.iter().any(|x| deleted.contains(x))
                || f.superseded_by.is_some_and(|x| deleted.contains(&x));
            if links {
                let entry = touched.entry(f.id).or_insert_with(|| f.clone());
                entry.supersedes.retain(|x| !deleted.contains(x));
                if entry.superseded_by.is_some_and(|x| deleted.contains(&x)) {
                    entry.superseded_by = None;
                }
            }
        }
        w.facts.extend(touched.into_values());
    }

    /// Queued jobs that name forgotten episodes or turns are trimmed (or dropped when nothing is left).
    fn drop_jobs_mentioning(&self, episodes: &HashSet<u64>, turns: &HashSet<u64>, w: &mut DistillWrite) {
        for j in self.jobs.values() {
            let mut j2 = j.clone();
            match &mut j2.work {
                JobKind::Segment { .. } => continue,
                JobKind::Narrate { groups } => {
                    groups.iter_mut().for_each(|g| g.retain(|t| !turns.contains(t)));
                    groups.retain(|g| !g.is_empty());
                    if groups.is_empty() {
                        w.delete_jobs.push(j.id);
                        continue;
                    }
                }
                JobKind::Distill { items } => {
                    items.retain(|i| !episodes.contains(&i.episode));
                    items.iter_mut().for_each(|i| i.turn_ids.retain(|t| !turns.contains(t)));
                    items.retain(|i| !i.turn_ids.is_empty());
                    if items.is_empty() {
                        w.delete_jobs.push(j.id);
                        continue;
                    }
                }
            }
            if j2 != *j {
                w.jobs.push(j2);
            }
        }
    }
}
