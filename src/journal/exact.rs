//! Routing keys and the recent exact history (J10).
//!
//! A routing key is 16 hex characters (either case, surrounding JavaScript whitespace ignored);
//! it is kept as the u64 it spells, which is a one-to-one image of its lowercase text. The
//! history holds, for each of the last generations, the exact routing keys flushed in it, so a
//! wait on literal keys can be answered without the bloom's false positives, or "unknown" when
//! the history does not cover the range.
//!
//! Bounded (B15): besides the reference's generation limit, the history keeps at most
//! [`MAX_HISTORY_KEYS`] keys in all, dropping its oldest generations first; an older cursor then
//! gets "unknown" and the caller falls back to the bloom, which is safe.

use std::collections::VecDeque;

use super::cursor::js_trim;

/// Most routing keys kept across the whole exact history (8 MiB of keys).
pub const MAX_HISTORY_KEYS: usize = 1 << 20;

/// Parses a 16-hex routing key (`trim`, either case), as J6 and J11 accept them.
pub fn parse_routing_key(s: &str) -> Option<u64> {
    let t = js_trim(s);
    if t.len() != 16 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(t, 16).ok()
}

/// The lowercase 16-hex text of a routing key.
pub fn format_routing_key(key: u64) -> String {
    format!("{key:016x}")
}

struct ExactGeneration {
    generation: u32,
    /// Sorted, unique.
    keys: Box<[u64]>,
    overflow: bool,
}

pub struct ExactHistory {
    entries: VecDeque<ExactGeneration>,
    max_generations: usize,
    max_keys: usize,
    keys: usize,
}

impl ExactHistory {
    pub fn new(max_generations: usize) -> ExactHistory {
        Self::with_key_limit(max_generations, MAX_HISTORY_KEYS)
    }

    pub fn with_key_limit(max_generations: usize, max_keys: usize) -> ExactHistory {
        ExactHistory { entries: VecDeque::new(), max_generations: max_generations.max(1), max_keys, keys: 0 }
    }

    /// Records the flushed generation `generation` (J8 step 6).
    pub fn push(&mut self, generation: u32, mut keys: Vec<u64>, overflow: bool) {
        keys.sort_unstable();
        keys.dedup();
        self.keys += keys.len();
        self.entries.push_back(ExactGeneration { generation, keys: keys.into_boxed_slice(), overflow });
        while self.entries.len() > self.max_generations || (self.keys > self.max_keys && self.entries.len() > 1) {
            if let Some(old) = self.entries.pop_front() {
                self.keys -= old.keys.len();
            }
        }
    }

    /// The history, oldest first: `(generation, overflow, keys)`.
    pub fn entries(&self) -> Vec<(u32, bool, Vec<u64>)> {
        self.entries.iter().map(|e| (e.generation, e.overflow, e.keys.to_vec())).collect()
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.keys = 0;
    }

