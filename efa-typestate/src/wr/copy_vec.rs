//! [`CopyVec`]: a fixed-capacity vector of `Copy` values with no destructor, so that a
//! batch borrowing its QP and SGEs holds the borrows only until its last use (an
//! `ArrayVec` has drop glue, which would keep them until the end of the scope).

use core::mem::MaybeUninit;

#[repr(C)]
pub(crate) struct CopyVec<T: Copy, const N: usize> {
    // First: an item's store (at a non-negative index past `len`) then provably never
    // overwrites `len`, so a loop of pushes keeps `len` in a register.
    len: usize,
    items: [MaybeUninit<T>; N],
}

impl<T: Copy, const N: usize> CopyVec<T, N> {
    #[inline]
    pub(crate) const fn new() -> Self {
        CopyVec {
            items: [const { MaybeUninit::uninit() }; N],
            len: 0,
        }
    }
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
    #[inline]
    pub(crate) fn is_full(&self) -> bool {
        // `>=`, not `==`: after this test the optimiser knows `len < N`, so `push`'s own
        // bounds check folds away.
        self.len >= N
    }
    #[inline]
    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }
    /// Appends `v`; the caller checked there is room.
    #[inline]
    pub(crate) fn push(&mut self, v: T) {
        debug_assert!(self.len < N);
        if let Some(slot) = self.items.get_mut(self.len) {
            slot.write(v);
            self.len += 1;
        }
    }
    #[inline]
    pub(crate) fn as_slice(&self) -> &[T] {
        // `min(N)` (never smaller than `len`) tells the optimiser that a batch of
        // capacity 1 holds at most one item: its post loop runs once, unrolled.
        let init = &self.items[..self.len.min(N)];
        // SAFETY: the first `len` items were written by `push` and are `Copy` (no drop);
        // [MaybeUninit<T>] has the layout of [T].
        unsafe { &*(init as *const [MaybeUninit<T>] as *const [T]) }
    }
    #[inline]
    pub(crate) fn iter(&self) -> core::slice::Iter<'_, T> {
        self.as_slice().iter()
    }
}

impl<T: Copy + core::fmt::Debug, const N: usize> core::fmt::Debug for CopyVec<T, N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_what_was_pushed_in_order() {
        let mut v = CopyVec::<u32, 3>::new();
        assert!(v.is_empty());
        v.push(1);
        v.push(2);
        v.push(3);
        assert!(v.is_full());
        assert_eq!(v.as_slice(), &[1, 2, 3]);
        v.clear();
        v.push(9);
        assert_eq!((v.len(), v.as_slice()), (1, &[9][..]));
        assert!(!core::mem::needs_drop::<CopyVec<u32, 3>>());
    }
}
