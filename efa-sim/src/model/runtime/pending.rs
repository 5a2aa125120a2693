//! The requester's table of outstanding requests, by request id.
//!
//! Request ids come from one counter per device, so the ids outstanding at any time lie
//! close together: each goes to the slot `id mod capacity` of a ring, found there without
//! hashing. An id whose slot still holds an older request (one that waits far longer than
//! the rest, such as the parent of a chunked transfer) goes to an overflow map; every
//! look-up tries the ring first and the map only when the map holds anything.
//!
//! Ids also only grow, so the oldest outstanding id (the requester's low watermark) is
//! kept as a cursor that only moves forward over ids no longer in the table: each id is
//! passed once, whatever the order requests complete in.

use super::IdMap;

/// Outstanding requests (`P`: what the requester keeps of each) by id.
pub(crate) struct PendingTable<P> {
    /// The id of each ring slot's occupant (meaningful where `ring` has one).
    ids: Box<[u64]>,
    ring: Box<[Option<P>]>,
    overflow: IdMap<u64, P>,
    len: usize,
    /// No id below this is in the table (see [`PendingTable::oldest`]).
    low: u64,
    /// The next id [`PendingTable::take_id`] hands out: ids come from the table that
    /// holds them, under its owner's lock (no atomic read-modify-write per request).
    next: u64,
}

impl<P> PendingTable<P> {
    /// A table whose ring has `capacity` slots (rounded up to a power of two).
    pub fn with_capacity(capacity: usize) -> PendingTable<P> {
        let n = capacity.max(1).next_power_of_two();
        PendingTable {
            ids: vec![0; n].into_boxed_slice(),
            ring: (0..n).map(|_| None).collect(),
            overflow: IdMap::default(),
            len: 0,
            low: 0,
            next: 1,
        }
    }

    /// A new request id (ids start at 1 and only grow).
    #[inline]
    pub fn take_id(&mut self) -> u64 {
        let id = self.next;
        self.next += 1;
        id
    }

    /// The id [`PendingTable::take_id`] hands out next.
    #[inline]
    pub fn next_id(&self) -> u64 {
        self.next
    }

    #[inline]
    fn slot(&self, id: u64) -> usize {
        id as usize & (self.ring.len() - 1)
    }

    /// Requests outstanding.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether none is outstanding.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds request `id` (not in the table).
    #[inline(always)]
    pub fn insert(&mut self, id: u64, p: P) {
        self.insert_with(id, || p)
    }

    /// Adds request `id` (not in the table) as `make` builds it: inlined, the entry is
    /// built where it is stored rather than moved there.
    #[inline(always)]
    pub fn insert_with(&mut self, id: u64, make: impl FnOnce() -> P) {
        let i = self.slot(id);
        if self.ring[i].is_none() {
            self.ids[i] = id;
            self.ring[i] = Some(make());
        } else {
            self.overflow.insert(id, make());
        }
        self.len += 1;
    }

    /// Request `id`.
    #[inline]
    pub fn get(&self, id: u64) -> Option<&P> {
        let i = self.slot(id);
        match self.ring[i].as_ref() {
            Some(p) if self.ids[i] == id => Some(p),
            _ if self.overflow.is_empty() => None,
            _ => self.overflow.get(&id),
        }
    }

    /// Whether request `id` is in the table.
    #[inline]
    fn holds(&self, id: u64) -> bool {
        let i = self.slot(id);
        (self.ids[i] == id && self.ring[i].is_some())
            || (!self.overflow.is_empty() && self.overflow.contains_key(&id))
    }

    /// The oldest id in the table, or `next` (the next id to be handed out) if it holds
    /// none below that. Ids are handed out in increasing order and every id goes in at
    /// most once, so the cursor moves forward only, over ids gone for good.
    #[inline]
    pub fn oldest(&mut self, next: u64) -> u64 {
        if self.len == 0 {
            self.low = self.low.max(next);
            return self.low;
        }
        while self.low < next && !self.holds(self.low) {
            self.low += 1;
        }
        self.low
    }

    /// Request `id`, to change.
    #[inline]
    pub fn get_mut(&mut self, id: u64) -> Option<&mut P> {
        let i = self.slot(id);
        match self.ring[i].as_mut() {
            Some(p) if self.ids[i] == id => Some(p),
            _ if self.overflow.is_empty() => None,
            _ => self.overflow.get_mut(&id),
        }
    }

    /// Takes request `id` out.
    #[inline]
    pub fn remove(&mut self, id: u64) -> Option<P> {
        self.remove_map(id, |p| p)
    }

