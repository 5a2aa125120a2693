//! Read sections without atomic read-modify-write operations, for the device's object
//! tables (MRs, AHs, QPs, address books): the data path looks objects up inside a
//! [`Guard`], and whoever removes an object from a table calls [`synchronize`] before
//! dropping it, which waits until every section that might still see it has ended.
//!
//! This keeps the guarantee the tables' read locks gave (a deregistered MR is never
//! touched after `dereg` returns: copies happen inside the section that validated the
//! range) at the cost of two plain stores per section instead of a contended lock word.
//!
//! Every thread that enters a section owns a [`Reader`] slot whose counter is odd while
//! it is inside one. A writer that unpublished a pointer makes sure every reader either
//! saw the removal or is visible as "inside" (a `membarrier(PRIVATE_EXPEDITED)`, which
//! orders the readers' plain stores, or, where the kernel lacks it, a full fence in every
//! section), then waits for each odd counter to move on.
//!
//! Rules: sections are short and never wait for something a writer holds while it
//! synchronizes (writers call [`synchronize`] holding no lock the data path takes), and a
//! writer never synchronizes from inside its own section (it skips itself).

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// One thread's section counter (odd: inside a section). Slots are never freed; a slot
/// whose thread exited is reused by the next thread that registers.
struct Reader {
    state: AtomicU64,
    /// Nesting depth, touched only by the owning thread.
    depth: AtomicU64,
    used: AtomicBool,
}

/// Every reader slot of the process.
static READERS: Mutex<Vec<&'static Reader>> = Mutex::new(Vec::new());
/// Sections of threads that could not get a slot (thread-local storage already torn down).
static SLOW_READERS: AtomicU64 = AtomicU64::new(0);

const FENCE_UNKNOWN: u8 = 0;
const FENCE_MEMBARRIER: u8 = 1;
const FENCE_FULL: u8 = 2;
/// How sections order their entry store before their loads (decided once).
static FENCE_MODE: AtomicU8 = AtomicU8::new(FENCE_UNKNOWN);

/// Gives this thread's slot back when the thread exits.
struct Handle(&'static Reader);

impl Drop for Handle {
    fn drop(&mut self) {
        let _ = MINE.try_with(|m| m.set(None));
        self.0.used.store(false, Ordering::Release);
    }
}

thread_local! {
    /// This thread's slot (a plain thread-local load on the data path).
    static MINE: Cell<Option<&'static Reader>> = const { Cell::new(None) };
    /// Registered on first use; its destructor gives the slot back.
    static HANDLE: std::cell::OnceCell<Handle> = const { std::cell::OnceCell::new() };
}

/// This thread's slot, registered on first use; None while thread-local storage is torn
/// down.
#[inline]
fn my_reader() -> Option<&'static Reader> {
    match MINE.try_with(|m| m.get()) {
        Ok(Some(r)) => Some(r),
        Ok(None) => register_thread(),
        Err(_) => None,
    }
}

fn register() -> &'static Reader {
    let mut all = READERS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = all.iter().find(|r| {
        r.used
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }) {
        return r;
    }
    let r: &'static Reader = Box::leak(Box::new(Reader {
        state: AtomicU64::new(0),
        depth: AtomicU64::new(0),
        used: AtomicBool::new(true),
    }));
    all.push(r);
    r
}

#[cold]
fn register_thread() -> Option<&'static Reader> {
    let r = HANDLE
        .try_with(|h| h.get_or_init(|| Handle(register())).0)
        .ok()?;
    MINE.try_with(|m| m.set(Some(r))).ok()?;
    Some(r)
}

/// Whether `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` works here (registered once).
fn fence_mode() -> u8 {
    let m = FENCE_MODE.load(Ordering::Relaxed);
    if m != FENCE_UNKNOWN {
        return m;
    }
    // SAFETY: membarrier takes a command and flags; registration has no other effect.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            libc::MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
            0,
        )
    };
    let mode = if rc == 0 {
        FENCE_MEMBARRIER
    } else {
        FENCE_FULL
    };
    // Whoever decides first wins; every later section and writer uses the same mode.
    match FENCE_MODE.compare_exchange(FENCE_UNKNOWN, mode, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => mode,
        Err(m) => m,
    }
}

/// An open read section: objects loaded from the tables stay alive until it is dropped.
/// Not `Send`: a section belongs to its thread.
pub struct Guard {
    reader: Option<&'static Reader>,
    _thread: PhantomData<*const ()>,
}

