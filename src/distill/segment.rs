//! Segmentation (Nemori step 1), the pure part: a window of buffered turns, the LLM's partition into episodes
//! (groups of window indices), and what becomes of every index. The model's partition is never trusted blindly:
//! out-of-range and repeated indices are dropped (first occurrence wins), empty groups vanish, and no turn is ever
//! lost — the reference code drops the indices the model leaves out; here they carry over to the next window, and
//! in a session's last window they join the neighbouring episode.

/// What to do with one window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Episodes to narrate now: window indices, ascending within a group, groups by first index.
    pub groups: Vec<Vec<usize>>,
    /// Indices that stay buffered for the next window, ascending.
    pub carry: Vec<usize>,
    /// How many indices the repair dropped (out of range or repeated).
    pub repaired: usize,
}

/// Repairs a raw partition of `n` indices: keeps in-range indices the first time they appear, sorts each group,
/// drops empty groups, orders groups by their first index. Returns the groups and the number of dropped entries.
pub fn repair(raw: &[Vec<i64>], n: usize) -> (Vec<Vec<usize>>, usize) {
    let mut seen = vec![false; n];
    let mut dropped = 0;
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for g in raw {
        let mut out = Vec::new();
        for &i in g {
            match usize::try_from(i) {
                Ok(i) if i < n && !seen[i] => {
                    seen[i] = true;
                    out.push(i);
                }
                _ => dropped += 1,
            }
        }
        out.sort_unstable();
        if !out.is_empty() {
            groups.push(out);
        }
    }
    crate::sort::sort_by_key(&mut groups, |g| g[0]);
    (groups, dropped)
}

/// Plans a window of `n` turns from the model's partition. `last`: the session ended or a flush asked, so nothing
/// waits: indices the model left out join the group of their nearest earlier index (else the nearest later one).
/// Otherwise left-out indices carry over, and so does the group holding the window's last turn (it may be an
/// unfinished episode) unless it is the only group — each window makes progress.
///
/// `Err` when the partition has no valid group at all (the caller retries the call).
pub fn plan(raw: &[Vec<i64>], n: usize, last: bool) -> Result<Plan, String> {
    let (mut groups, repaired) = repair(raw, n);
    if groups.is_empty() {
        return Err(format!("the partition names none of the {n} turns"));
    }
    let mut owner: Vec<Option<usize>> = vec![None; n];
    for (g, idx) in groups.iter().enumerate() {
        for &i in idx {
            owner[i] = Some(g);
        }
    }
    let left_out: Vec<usize> = (0..n).filter(|&i| owner[i].is_none()).collect();
    if last {
        for &i in &left_out {
            let before = (0..i).rev().find_map(|j| owner[j]);
            let after = (i + 1..n).find_map(|j| owner[j]);
            let g = before.or(after).expect("at least one group exists");
            groups[g].push(i);
        }
        groups.iter_mut().for_each(|g| g.sort_unstable());
        return Ok(Plan { groups, carry: Vec::new(), repaired });
    }
    let mut carry = left_out;
    if groups.len() > 1 {
        if let Some(g) = owner[n - 1] {
            carry.extend(groups.remove(g));
        }
    }
    carry.sort_unstable();
    Ok(Plan { groups, carry, repaired })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_indices(p: &Plan) -> Vec<usize> {
        let mut v: Vec<usize> = p.groups.iter().flatten().chain(&p.carry).copied().collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn repair_drops_out_of_range_and_repeated_indices() {
        let (groups, dropped) = repair(&[vec![3, 1, 1], vec![-1, 2, 9], vec![3], vec![0]], 4);
        assert_eq!(groups, vec![vec![0], vec![1, 3], vec![2]]);
        assert_eq!(dropped, 4, "1 repeated, -1 and 9 out of range, 3 in two groups");
    }

    #[test]
    fn left_out_turns_and_an_unfinished_last_group_carry_over() {
        // 6 turns; the model leaves out 2 and its last group ends the window.
        let p = plan(&[vec![0, 1], vec![3], vec![4, 5]], 6, false).unwrap();
        assert_eq!(p.groups, vec![vec![0, 1], vec![3]]);
        assert_eq!(p.carry, vec![2, 4, 5]);
        assert_eq!(all_indices(&p), (0..6).collect::<Vec<_>>(), "no turn dropped");
    }

    #[test]
    fn a_single_group_is_never_held_back_so_each_window_progresses() {
        let p = plan(&[vec![0, 1, 2, 3]], 5, false).unwrap();
        assert_eq!(p.groups, vec![vec![0, 1, 2, 3]]);
        assert_eq!(p.carry, vec![4]);
        let p = plan(&[vec![0, 1, 2, 3, 4]], 5, false).unwrap();
        assert_eq!((p.groups.len(), p.carry.len()), (1, 0));
    }

    #[test]
    fn in_a_last_window_every_turn_joins_an_episode() {
        let p = plan(&[vec![2, 3], vec![6, 6, 17]], 8, true).unwrap();
        assert!(p.carry.is_empty());
        assert_eq!(p.groups, vec![vec![0, 1, 2, 3, 4, 5], vec![6, 7]]);
        assert_eq!(p.repaired, 2);
    }

    #[test]
    fn a_partition_without_any_valid_index_is_an_error() {
        assert!(plan(&[vec![10, 11], vec![]], 4, true).is_err());
        assert!(plan(&[], 4, false).is_err());
    }
}
