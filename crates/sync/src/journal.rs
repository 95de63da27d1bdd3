//! Change journals: how a source tells a puller what changed since its cursor.
//!
//! A journaled table numbers every change with a sequence number and remembers, per entry, the
//! number of its latest change. The journal lists the entry index of each recent change, in
//! sequence order; a pull walks it from the cursor and sends each entry once, at its latest
//! change.
//! A cursor older than the journal, or from another incarnation of the source (`epoch`), gets a
//! full copy in pages, followed by the changes made meanwhile.

use std::collections::VecDeque;
use std::ops::Range;

use geocount_model::wire::Cursor;

/// The recent changes of one table.
#[derive(Debug)]
pub struct ChangeJournal {
    epoch: u64,
    seq: u64,
    /// The entry index of changes `seq - log.len() + 1 ..= seq`, oldest first. Sequence numbers
    /// run without gaps, so each change's is its position: 4 bytes a change, not 16.
    log: VecDeque<u32>,
    capacity: usize,
    /// The sequence number of the newest change forgotten (0: none yet).
    floor: u64,
}

/// The default number of changes a journal remembers.
pub const DEFAULT_JOURNAL_CAPACITY: usize = 1 << 20;

impl Default for ChangeJournal {
    fn default() -> Self {
        Self::with_capacity(DEFAULT_JOURNAL_CAPACITY)
    }
}

impl ChangeJournal {
    /// A journal remembering up to `capacity` changes, with a random epoch.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            epoch: rand::random(),
            seq: 0,
            log: VecDeque::new(),
            capacity: capacity.max(1),
            floor: 0,
        }
    }

    /// Records a change of entry `index`; returns its sequence number, which the table keeps
    /// as the entry's latest.
    pub fn record(&mut self, index: usize) -> u64 {
        if self.log.len() == self.capacity {
            self.floor = self.first_seq();
            self.log.pop_front();
        }
        self.seq += 1;
        self.log.push_back(index as u32);
        self.seq
    }

    /// The sequence number of the oldest change remembered (`seq + 1` when none is).
    fn first_seq(&self) -> u64 {
        self.seq + 1 - self.log.len() as u64
    }

    /// The latest sequence number.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// This incarnation's epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
}

/// A table whose changes a [`ChangeJournal`] records.
pub trait Journaled {
    /// What a page carries per entry.
    type Item;

    /// The sequence number of entry `index`'s latest change; `None` past the last entry
    /// (indices are `0..len`; an entry moved to another index is journaled again there).
    fn latest_seq(&self, index: usize) -> Option<u64>;

    /// Appends what a page carries for entry `index`.
    fn items(&self, index: usize, out: &mut Vec<Self::Item>);

    /// How many entries' worth entry `index` counts for against a page's limit: 1, unless it
    /// is much larger than most (a unique counter's sketch).
    fn weight(&self, _index: usize) -> usize {
        1
    }
}

/// The items of `table` changed since `cursor` by its `journal`, at most `limit` entries'
/// worth (a page holds at least one entry); the cursor to ask from next; and whether that
/// reaches the newest change.
pub fn page<T: Journaled>(
    table: &T,
    journal: &ChangeJournal,
    cursor: Cursor,
    limit: usize,
) -> (Vec<T::Item>, Cursor, bool) {
    page_where(table, journal, cursor, limit, |_| true)
}

/// Like [`page`], with only the entries whose items `keep` accepts (an entry's items are one
/// counter's). An entry left out counts as one against the limit, so a page stays bounded
/// however few entries are kept.
pub fn page_where<T: Journaled>(
    table: &T,
    journal: &ChangeJournal,
    cursor: Cursor,
    limit: usize,
    keep: impl Fn(&T::Item) -> bool,
) -> (Vec<T::Item>, Cursor, bool) {
    let mut items = Vec::new();
    let (next, caught_up) = walk(table, journal, cursor, limit, |index| {
        let before = items.len();
        table.items(index, &mut items);
        if items[before..].iter().all(&keep) {
            table.weight(index)
        } else {
            items.truncate(before);
            1
        }
    });
    (items, next, caught_up)
}

