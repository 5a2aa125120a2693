//! The byte ring of a shared-memory inbox: many producer processes, one consumer (the
//! inbox's owner). Every word of it may be written by any process that can open the
//! inbox file, so the consumer trusts nothing it reads: frames are bounds-checked and
//! copied out before they are parsed, and garbage is counted and skipped, never
//! followed.
//!
//! Layout of the control page (offsets in bytes; the identity fields before offset 64
//! are written once by the owner and read by openers with `pread`, see `super::shm`):
//!
//! ```text
//!  64 tail u64   producers: bytes ever written (advanced under the lock)
//!  72 lock u32   producers: 0, or the pid of the process writing a frame
//! 128 head u64   consumer: bytes ever consumed (its own copy is authoritative)
//! 192 sleeping u32  consumer: 1 while its engine thread sleeps (producers wake it)
//! ```
//!
//! A frame is 16 bytes of header, `magic u32 "EFAF", len u32, ip u32, port u16, 0 u16`
//! (the sender's endpoint address), then `len` bytes of datagram, padded to 16. Frames
//! wrap around the end of the data area.
//!
//! A producer takes the lock, checks room against `head`, writes the frame, publishes it
//! by moving `tail` (release), and releases the lock. A producer that died before moving
//! `tail` left nothing visible; one that died holding the lock is detected (its pid no
//! longer exists) and the lock taken over. A lock that stays held by a live process (a
//! stuck or hostile writer) makes producers give up after [`LOCK_PATIENCE`]: the packet
//! is dropped and the reliability layer retransmits it.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Size of the control page before the data area.
pub const CONTROL: usize = 4096;
/// Offset of `tail` (producers' published end, u64).
pub const TAIL: usize = 64;
/// Offset of the producer lock (u32: 0 or the writer's pid).
pub const LOCK: usize = 72;
/// Offset of `head` (the consumer's published position, u64).
pub const HEAD: usize = 128;
/// Offset of the consumer's sleeping flag.
const SLEEPING: usize = 192;
/// Frame header size.
pub const FRAME: usize = 16;
/// The first word of every frame header (`"EFAF"` little-endian).
pub const FRAME_MAGIC: u32 = 0x4641_4645;
/// Longest a producer waits for the lock before it drops the packet.
pub const LOCK_PATIENCE: Duration = Duration::from_millis(10);

/// Why a push did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushError {
    /// The ring has no room (its consumer is slow, gone, or the ring is garbage).
    Full,
    /// The lock stayed held by a live process for [`LOCK_PATIENCE`].
    Stuck,
}

/// What [`Ring::pop`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Pop {
    /// Nothing published.
    Empty,
    /// A frame of this length from this sender was copied into the buffer.
    Frame(usize, SocketAddrV4),
    /// The ring held garbage from this position on; the consumer skipped to `tail`.
    Garbage,
}

/// A view of one ring in (shared) memory.
pub struct Ring {
    base: *mut u8,
    data_len: u64,
    /// This process's last look at `head` (producers): room is checked against it and
    /// `head` read again only when it says the frame does not fit, so a producer does not
    /// pull the consumer's cache line at every push.
    seen_head: AtomicU64,
}

// SAFETY: the ring is memory accessed only through atomics and raw copies; see `new`.
unsafe impl Send for Ring {}
// SAFETY: as above; concurrent access is the ring protocol.
unsafe impl Sync for Ring {}

/// Bytes a frame of `len` payload bytes takes in the ring.
#[inline]
pub fn frame_len(len: usize) -> u64 {
    (FRAME + len.next_multiple_of(16)) as u64
}

impl Ring {
    /// The ring at `base`: a control page followed by `data_len` bytes (a power of two).
    ///
    /// # Safety
    /// `base..base + CONTROL + data_len` must be readable and writable, page aligned, and
    /// stay mapped for the life of the returned value.
    pub unsafe fn new(base: *mut u8, data_len: u64) -> Ring {
        debug_assert!(data_len.is_power_of_two() && base as usize % 4096 == 0);
        Ring {
            base,
            data_len,
            seen_head: AtomicU64::new(0),
        }
    }

    #[inline]
    fn word64(&self, at: usize) -> &AtomicU64 {
        // SAFETY: `at` is an 8-aligned offset inside the control page (see `new`).
        unsafe { AtomicU64::from_ptr(self.base.add(at).cast()) }
    }

