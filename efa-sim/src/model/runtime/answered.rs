//! What a responder remembers of one requester incarnation: the status it answered each
//! request with, so that a retransmission is answered again without being executed
//! again.
//!
//! A requester's ids come from one counter and every request carries its low watermark
//! (the oldest id it still waits for), so the ids worth remembering lie in a window above
//! it: each goes to the slot `id mod` [`RING`] of a ring, found there without hashing, and
//! a slot whose id fell below the watermark is free again. An id whose slot still holds a
//! live one goes to an overflow map, trimmed as the watermark moves on.

use super::IdMap;

/// Slots of the ring (a power of two).
const RING: usize = 1024;

/// Overflow entries kept before those below the watermark are dropped.
const OVERFLOW_TRIM: usize = 64;

/// The answered requests of one requester incarnation.
pub(crate) struct Answered {
    /// The id in each slot; 0 for none (request ids start at 1).
    ids: Box<[u64]>,
    status: Box<[u8]>,
    overflow: IdMap<u64, u8>,
}

impl Default for Answered {
    fn default() -> Self {
        Answered {
            ids: vec![0; RING].into_boxed_slice(),
            status: vec![0; RING].into_boxed_slice(),
            overflow: IdMap::default(),
        }
    }
}

impl Answered {
    #[inline]
    fn slot(id: u64) -> usize {
        id as usize & (RING - 1)
    }

    /// The status request `id` was answered with.
    #[inline]
    pub fn get(&self, id: u64) -> Option<u8> {
        let i = Self::slot(id);
        if id != 0 && self.ids[i] == id {
            return Some(self.status[i]);
        }
        if self.overflow.is_empty() {
            return None;
        }
        self.overflow.get(&id).copied()
    }

    /// Remembers that request `id` (not remembered yet, at or above `watermark`) was
    /// answered with `status`.
    #[inline]
    pub fn insert(&mut self, id: u64, status: u8, watermark: u64) {
        let i = Self::slot(id);
        let held = self.ids[i];
        if id != 0 && (held == 0 || held < watermark) {
            self.ids[i] = id;
            self.status[i] = status;
        } else {
            self.overflow.insert(id, status);
        }
    }

    /// The watermark moved on to `watermark`: overflow entries below it go (the ring's
    /// are reused as their slots come round).
    #[inline]
    pub fn forget_below(&mut self, watermark: u64) {
        if self.overflow.len() > OVERFLOW_TRIM {
            self.overflow.retain(|id, _| *id >= watermark);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_each_id_until_its_slot_is_reused_below_the_watermark() {
        let mut a = Answered::default();
        assert_eq!(a.get(0), None, "id 0 is never a remembered request");
        a.insert(7, 0, 1);
        a.insert(8, 9, 1);
        // Same slot as 7, while 7 is still above the watermark: both kept.
        a.insert(7 + RING as u64, 3, 1);
        assert_eq!(a.get(7), Some(0));
        assert_eq!(a.get(8), Some(9));
        assert_eq!(a.get(7 + RING as u64), Some(3));
        assert_eq!(a.get(9), None);
        // 7 fell below the watermark: its slot takes the next id of that slot.
        a.insert(7 + 2 * RING as u64, 5, 100);
        assert_eq!(a.get(7 + 2 * RING as u64), Some(5));
        assert_eq!(a.get(7), None);
        // A full overflow is trimmed to the ids at or above the watermark.
        let base = 8 + RING as u64;
        for k in 0..=OVERFLOW_TRIM as u64 {
            // All in slot 8, held by 8 (above watermark 1).
            a.insert(base + k * RING as u64, 1, 1);
        }
        let last = base + OVERFLOW_TRIM as u64 * RING as u64;
        a.forget_below(last);
        assert_eq!(a.get(last), Some(1));
        assert_eq!(a.get(base), None, "trimmed");
        assert_eq!(a.get(8), Some(9), "ring entries stay until reused");
    }
}
