//! The tuples rows were last seen in, so that complete mode can name the tuple a change leaves
//! when its record does not (an update or delete without a usable `old_value`, deviations.md
//! B5): instead of the template key, which wakes every waiter of the template, the change
//! announces the watch and membership keys of the tuple the row was in.
//!
//! The engine keeps one [`TupleMemory`] per stream. A batch reads it and records what it saw
//! in a [`TupleChanges`]: per row (entity and key, hashed to 128 bits), the keys of its tuple
//! under each template after the change, "in no tuple", or "forgotten" when the batch could not
//! tell (a change in a coarsened batch, an after image that cannot be keyed, a delete). The
//! engine applies the changes of the batch it keeps, in order, so the memory only ever holds
//! what the last change of each row said. A row that is not remembered (never seen since the
//! engine opened, evicted, forgotten) falls back to the template key, as before.
//!
//! Bounded: two generations of at most `capacity / 2` rows each; when the young one is full it
//! becomes the old one and the oldest rows are dropped.

use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use xxhash_rust::xxh3::Xxh3;

/// What a change left a row as, under one template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    /// In the tuple with these watch and membership keys.
    Keys { watch: u64, membership: u64 },
    /// In no tuple (a template field is null).
    NoTuple,
}

/// A row's tuples, by template (the template's 64-bit id).
pub type RowTuples = SmallVec<[(u64, Known); 3]>;

/// A row: its entity and key, hashed (128 bits, so that two rows never share an entry in
/// practice; a shared entry would name the wrong tuple).
pub fn row_id(entity: &[u8], key: &[u8]) -> u128 {
    let mut h = Xxh3::new();
    h.update(&(entity.len() as u64).to_le_bytes());
    h.update(entity);
    h.update(key);
    h.digest128()
}

/// The remembered tuples of a stream's rows.
#[derive(Debug, Clone)]
pub struct TupleMemory {
    young: FxHashMap<u128, RowTuples>,
    old: FxHashMap<u128, RowTuples>,
    /// Rows held in all; 0 remembers nothing.
    capacity: usize,
}

/// Rows a stream's memory holds by default (about 30 MiB at three templates per row).
pub const DEFAULT_CAPACITY: usize = 1 << 18;

impl Default for TupleMemory {
    fn default() -> Self {
        TupleMemory::new(DEFAULT_CAPACITY)
    }
}

impl TupleMemory {
    pub fn new(capacity: usize) -> TupleMemory {
        TupleMemory { young: FxHashMap::default(), old: FxHashMap::default(), capacity }
    }

    /// What the last change of `row` left it as under template `tpl`, if known.
    pub fn get(&self, row: u128, tpl: u64) -> Option<Known> {
        let tuples = self.young.get(&row).or_else(|| self.old.get(&row))?;
        tuples.iter().find(|(t, _)| *t == tpl).map(|(_, k)| *k)
    }

    /// Rows remembered.
    pub fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn clear(&mut self) {
        self.young.clear();
        self.old.clear();
    }

    /// Applies what a batch saw, in its order.
    pub fn apply(&mut self, changes: TupleChanges) {
        if changes.cleared {
            self.clear();
        }
        for (row, tuples) in changes.rows {
            match tuples {
                Some(t) if self.capacity > 0 => self.remember(row, t),
                _ => self.forget(row),
            }
        }
    }

    fn remember(&mut self, row: u128, tuples: RowTuples) {
        self.old.remove(&row);
        if self.young.len() >= self.capacity.div_ceil(2) && !self.young.contains_key(&row) {
            self.old = std::mem::take(&mut self.young);
        }
        self.young.insert(row, tuples);
    }

    fn forget(&mut self, row: u128) {
        self.young.remove(&row);
        self.old.remove(&row);
    }
}

/// What one batch saw of its rows' tuples, to apply to the memory if the batch is kept.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TupleChanges {
    /// A control record (reset, snapshot) came: forget every row first.
    pub cleared: bool,
    /// Per row, in order of first change: its tuples after its last change in the batch, or
    /// `None` to forget it.
    pub rows: Vec<(u128, Option<RowTuples>)>,
    index: FxHashMap<u128, usize>,
}

impl TupleChanges {
    /// The row's state after the changes so far: `Some(Some(..))` from this batch, `Some(None)`
    /// forgotten by this batch (or by a reset in it), `None` when the batch has not seen it.
    pub fn get(&self, row: u128) -> Option<Option<&RowTuples>> {
        match self.index.get(&row) {
            Some(&i) => Some(self.rows[i].1.as_ref()),
            None if self.cleared => Some(None),
            None => None,
        }
    }