impl Guard {
    /// Opens a section (sections nest).
    #[inline]
    pub fn enter() -> Guard {
        let reader = my_reader();
        match reader {
            Some(r) => {
                let depth = r.depth.load(Ordering::Relaxed);
                r.depth.store(depth + 1, Ordering::Relaxed);
                if depth == 0 {
                    let s = r.state.load(Ordering::Relaxed);
                    r.state.store(s + 1, Ordering::Relaxed);
                    if fence_mode() == FENCE_MEMBARRIER {
                        compiler_fence(Ordering::SeqCst);
                    } else {
                        fence(Ordering::SeqCst);
                    }
                }
            }
            None => {
                SLOW_READERS.fetch_add(1, Ordering::SeqCst);
            }
        }
        Guard {
            reader,
            _thread: PhantomData,
        }
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        match self.reader {
            Some(r) => {
                let depth = r.depth.load(Ordering::Relaxed) - 1;
                r.depth.store(depth, Ordering::Relaxed);
                if depth == 0 {
                    let s = r.state.load(Ordering::Relaxed);
                    r.state.store(s + 1, Ordering::Release);
                }
            }
            None => {
                SLOW_READERS.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

/// Waits until every read section that was open when it was called has ended, so an
/// object unpublished before the call can be dropped after it. Call it holding no lock a
/// section may wait for.
pub fn synchronize() {
    if fence_mode() == FENCE_MEMBARRIER {
        // SAFETY: membarrier with a registered command; it only orders memory.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                libc::MEMBARRIER_CMD_PRIVATE_EXPEDITED,
                0,
            )
        };
        if rc != 0 {
            // Cannot happen after a successful registration; be safe anyway.
            fence(Ordering::SeqCst);
        }
    } else {
        fence(Ordering::SeqCst);
    }
    let me = MINE
        .try_with(|m| m.get().map(|r| r as *const Reader))
        .ok()
        .flatten();
    let readers: Vec<&'static Reader> = READERS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for r in readers {
        if Some(r as *const Reader) == me {
            continue;
        }
        let s = r.state.load(Ordering::Acquire);
        if s & 1 == 1 {
            wait_until(|| r.state.load(Ordering::Acquire) != s);
        }
    }
    wait_until(|| SLOW_READERS.load(Ordering::SeqCst) == 0);
    fence(Ordering::SeqCst);
}

/// Spins briefly, then yields, then naps, until `done`.
fn wait_until(done: impl Fn() -> bool) {
    let mut round = 0u32;
    while !done() {
        round += 1;
        if round < 64 {
            core::hint::spin_loop();
        } else if round < 1024 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// A pointer published to sections: readers load it inside a [`Guard`], the writer
/// replaces it and drops the old value after [`synchronize`].
pub struct RcuBox<T> {
    ptr: std::sync::atomic::AtomicPtr<T>,
    _owns: PhantomData<Box<T>>,
}

// SAFETY: the box owns a `T` like `Box<T>`; readers get `&T` (needs Sync), replacement
// moves values across threads (needs Send).
unsafe impl<T: Send + Sync> Sync for RcuBox<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Send for RcuBox<T> {}

impl<T> RcuBox<T> {
    /// Publishes `value`.
    pub fn new(value: T) -> RcuBox<T> {
        RcuBox {
            ptr: std::sync::atomic::AtomicPtr::new(Box::into_raw(Box::new(value))),
            _owns: PhantomData,
        }
    }

    /// The current value, valid while `_g` is open.
    #[inline]
    pub fn get<'g>(&self, _g: &'g Guard) -> &'g T {
        // SAFETY: the pointer came from Box::into_raw and is only freed by `replace`
        // after a grace period, which waits for the section `_g` proves is open.
        unsafe { &*self.ptr.load(Ordering::Acquire) }
    }

    /// Publishes `value` and drops the previous one once no section can see it. Callers
    /// serialise replacements themselves (a writer lock).
    pub fn replace(&self, value: T) {
        let old = self
            .ptr
            .swap(Box::into_raw(Box::new(value)), Ordering::AcqRel);
        synchronize();
        // SAFETY: `old` came from Box::into_raw and no section can reach it any more.
        drop(unsafe { Box::from_raw(old) });
    }
}

impl<T> Drop for RcuBox<T> {
    fn drop(&mut self) {
        // SAFETY: the last owner; no section can hold it (`&mut self`).
        drop(unsafe { Box::from_raw(*self.ptr.get_mut()) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    #[test]
    fn sections_nest_and_count_per_thread() {
        let g = Guard::enter();
        let r = g.reader.expect("slot");
        assert_eq!(r.state.load(Ordering::Relaxed) & 1, 1);
        {
            let _inner = Guard::enter();
            assert_eq!(r.depth.load(Ordering::Relaxed), 2);
        }
        assert_eq!(r.state.load(Ordering::Relaxed) & 1, 1, "still inside");
        drop(g);
        assert_eq!(r.state.load(Ordering::Relaxed) & 1, 0);
        // A writer inside its own section does not wait for itself.
        let _g = Guard::enter();
        synchronize();
    }

    #[test]
    fn synchronize_waits_for_open_sections() {
        let inside = Arc::new(AtomicBool::new(false));
        let release = Arc::new(AtomicBool::new(false));
        let (i, rel) = (inside.clone(), release.clone());
        let t = std::thread::spawn(move || {
            let _g = Guard::enter();
            i.store(true, Ordering::SeqCst);
            while !rel.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
        });
        while !inside.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let w = std::thread::spawn(move || {
            synchronize();
            d.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !done.load(Ordering::SeqCst),
            "returned while a section was open"
        );
        release.store(true, Ordering::SeqCst);
        t.join().unwrap();
        w.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
    }

    #[test]
    fn replaced_values_are_dropped_after_readers_leave() {
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        struct D(u32);
        impl Drop for D {
            fn drop(&mut self) {
                DROPS.fetch_add(1, Ordering::SeqCst);
            }
        }
        let b = Arc::new(RcuBox::new(D(1)));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        let g = Guard::enter();
                        let v = b.get(&g).0;
                        assert!(v >= 1);
                    }
                })
            })
            .collect();
        for v in 2..50 {
            b.replace(D(v));
        }
        for r in readers {
            r.join().unwrap();
        }
        assert_eq!(DROPS.load(Ordering::SeqCst), 48);
        let g = Guard::enter();
        assert_eq!(b.get(&g).0, 49);
    }
}
