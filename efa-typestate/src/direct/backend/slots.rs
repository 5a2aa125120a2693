//! Request-id slots and producer positions of one direct work queue.

/// One request-id slot: the `wr_id` it holds and whether it is taken.
#[derive(Clone, Copy, Default)]
pub(super) struct Slot {
    wr_id: u64,
    taken: bool,
}

/// Request-id slots of one work queue (libefa's `wrid` array and `wrid_idx_pool`).
pub(super) struct Slots {
    slots: Box<[Slot]>,
    /// Free indices in `free[taken_count..]`, the next one at `free[taken_count]`.
    free: Box<[u32]>,
    taken_count: u32,
    idx_bits: u32,
    gen: u16,
    /// The generation as it sits above the index in a request id (0 when the index
    /// takes all 16 bits).
    gen_bits: u16,
    /// The index bits of a request id.
    idx_mask: u16,
}

impl Slots {
    pub(super) fn new(count: u32, gen: u16) -> Slots {
        let mut s = Slots {
            slots: vec![Slot::default(); count as usize].into_boxed_slice(),
            free: (0..count).collect(),
            taken_count: 0,
            idx_bits: count.max(1).next_power_of_two().trailing_zeros(),
            gen,
            gen_bits: 0,
            idx_mask: 0,
        };
        s.gen_bits = s.shifted_gen();
        s.idx_mask = if s.idx_bits >= 16 {
            u16::MAX
        } else {
            (1u16 << s.idx_bits) - 1
        };
        s
    }
    pub(super) fn capacity(&self) -> u32 {
        self.free.len() as u32
    }
    pub(super) fn outstanding(&self) -> u32 {
        self.taken_count
    }
    fn shifted_gen(&self) -> u16 {
        if self.idx_bits >= 16 {
            0
        } else {
            self.gen << self.idx_bits
        }
    }
    /// Takes a free slot for `wr_id`; the caller checked there is one.
    #[inline(always)]
    pub(super) fn take(&mut self, wr_id: u64) -> u16 {
        let idx = self.free[self.taken_count as usize];
        self.taken_count += 1;
        self.slots[idx as usize] = Slot { wr_id, taken: true };
        // idx < capacity <= 2^idx_bits <= 2^16.
        idx as u16 | self.gen_bits
    }
    /// Gives back the `n` slots taken last (a post that failed before its doorbell).
    pub(super) fn untake(&mut self, n: u32) {
        for i in self.taken_count - n..self.taken_count {
            let idx = self.free[i as usize];
            self.slots[idx as usize].taken = false;
        }
        self.taken_count -= n;
    }
    /// The `wr_id` of a completion's request id, freeing its slot; None for a request
    /// id of another generation or of a slot not taken (a stale completion).
    #[inline(always)]
    pub(super) fn complete(&mut self, req_id: u16) -> Option<u64> {
        let mask = self.idx_mask;
        if req_id & !mask != self.gen_bits {
            return None;
        }
        let idx = usize::from(req_id & mask);
        match self.slots.get_mut(idx) {
            Some(s) if s.taken => {
                s.taken = false;
                self.taken_count -= 1;
                self.free[self.taken_count as usize] = idx as u32;
                Some(s.wr_id)
            }
            _ => None,
        }
    }
    /// Forgets every request (a QP reset): all slots free, a new generation.
    pub(super) fn reset(&mut self) {
        for (i, f) in self.free.iter_mut().enumerate() {
            *f = i as u32;
        }
        self.slots.fill(Slot::default());
        self.taken_count = 0;
        self.gen = self.gen.wrapping_add(1);
        self.gen_bits = self.shifted_gen();
    }
}

/// A producer position: entries produced (modulo 2^32) and the phase of the current lap.
pub(super) struct Producer {
    pub(super) count: u32,
    pub(super) phase: bool,
}

impl Producer {
    /// Moves on one entry of a ring of `entries` (a power of two) entries.
    #[inline(always)]
    pub(super) fn advance(&mut self, entries: u32) {
        self.count = self.count.wrapping_add(1);
        if self.count & entries.wrapping_sub(1) == 0 {
            self.phase = !self.phase;
        }
    }
    /// The doorbell value: libefa writes its 16-bit producer counter.
    pub(super) fn doorbell(count: u32) -> u32 {
        count & 0xffff
    }
}