    #[inline]
    fn word32(&self, at: usize) -> &AtomicU32 {
        // SAFETY: `at` is a 4-aligned offset inside the control page (see `new`).
        unsafe { AtomicU32::from_ptr(self.base.add(at).cast()) }
    }

    /// Zeroes the control words (the owner, before publishing the inbox).
    pub fn reset(&self) {
        for w in [TAIL, HEAD] {
            self.word64(w).store(0, Ordering::Relaxed);
        }
        for w in [LOCK, SLEEPING] {
            self.word32(w).store(0, Ordering::Relaxed);
        }
    }

    /// Copies `src` into the data area at ring offset `at`, wrapping.
    #[inline(always)]
    fn put(&self, at: u64, src: &[u8]) {
        let off = (at & (self.data_len - 1)) as usize;
        let first = src.len().min(self.data_len as usize - off);
        // SAFETY: both pieces lie inside the data area (off + first <= data_len, the rest
        // from 0, src.len() <= data_len); raw copies into shared memory.
        unsafe {
            let data = self.base.add(CONTROL);
            core::ptr::copy_nonoverlapping(src.as_ptr(), data.add(off), first);
            // Only a frame that wraps has a second piece (a call for 0 bytes is not free).
            if first < src.len() {
                core::ptr::copy_nonoverlapping(src.as_ptr().add(first), data, src.len() - first);
            }
        }
    }

    /// Copies `dst.len()` bytes out of the data area from ring offset `at`, wrapping.
    #[inline(always)]
    fn get(&self, at: u64, dst: &mut [u8]) {
        let off = (at & (self.data_len - 1)) as usize;
        let first = dst.len().min(self.data_len as usize - off);
        // SAFETY: as in `put`, reading.
        unsafe {
            let data = self.base.add(CONTROL);
            core::ptr::copy_nonoverlapping(data.add(off), dst.as_mut_ptr(), first);
            if first < dst.len() {
                core::ptr::copy_nonoverlapping(
                    data,
                    dst.as_mut_ptr().add(first),
                    dst.len() - first,
                );
            }
        }
    }

    /// Appends one frame of `pkt` from `from` (any thread of any process).
    pub fn push(&self, from: SocketAddrV4, pkt: &[u8]) -> Result<(), PushError> {
        let need = frame_len(pkt.len());
        if need > self.data_len / 2 {
            return Err(PushError::Full);
        }
        self.lock()?;
        let tail = self.word64(TAIL).load(Ordering::Relaxed);
        let fits = |head: u64| {
            let used = tail.wrapping_sub(head);
            used <= self.data_len && self.data_len - used >= need
        };
        if !fits(self.seen_head.load(Ordering::Relaxed)) {
            let head = self.word64(HEAD).load(Ordering::Acquire);
            self.seen_head.store(head, Ordering::Relaxed);
            if !fits(head) {
                self.unlock();
                return Err(PushError::Full);
            }
        }
        let mut hdr = [0u8; FRAME];
        hdr[0..4].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
        hdr[4..8].copy_from_slice(&(pkt.len() as u32).to_le_bytes());
        hdr[8..12].copy_from_slice(&u32::from(*from.ip()).to_le_bytes());
        hdr[12..14].copy_from_slice(&from.port().to_le_bytes());
        self.put(tail, &hdr);
        self.put(tail + FRAME as u64, pkt);
        self.word64(TAIL).store(tail + need, Ordering::Release);
        self.unlock();
        Ok(())
    }