/// Walks the entries of `table` changed since `cursor`, handing each index to `take`, which
/// says what it counts against `limit` (at least one entry is taken); returns the cursor to
/// ask from next and whether that reaches the newest change.
pub fn walk<T: Journaled>(
    table: &T,
    journal: &ChangeJournal,
    cursor: Cursor,
    limit: usize,
    mut take: impl FnMut(usize) -> usize,
) -> (Cursor, bool) {
    let epoch = journal.epoch;
    let limit = limit.max(1);
    let full_copy = Cursor::Scan {
        epoch,
        resume_seq: journal.seq,
        next_index: 0,
    };
    let cursor = match cursor {
        Cursor::Seq { epoch: e, seq }
            if e == epoch && seq >= journal.floor && seq <= journal.seq =>
        {
            cursor
        }
        Cursor::Scan { epoch: e, .. } if e == epoch => cursor,
        _ => full_copy,
    };
    match cursor {
        Cursor::Scan {
            resume_seq,
            next_index,
            ..
        } => {
            let start = next_index as usize;
            let (mut end, mut weight) = (start, 0);
            while table.latest_seq(end).is_some() && weight < limit {
                weight += take(end);
                end += 1;
            }
            let next = if table.latest_seq(end).is_none() {
                Cursor::Seq {
                    epoch,
                    seq: resume_seq,
                }
            } else {
                Cursor::Scan {
                    epoch,
                    resume_seq,
                    next_index: end as u64,
                }
            };
            // Caught up only if nothing changed since the copy began.
            let caught_up = matches!(next, Cursor::Seq { seq, .. } if seq == journal.seq);
            (next, caught_up)
        }
        Cursor::Seq { seq, .. } => {
            let first = journal.first_seq();
            // The cursor is at or past the floor, so it is at most one before `first`.
            let start = (seq + 1).saturating_sub(first) as usize;
            let mut sent = 0;
            let mut last = seq;
            for (change, &index) in (first + start as u64..).zip(journal.log.range(start..)) {
                if sent >= limit {
                    return (Cursor::Seq { epoch, seq: last }, false);
                }
                last = change;
                // Only at the entry's latest change, so each entry goes once.
                if table.latest_seq(index as usize) == Some(change) {
                    sent += take(index as usize);
                }
            }
            (
                Cursor::Seq {
                    epoch,
                    seq: journal.seq,
                },
                true,
            )
        }
        Cursor::Start => unreachable!("a start cursor became a full copy"),
    }
}

