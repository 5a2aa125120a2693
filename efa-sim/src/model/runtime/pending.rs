//! The requester's table of outstanding requests, by request id.
//!
//! Request ids come from one counter per device, so the ids outstanding at any time lie
//! close together: each goes to the slot `id mod capacity` of a ring, found there without
//! hashing. An id whose slot still holds an older request (one that waits far longer than
//! the rest, such as the parent of a chunked transfer) goes to an overflow map; every
//! look-up tries the ring first and the map only when the map holds anything.

use super::IdMap;

/// Outstanding requests (`P`: what the requester keeps of each) by id.
pub(crate) struct PendingTable<P> {
    /// The id of each ring slot's occupant (meaningful where `ring` has one).
    ids: Box<[u64]>,
    ring: Box<[Option<P>]>,
    overflow: IdMap<u64, P>,
    len: usize,
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
        }
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
    #[inline]
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
}