    pub fn set(&mut self, row: u128, tuples: Option<RowTuples>) {
        match self.index.get(&row) {
            Some(&i) => self.rows[i].1 = tuples,
            None => {
                self.index.insert(row, self.rows.len());
                self.rows.push((row, tuples));
            }
        }
    }

    /// A control record: every row is forgotten, from here on.
    pub fn clear(&mut self) {
        self.cleared = true;
        self.rows.clear();
        self.index.clear();
    }
}

/// A batch's view of the memory: the batch's own changes first, then the memory.
pub struct TupleView<'m> {
    pub memory: &'m TupleMemory,
    pub changes: TupleChanges,
}

impl TupleView<'_> {
    /// What `row` was left as under `tpl` before the current change.
    pub fn known(&self, row: u128, tpl: u64) -> Option<Known> {
        match self.changes.get(row) {
            Some(Some(tuples)) => tuples.iter().find(|(t, _)| *t == tpl).map(|(_, k)| *k),
            Some(None) => None,
            None => self.memory.get(row, tpl),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(w: u64) -> Known {
        Known::Keys { watch: w, membership: w + 1 }
    }

    fn tuples(list: &[(u64, Known)]) -> Option<RowTuples> {
        Some(list.iter().copied().collect())
    }

    #[test]
    fn a_batch_sees_its_own_changes_before_the_memory_and_the_memory_takes_them_in_order() {
        let (a, b) = (row_id(b"e", b"1"), row_id(b"e", b"2"));
        assert_ne!(row_id(b"e", b"12"), row_id(b"e1", b"2"), "the entity's length is hashed");
        let mut memory = TupleMemory::new(100);
        let mut c = TupleChanges::default();
        c.set(a, tuples(&[(7, keys(10))]));
        memory.apply(c);
        let mut view = TupleView { memory: &memory, changes: TupleChanges::default() };
        assert_eq!(view.known(a, 7), Some(keys(10)));
        assert_eq!(view.known(a, 8), None, "another template is unknown");
        view.changes.set(a, tuples(&[(7, Known::NoTuple)]));
        view.changes.set(b, tuples(&[(7, keys(20))]));
        view.changes.set(a, None);
        assert_eq!(view.known(a, 7), None, "forgotten by the batch");
        assert_eq!(view.known(b, 7), Some(keys(20)));
        memory.apply(view.changes);
        assert_eq!((memory.get(a, 7), memory.get(b, 7)), (None, Some(keys(20))));
    }

    #[test]
    fn a_reset_forgets_every_row_including_the_memory() {
        let (a, b) = (row_id(b"e", b"1"), row_id(b"e", b"2"));
        let mut memory = TupleMemory::new(100);
        let mut c = TupleChanges::default();
        c.set(a, tuples(&[(7, keys(10))]));
        memory.apply(c);
        let mut view = TupleView { memory: &memory, changes: TupleChanges::default() };
        view.changes.set(b, tuples(&[(7, keys(20))]));
        view.changes.clear();
        assert_eq!((view.known(a, 7), view.known(b, 7)), (None, None));
        view.changes.set(b, tuples(&[(7, keys(30))]));
        assert_eq!(view.known(b, 7), Some(keys(30)), "changes after the reset count");
        memory.apply(view.changes);
        assert_eq!((memory.get(a, 7), memory.get(b, 7)), (None, Some(keys(30))));
    }

    #[test]
    fn the_memory_is_bounded_and_drops_the_oldest_rows_first() {
        let mut memory = TupleMemory::new(10);
        for i in 0..23u64 {
            let mut c = TupleChanges::default();
            c.set(row_id(b"e", i.to_string().as_bytes()), tuples(&[(1, keys(i))]));
            memory.apply(c);
            assert!(memory.len() <= 10, "{} rows at {i}", memory.len());
        }
        assert_eq!(memory.get(row_id(b"e", b"22"), 1), Some(keys(22)), "the newest stays");
        assert_eq!(memory.get(row_id(b"e", b"0"), 1), None, "the oldest went");
        // Changing a remembered row keeps one entry for it.
        let mut c = TupleChanges::default();
        c.set(row_id(b"e", b"22"), tuples(&[(1, keys(99))]));
        memory.apply(c);
        assert_eq!(memory.get(row_id(b"e", b"22"), 1), Some(keys(99)));
        let mut none = TupleMemory::new(0);
        let mut c = TupleChanges::default();
        c.set(row_id(b"e", b"1"), tuples(&[(1, keys(1))]));
        none.apply(c);
        assert!(none.is_empty(), "a capacity of 0 remembers nothing");
    }
}