/// The entry indices a copy page of a table of `len` entries covers: from `from`, at most
/// `limit` of them (at least one); and where the next page starts, if any is left.
pub fn copy_range(from: u64, limit: usize, len: usize) -> (Range<usize>, Option<u64>) {
    let start = usize::try_from(from).unwrap_or(usize::MAX).min(len);
    let end = start.saturating_add(limit.max(1)).min(len);
    (start..end, (end < len).then_some(end as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table of (name, value) rows for testing paging.
    struct Rows {
        journal: ChangeJournal,
        rows: Vec<(String, u64, u64)>,
    }

    impl Rows {
        fn new(capacity: usize) -> Self {
            Self {
                journal: ChangeJournal::with_capacity(capacity),
                rows: Vec::new(),
            }
        }
        fn set(&mut self, name: &str, value: u64) {
            let index = match self.rows.iter().position(|r| r.0 == name) {
                Some(i) => i,
                None => {
                    self.rows.push((name.into(), 0, 0));
                    self.rows.len() - 1
                }
            };
            let seq = self.journal.record(index);
            self.rows[index].1 = value;
            self.rows[index].2 = seq;
        }
    }

    impl Journaled for Rows {
        type Item = (String, u64);
        fn latest_seq(&self, index: usize) -> Option<u64> {
            self.rows.get(index).map(|row| row.2)
        }
        fn items(&self, index: usize, out: &mut Vec<(String, u64)>) {
            out.push((self.rows[index].0.clone(), self.rows[index].1));
        }
    }

    /// Pulls until caught up, applying into a map.
    fn pull_all(
        rows: &Rows,
        mut cursor: Cursor,
        limit: usize,
        copy: &mut std::collections::HashMap<String, u64>,
    ) -> (Cursor, usize) {
        let mut pages = 0;
        loop {
            let (items, next, caught_up) = page(rows, &rows.journal, cursor, limit);
            pages += 1;
            copy.extend(items);
            cursor = next;
            if caught_up {
                return (cursor, pages);
            }
            assert!(pages < 1000, "paging does not end");
        }
    }

    /// Rows `r0` to `r{count - 1}` set once each (changes 1 to `count`), in a journal
    /// remembering `capacity` changes.
    fn rows_set_once(count: u64, capacity: usize) -> Rows {
        let mut rows = Rows::new(capacity);
        for n in 0..count {
            rows.set(&format!("r{n}"), n);
        }
        rows
    }

    #[test]
    fn incremental_pages_send_each_changed_entry_once() {
        let mut rows = rows_set_once(10, 100);
        let mut copy = std::collections::HashMap::new();
        let (cursor, _) = pull_all(&rows, Cursor::Start, 3, &mut copy);
        assert_eq!(copy.len(), 10);
        rows.set("r1", 100);
        rows.set("r1", 101);
        rows.set("r2", 200);
        let (items, next, caught_up) = page(&rows, &rows.journal, cursor, 10);
        assert!(caught_up);
        assert_eq!(items, vec![("r1".into(), 101), ("r2".into(), 200)]);
        let (items, _, caught_up) = page(&rows, &rows.journal, next, 10);
        assert!(items.is_empty() && caught_up, "nothing changed since");
    }

    /// A cursor of this incarnation at change `seq`.
    fn at(rows: &Rows, seq: u64) -> Cursor {
        Cursor::Seq {
            epoch: rows.journal.epoch(),
            seq,
        }
    }

    #[test]
    fn an_old_or_foreign_cursor_gets_a_full_copy() {
        let rows = rows_set_once(10, 4);
        let stale = at(&rows, 1);
        let mut copy = std::collections::HashMap::new();
        pull_all(&rows, stale, 4, &mut copy);
        assert_eq!(copy.len(), 10, "the journal forgot seq 1: a full copy");
        let foreign = Cursor::Seq {
            epoch: rows.journal.epoch() ^ 1,
            seq: rows.journal.seq(),
        };
        let (_, next, _) = page(&rows, &rows.journal, foreign, 100);
        assert!(matches!(next, Cursor::Seq { epoch, .. } if epoch == rows.journal.epoch()));
    }

    #[test]
    fn a_cursor_at_the_oldest_remembered_change_pages_on() {
        let rows = rows_set_once(10, 4);
        // Changes 7 to 10 are remembered: a cursor at 6 misses none of them.
        let at_floor = at(&rows, 6);
        let (items, next, caught_up) = page(&rows, &rows.journal, at_floor, 100);
        assert!(caught_up);
        assert_eq!(
            items,
            vec![
                ("r6".into(), 6),
                ("r7".into(), 7),
                ("r8".into(), 8),
                ("r9".into(), 9)
            ]
        );
        assert!(matches!(next, Cursor::Seq { seq: 10, .. }));
        // A page limit stops inside the log and resumes from the last change sent.
        let (items, next, _) = page(&rows, &rows.journal, at_floor, 2);
        assert_eq!(items, vec![("r6".into(), 6), ("r7".into(), 7)]);
        let (items, _, caught_up) = page(&rows, &rows.journal, next, 100);
        assert!(caught_up);
        assert_eq!(items, vec![("r8".into(), 8), ("r9".into(), 9)]);
        // One change older, and the journal cannot say what changed: a full copy.
        let (items, _, caught_up) = page(&rows, &rows.journal, at(&rows, 5), 100);
        assert!(caught_up);
        assert_eq!(items.len(), 10, "every row, not just the changes after 5");
    }

    #[test]
    fn changes_during_a_full_copy_are_not_missed() {
        let mut rows = rows_set_once(6, 100);
        let mut copy = std::collections::HashMap::new();
        let (items, cursor, caught_up) = page(&rows, &rows.journal, Cursor::Start, 2);
        assert!(!caught_up);
        copy.extend(items);
        rows.set("r0", 50); // already copied: must come again
        rows.set("r9", 9); // new
        pull_all(&rows, cursor, 2, &mut copy);
        assert_eq!(copy["r0"], 50);
        assert_eq!(copy["r9"], 9);
        assert_eq!(copy.len(), 7);
    }
}