    /// Takes request `id` out and gives it to `keep`, which returns what is kept of it:
    /// inlined, only that part is copied out of the table.
    #[inline(always)]
    pub fn remove_map<R>(&mut self, id: u64, keep: impl FnOnce(P) -> R) -> Option<R> {
        let i = self.slot(id);
        if self.ids[i] == id {
            if let Some(p) = self.ring[i].take() {
                self.len -= 1;
                return Some(keep(p));
            }
        }
        if self.overflow.is_empty() {
            return None;
        }
        let p = self.overflow.remove(&id)?;
        self.len -= 1;
        Some(keep(p))
    }

    /// Every outstanding request, in no particular order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u64, &mut P)> {
        let ring = self
            .ids
            .iter()
            .zip(self.ring.iter_mut())
            .filter_map(|(id, p)| Some((*id, p.as_mut()?)));
        ring.chain(self.overflow.iter_mut().map(|(id, p)| (*id, p)))
    }

    /// Takes out the requests `pick` chooses.
    pub fn take_if(&mut self, mut pick: impl FnMut(&P) -> bool) -> Vec<P> {
        let ids: Vec<u64> = self
            .iter_mut()
            .filter(|(_, p)| pick(p))
            .map(|(id, _)| id)
            .collect();
        ids.into_iter().filter_map(|id| self.remove(id)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_handed_out_once_from_one_upwards() {
        let mut t = PendingTable::<u8>::with_capacity(4);
        assert_eq!(t.next_id(), 1, "0 is never an id");
        let ids: Vec<u64> = (0..5).map(|_| t.take_id()).collect();
        assert_eq!(ids, [1, 2, 3, 4, 5]);
        assert_eq!(t.next_id(), 6);
        // An id taken and never inserted does not hold the oldest back.
        t.insert(5, 0);
        assert_eq!(t.oldest(t.next_id()), 5);
    }

    #[test]
    fn ids_that_share_a_slot_are_kept_apart_and_found() {
        let mut t = PendingTable::with_capacity(4);
        for id in [1u64, 2, 5, 9, 6] {
            t.insert(id, id * 10);
        }
        assert_eq!(t.len(), 5);
        for id in [1u64, 2, 5, 9, 6] {
            assert_eq!(t.get(id), Some(&(id * 10)), "{id}");
        }
        assert!(t.get(13).is_none() && t.get(3).is_none());
        // The ring's occupant goes first; the ones that overflowed stay reachable.
        assert_eq!(t.remove(1), Some(10));
        assert_eq!(t.remove(1), None, "removed twice");
        *t.get_mut(9).unwrap() += 1;
        assert_eq!(t.get(9), Some(&91));
        assert_eq!(t.remove(5), Some(50));
        // Slot 1 is free again: 13 goes to the ring, 9 stays in the overflow.
        t.insert(13, 130);
        let mut all: Vec<(u64, u64)> = t.iter_mut().map(|(id, v)| (id, *v)).collect();
        all.sort_unstable();
        assert_eq!(all, [(2, 20), (6, 60), (9, 91), (13, 130)]);
        let mut gone = t.take_if(|v| *v % 20 == 0);
        gone.sort_unstable();
        assert_eq!(gone, [20, 60]);
        assert_eq!(t.len(), 2);
        assert!(!t.is_empty());
        assert_eq!((t.remove(9), t.remove(13)), (Some(91), Some(130)));
        assert!(t.is_empty());
        assert!(t.iter_mut().next().is_none());
    }

    #[test]
    fn the_oldest_id_follows_completions_in_any_order() {
        let mut t = PendingTable::with_capacity(4);
        assert_eq!(t.oldest(1), 1, "empty: the next id");
        for id in 1u64..=6 {
            t.insert(id, ()); // 5 and 6 overflow (slots of 1 and 2)
        }
        assert_eq!(t.oldest(7), 1);
        t.remove(3);
        assert_eq!(t.oldest(7), 1, "an id after the oldest went");
        t.remove(1);
        assert_eq!(t.oldest(7), 2);
        t.remove(2);
        assert_eq!(t.oldest(7), 4, "3 is gone already");
        t.remove(4);
        assert_eq!(t.oldest(7), 5, "found in the overflow");
        t.remove(6);
        t.remove(5);
        assert_eq!(t.oldest(7), 7, "empty again: the next id");
        t.insert(9, ()); // 7 and 8 were handed out and never went in
        assert_eq!(t.oldest(10), 9);
    }
}
