//! The direct state's lock: a spin lock, as libefa guards its queues with
//! `pthread_spin_lock`. Uncontended it costs one compare-exchange and one store, where
//! `std::sync::Mutex` adds its futex protocol and poison bookkeeping to every post and
//! poll. Holders never block (a post or a poll of the rings), so a waiter spins briefly
//! and then yields its CPU.

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicBool, Ordering};

/// Spins before each yield of a waiter.
const SPINS: u32 = 64;

pub(crate) struct SpinLock<T> {
    held: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, and one guard exists at a time (the
// `held` flag's compare-exchange with acquire, released by the guard's drop).
unsafe impl<T: Send> Send for SpinLock<T> {}
// SAFETY: as above: `&SpinLock` hands out `&mut T` to one thread at a time.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    pub(crate) fn new(value: T) -> Self {
        SpinLock {
            held: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock. A panic while it is held releases it (the guard's drop); the
    /// state is consistent at every point a post or poll could unwind.
    #[inline]
    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        if self
            .held
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.contended();
        }
        SpinGuard { lock: self }
    }

    #[cold]
    fn contended(&self) {
        loop {
            for _ in 0..SPINS {
                if !self.held.load(Ordering::Relaxed)
                    && self
                        .held
                        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                {
                    return;
                }
                core::hint::spin_loop();
            }
            std::thread::yield_now();
        }
    }
}

/// Access to a [`SpinLock`]'s value; releases the lock when dropped.
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock, so no `&mut T` exists elsewhere.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard holds the lock, and `&mut self` makes this borrow unique.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.held.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn one_holder_at_a_time_across_threads() {
        let lock = Arc::new(SpinLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let l = Arc::clone(&lock);
                std::thread::spawn(move || {
                    for _ in 0..if cfg!(miri) { 50 } else { 20_000 } {
                        let mut g = l.lock();
                        // A non-atomic read-modify-write: lost updates if two held it.
                        let v = *g;
                        core::hint::black_box(&v);
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let n = if cfg!(miri) { 50 } else { 20_000 };
        assert_eq!(*lock.lock(), 4 * n);
    }

    #[test]
    fn a_panic_while_held_releases_the_lock() {
        let lock = SpinLock::new(1u32);
        let r = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| {
            let _g = lock.lock();
            panic!("in a post");
        }));
        assert!(r.is_err());
        assert_eq!(*lock.lock(), 1, "the lock is free again");
    }
}