    fn lock(&self) -> Result<(), PushError> {
        let lock = self.word32(LOCK);
        let me = current_pid();
        if lock
            .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return Ok(());
        }
        let start = Instant::now();
        let mut round = 0u32;
        loop {
            let holder = lock.load(Ordering::Relaxed);
            if holder == 0 {
                if lock
                    .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return Ok(());
                }
            } else if holder != me && (round == 64 || round % 256 == 255) && !process_exists(holder)
            {
                // The holder died inside its critical section: nothing it wrote is
                // published (tail did not move), so the lock can be taken over.
                if lock
                    .compare_exchange(holder, me, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return Ok(());
                }
            }
            round += 1;
            if round < 64 {
                core::hint::spin_loop();
            } else {
                if start.elapsed() > LOCK_PATIENCE {
                    // One last look (a slow or loaded machine may not have reached the
                    // periodic one): a dead holder never blocks the ring for good.
                    let holder = lock.load(Ordering::Relaxed);
                    if holder != 0
                        && holder != me
                        && !process_exists(holder)
                        && lock
                            .compare_exchange(holder, me, Ordering::Acquire, Ordering::Relaxed)
                            .is_ok()
                    {
                        return Ok(());
                    }
                    return Err(PushError::Stuck);
                }
                std::thread::yield_now();
            }
        }
    }

    fn unlock(&self) {
        self.word32(LOCK).store(0, Ordering::Release);
    }

    /// Whether frames may be waiting past `head` (the consumer's own position).
    #[inline]
    pub fn has_data(&self, head: u64) -> bool {
        self.word64(TAIL).load(Ordering::Acquire) != head
    }

    /// Takes the frame at `*head` (the consumer's authoritative position, advanced past
    /// it) into `buf` (at least `max` bytes). Garbage (a position the ring cannot hold, a
    /// bad frame header, a frame longer than `max` or than what is published) moves the
    /// consumer to `tail`, dropping whatever is there.
    pub fn pop(&self, head: &mut u64, buf: &mut [u8], max: usize) -> Pop {
        let tail = self.word64(TAIL).load(Ordering::Acquire);
        let avail = tail.wrapping_sub(*head);
        if avail == 0 {
            return Pop::Empty;
        }
        let garbage = |head: &mut u64| {
            *head = tail;
            self.word64(HEAD).store(tail, Ordering::Release);
            Pop::Garbage
        };
        if avail > self.data_len || avail < FRAME as u64 {
            return garbage(head);
        }
        let mut hdr = [0u8; FRAME];
        self.get(*head, &mut hdr);
        let word = |at: usize| u32::from_le_bytes([hdr[at], hdr[at + 1], hdr[at + 2], hdr[at + 3]]);
        let len = word(4) as usize;
        if word(0) != FRAME_MAGIC || len > max || len > buf.len() || frame_len(len) > avail {
            return garbage(head);
        }
        let from = SocketAddrV4::new(
            Ipv4Addr::from(word(8)),
            u16::from_le_bytes([hdr[12], hdr[13]]),
        );
        self.get(*head + FRAME as u64, &mut buf[..len]);
        *head += frame_len(len);
        self.word64(HEAD).store(*head, Ordering::Release);
        Pop::Frame(len, from)
    }

    /// The consumer is about to sleep: sets the flag, then says whether frames arrived
    /// meanwhile (then it must not sleep; the flag is cleared again).
    pub fn prepare_sleep(&self, head: u64) -> bool {
        self.word32(SLEEPING).store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.has_data(head) {
            self.word32(SLEEPING).store(0, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// The consumer woke up.
    pub fn awake(&self) {
        self.word32(SLEEPING).store(0, Ordering::Relaxed);
    }

    /// After a push: whether the consumer sleeps and this producer must wake it (the flag
    /// is cleared, so one producer does).
    #[inline]
    pub fn needs_wake(&self) -> bool {
        fence(Ordering::SeqCst);
        let s = self.word32(SLEEPING);
        s.load(Ordering::Relaxed) != 0 && s.swap(0, Ordering::AcqRel) != 0
    }
}

/// This process's pid, cached (`getpid` is a syscall on every call; this runs once per
/// frame). A forked child forgets the parent's.
fn current_pid() -> u32 {
    static PID: AtomicU32 = AtomicU32::new(0);
    extern "C" fn forget() {
        PID.store(0, Ordering::Relaxed);
    }
    let p = PID.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    static REGISTER: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a plain extern "C" function (an atomic store) as a fork handler.
    REGISTER.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(forget));
    });
    let p = std::process::id();
    PID.store(p, Ordering::Relaxed);
    p
}