    /// Generations currently kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// J10: `Some(true)` if a watched key was flushed in a generation after `since`,
    /// `Some(false)` if the history proves none was, `None` when it cannot tell.
    /// `watched` holds the parsed keys (the caller drops the ones that are not 16 hex).
    pub fn touched_since_any(&self, watched: &[u64], since: u32, current: u32, last_overflow: u32) -> Option<bool> {
        if watched.is_empty() || since >= current {
            return Some(false);
        }
        if since < last_overflow {
            return None;
        }
        let oldest = self.entries.front()?.generation;
        let first_needed = since as u64 + 1;
        if first_needed < oldest as u64 {
            return None;
        }
        let mut expected = first_needed;
        for entry in &self.entries {
            if (entry.generation as u64) < first_needed {
                continue;
            }
            if entry.generation as u64 != expected || entry.overflow {
                return None;
            }
            if watched.iter().any(|k| entry.keys.binary_search(k).is_ok()) {
                return Some(true);
            }
            expected += 1;
        }
        if expected > current as u64 {
            Some(false)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_keys_parse_like_the_reference() {
        assert_eq!(parse_routing_key("00000000000000ff"), Some(255));
        assert_eq!(parse_routing_key(" 00000000000000FF\t"), Some(255));
        assert_eq!(parse_routing_key("00000000000000f"), None);
        assert_eq!(parse_routing_key("00000000000000fg"), None);
        assert_eq!(parse_routing_key("+0000000000000ff"), None);
        assert_eq!(parse_routing_key("00000000000000fff"), None);
        assert_eq!(format_routing_key(255), "00000000000000ff");
    }

    fn history() -> ExactHistory {
        // Generations 1..=5; key 7 in 2, key 8 in 4, 5 empty.
        let mut h = ExactHistory::new(16);
        h.push(1, vec![1], false);
        h.push(2, vec![7, 3], false);
        h.push(3, vec![], false);
        h.push(4, vec![8], false);
        h.push(5, vec![], false);
        h
    }

    #[test]
    fn answers_follow_j10() {
        let h = history();
        assert_eq!(h.touched_since_any(&[], 0, 5, 0), Some(false));
        assert_eq!(h.touched_since_any(&[7], 5, 5, 0), Some(false));
        assert_eq!(h.touched_since_any(&[7], 9, 5, 0), Some(false));
        assert_eq!(h.touched_since_any(&[7], 1, 5, 0), Some(true));
        assert_eq!(h.touched_since_any(&[7], 2, 5, 0), Some(false));
        assert_eq!(h.touched_since_any(&[9, 8], 2, 5, 0), Some(true));
        assert_eq!(h.touched_since_any(&[9], 0, 5, 0), Some(false));
        // An overflow after `since` → unknown.
        assert_eq!(h.touched_since_any(&[9], 2, 5, 3), None);
        // The journal is ahead of the history (a generation not recorded yet) → unknown.
        assert_eq!(h.touched_since_any(&[9], 2, 6, 0), None);
        assert_eq!(ExactHistory::new(16).touched_since_any(&[9], 0, 1, 0), None);
    }

    #[test]
    fn trimmed_history_answers_unknown_for_old_cursors() {
        let mut h = ExactHistory::new(3);
        for g in 1..=5 {
            h.push(g, vec![g as u64], false);
        }
        assert_eq!(h.len(), 3);
        assert_eq!(h.touched_since_any(&[9], 1, 5, 0), None);
        assert_eq!(h.touched_since_any(&[9], 2, 5, 0), Some(false));
        assert_eq!(h.touched_since_any(&[4], 2, 5, 0), Some(true));
    }

    #[test]
    fn overflow_entries_and_gaps_are_unknown() {
        let mut h = ExactHistory::new(16);
        h.push(1, vec![1], false);
        h.push(2, vec![], true);
        h.push(3, vec![3], false);
        assert_eq!(h.touched_since_any(&[3], 0, 3, 0), None);
        assert_eq!(h.touched_since_any(&[1], 0, 3, 0), Some(true));
        assert_eq!(h.touched_since_any(&[3], 2, 3, 0), Some(true));
        let mut g = ExactHistory::new(16);
        g.push(1, vec![], false);
        g.push(3, vec![3], false);
        assert_eq!(g.touched_since_any(&[3], 0, 3, 0), None);
    }

    #[test]
    fn total_key_budget_drops_oldest_generations() {
        let mut h = ExactHistory::with_key_limit(100, 5);
        h.push(1, vec![1, 2, 3], false);
        h.push(2, vec![4, 5], false);
        assert_eq!(h.len(), 2);
        h.push(3, vec![6], false);
        assert_eq!(h.len(), 2);
        assert_eq!(h.touched_since_any(&[1], 0, 3, 0), None);
        assert_eq!(h.touched_since_any(&[6], 1, 3, 0), Some(true));
        // A single oversized generation is still kept.
        h.push(4, (10..20).collect(), false);
        assert_eq!(h.len(), 1);
        assert_eq!(h.touched_since_any(&[15], 3, 4, 0), Some(true));
    }
}