/// Whether a process with this pid exists (in our pid namespace).
fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page-aligned buffer standing in for the mapping.
    struct Mem(*mut u8, usize);
    impl Mem {
        fn new(data: u64) -> Mem {
            let len = CONTROL + data as usize;
            let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
            // SAFETY: non-zero size.
            let p = unsafe { std::alloc::alloc_zeroed(layout) };
            assert!(!p.is_null());
            Mem(p, len)
        }
    }
    impl Drop for Mem {
        fn drop(&mut self) {
            let layout = std::alloc::Layout::from_size_align(self.1, 4096).unwrap();
            // SAFETY: allocated in `new` with this layout.
            unsafe { std::alloc::dealloc(self.0, layout) };
        }
    }

    fn addr(port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), port)
    }

    #[test]
    fn frames_wrap_and_come_back_whole() {
        let m = Mem::new(4096);
        // SAFETY: `m` is a page-aligned buffer of the right size that outlives the ring.
        let r = unsafe { Ring::new(m.0, 4096) };
        r.reset();
        let (mut head, mut buf) = (0u64, vec![0u8; 4096]);
        assert_eq!(r.pop(&mut head, &mut buf, 4096), Pop::Empty);
        for round in 0..50u32 {
            let pkt: Vec<u8> = (0..(round * 37 % 1500) as usize)
                .map(|i| (i as u32 ^ round) as u8)
                .collect();
            r.push(addr(round as u16), &pkt).unwrap();
            assert!(r.has_data(head));
            assert_eq!(
                r.pop(&mut head, &mut buf, 4096),
                Pop::Frame(pkt.len(), addr(round as u16))
            );
            assert_eq!(&buf[..pkt.len()], &pkt[..]);
        }
        // Full: no room for a frame bigger than what is left (2 x 1520 of 4096 used).
        r.push(addr(1), &[1; 1500]).unwrap();
        r.push(addr(1), &[2; 1500]).unwrap();
        assert_eq!(r.push(addr(1), &[3; 1100]), Err(PushError::Full));
        assert!(matches!(
            r.pop(&mut head, &mut buf, 4096),
            Pop::Frame(1500, _)
        ));
        r.push(addr(1), &[3; 1100]).unwrap();
    }

    #[test]
    fn garbage_is_skipped_and_never_followed() {
        let m = Mem::new(4096);
        // SAFETY: as above.
        let r = unsafe { Ring::new(m.0, 4096) };
        r.reset();
        let (mut head, mut buf) = (0u64, vec![0u8; 4096]);
        r.push(addr(5), b"good").unwrap();
        // A hostile writer: tail far beyond the ring.
        r.word64(TAIL).store(1 << 40, Ordering::Release);
        assert_eq!(r.pop(&mut head, &mut buf, 4096), Pop::Garbage);
        assert_eq!(head, 1 << 40);
        assert_eq!(r.pop(&mut head, &mut buf, 4096), Pop::Empty);
        // A frame whose header lies about its length, then random bytes.
        r.push(addr(5), b"abcd").unwrap();
        // SAFETY: inside the data area.
        unsafe { m.0.add(CONTROL + 4).write(0xff) };
        assert_eq!(r.pop(&mut head, &mut buf, 4096), Pop::Garbage);
        r.push(addr(6), b"after").unwrap();
        assert_eq!(r.pop(&mut head, &mut buf, 4096), Pop::Frame(5, addr(6)));
        // Longer than the consumer accepts.
        r.push(addr(6), &[0; 100]).unwrap();
        assert_eq!(r.pop(&mut head, &mut buf, 64), Pop::Garbage);
    }

    #[test]
    fn a_dead_lock_holder_is_taken_over_and_a_live_one_times_out() {
        let m = Mem::new(4096);
        // SAFETY: as above.
        let r = unsafe { Ring::new(m.0, 4096) };
        r.reset();
        // A pid that does not exist (beyond pid_max).
        r.word32(LOCK).store(0x7fff_fff0, Ordering::Release);
        r.push(addr(1), b"x").unwrap();
        // pid 1 exists: a live holder that never lets go.
        r.word32(LOCK).store(1, Ordering::Release);
        let t = Instant::now();
        assert_eq!(r.push(addr(1), b"y"), Err(PushError::Stuck));
        assert!(t.elapsed() >= LOCK_PATIENCE);
    }

    #[test]
    fn the_sleeping_flag_wakes_exactly_one_producer() {
        let m = Mem::new(4096);
        // SAFETY: as above.
        let r = unsafe { Ring::new(m.0, 4096) };
        r.reset();
        assert!(r.prepare_sleep(0));
        assert!(r.needs_wake());
        assert!(!r.needs_wake(), "cleared by the first");
        r.push(addr(1), b"x").unwrap();
        assert!(!r.prepare_sleep(0), "data arrived: do not sleep");
    }
}
