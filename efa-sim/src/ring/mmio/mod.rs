//! Doorbells as MMIO: a store to a send queue's doorbell reaches the device at once, on
//! the storing thread, as a store to a real device's BAR does.
//!
//! A direct consumer (`efadv_query_qp_wqs`) rings the send queue by storing to the
//! doorbell address it was given; no call into efa-sim follows. Rather than only
//! noticing that store on a later scan ([`crate::model::watcher`]), efa-sim hands out
//! the doorbell in a page of its own, mapped twice: the consumer's view is read-only,
//! efa-sim's view (where the device reads the register) is writable. The consumer's store
//! faults; efa-sim's `SIGSEGV` handler decodes the storing instruction ([`decode`]),
//! performs the store through the writable view, steps the program counter past it and
//! lets the device consume the WQEs, all before the store "returns". The cost is a
//! signal per doorbell (about 2 µs on this project's machine), paid once per batch.
//!
//! Where the instruction is not one a doorbell write compiles to, or no page could be
//! mapped twice, the page is opened (made writable) and the watcher notices the doorbell
//! as before: slower, never wrong. A fault outside these pages goes to the handler that
//! was installed before efa-sim's (the default action if none was).
//!
//! Under ThreadSanitizer (whose runtime performs atomic stores while holding its own
//! locks) doorbells stay plain memory, as with `mmio_trap=0`.
//!
//! Programs that install their own `SIGSEGV` handler after efa-sim must chain to the one
//! they replaced (as the JVM, libsigsegv and Python's `faulthandler` do), or set the
//! profile key `mmio_trap=0`: the doorbells are then plain memory and only the watcher
//! sees them.

pub mod decode;
mod stack;

use core::ffi::c_void;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::collections::BTreeMap;
use std::sync::{Arc, Once, OnceLock, RwLock, Weak};

/// Bytes of a trapped page, the host's page size (4 KiB, or 64 KiB on some aarch64
/// kernels); the doorbell register sits at its start.
pub(super) fn page() -> usize {
    super::host_page_size()
}
/// `si_code` of a fault on a mapped page that forbids the access (asm-generic/siginfo.h;
/// the libc crate does not name it for Linux).
const SEGV_ACCERR: i32 = 2;

/// What the device does when a consumer stored to a trapped page.
pub trait DoorbellListener: Send + Sync {
    /// The store has landed in the register: consume what it announces.
    fn doorbell_written(&self);
    /// The store could not be decoded; the page is open from now on.
    fn trap_opened(&self);
}

/// One trapped page: the consumer's read-only view and efa-sim's writable one.
pub struct MmioPage {
    rw: NonNull<u8>,
    user: NonNull<u8>,
}

// SAFETY: the views are plain shared memory owned by this value; the register in them is
// accessed atomically only, and the views are unmapped only in Drop.
unsafe impl Send for MmioPage {}
// SAFETY: as above.
unsafe impl Sync for MmioPage {}

/// Whether stores may trap in this process. Not under ThreadSanitizer: it makes atomic
/// stores inside its runtime, holding its own locks, and a trap taken there would run the
/// device's work (more atomics) inside them, which deadlocks. Its runtime is in the
/// process when `__tsan_init` is.
pub fn traps_usable() -> bool {
    static USABLE: OnceLock<bool> = OnceLock::new();
    *USABLE.get_or_init(|| {
        // SAFETY: a symbol lookup in the loaded objects; the name is NUL-terminated.
        unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__tsan_init".as_ptr()) }.is_null()
    })
}

impl MmioPage {
    /// Maps a zeroed page twice (None when the system refuses, or under ThreadSanitizer
    /// ([`traps_usable`]): the caller keeps its doorbell in plain memory).
    pub fn new() -> Option<MmioPage> {
        if !traps_usable() {
            return None;
        }
        // SAFETY: creating an anonymous memory file touches no memory of ours.
        let fd = unsafe { libc::memfd_create(c"efa-sim-doorbell".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        let map = |prot| {
            // SAFETY: a fresh shared mapping of the memory file; no existing memory is
            // touched and failure is reported as MAP_FAILED.
            let p =
                unsafe { libc::mmap(core::ptr::null_mut(), page(), prot, libc::MAP_SHARED, fd, 0) };
            (p != libc::MAP_FAILED).then(|| p.cast::<u8>())
        };
        // SAFETY: fd is the memory file made above.
        let sized = unsafe { libc::ftruncate(fd, page() as libc::off_t) } == 0;
        let rw = if sized {
            map(libc::PROT_READ | libc::PROT_WRITE)
        } else {
            None
        };
        let user = rw.and_then(|_| map(libc::PROT_READ));
        // SAFETY: the mappings hold their own reference to the file.
        unsafe { libc::close(fd) };
        match (rw.and_then(NonNull::new), user.and_then(NonNull::new)) {
            (Some(rw), Some(user)) => {
                for p in [rw, user] {
                    // A forked child must not share a live register with its parent
                    // (rdma-core marks queue memory MADV_DONTFORK the same way).
                    // SAFETY: advice on our own page-aligned mapping.
                    unsafe { libc::madvise(p.as_ptr().cast(), page(), libc::MADV_DONTFORK) };
                }
                Some(MmioPage { rw, user })
            }
            (rw, user) => {
                for p in [rw, user].into_iter().flatten() {
                    // SAFETY: a mapping made above, referenced nowhere else.
                    unsafe { libc::munmap(p.as_ptr().cast(), page()) };
                }
                None
            }
        }
    }

    /// The register as the device sees it (writable view, page-aligned).
    pub fn register(&self) -> *mut u8 {
        self.rw.as_ptr()
    }

    /// The register's address for the consumer (read-only view).
    pub fn user_address(&self) -> *mut u8 {
        self.user.as_ptr()
    }

    /// From now on a store to the consumer's view reaches `listener` (installs the
    /// handler on first use).
    pub fn arm(&self, listener: Weak<dyn DoorbellListener>) {
        install();
        let entry = Entry {
            rw: self.rw.as_ptr() as usize,
            listener,
        };
        pages()
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(self.user.as_ptr() as usize, entry);
    }
}

impl Drop for MmioPage {
    fn drop(&mut self) {
        // Forget the page before its address can be reused.
        pages()
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(self.user.as_ptr() as usize));
        for p in [self.rw, self.user] {
            // SAFETY: exactly the mappings made in `new`; the consumer's queue is gone.
            unsafe { libc::munmap(p.as_ptr().cast(), page()) };
        }
    }
}

struct Entry {
    rw: usize,
    listener: Weak<dyn DoorbellListener>,
}

/// The armed pages by the consumer's page address.
fn pages() -> &'static RwLock<BTreeMap<usize, Entry>> {
    static PAGES: OnceLock<RwLock<BTreeMap<usize, Entry>>> = OnceLock::new();
    PAGES.get_or_init(Default::default)
}

/// The handler efa-sim replaced.
struct Previous(libc::sigaction);
// SAFETY: plain data (a function address, flags and a mask), written once.
unsafe impl Send for Previous {}
// SAFETY: as above.
unsafe impl Sync for Previous {}
static PREVIOUS: OnceLock<Previous> = OnceLock::new();

fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: a zeroed sigaction is a valid "no handler" value to fill in.
        let mut new: libc::sigaction = unsafe { core::mem::zeroed() };
        new.sa_sigaction = on_segv as *const () as usize;
        // NODEFER: a fault inside the device's work (a program's bug) must not find
        // SIGSEGV blocked, and threads started there must not inherit it blocked.
        // ONSTACK: where a thread has an alternate signal stack, a fault on its
        // overflowed stack can still be delivered (and passed on to the handler that
        // reports it); the device's work then runs on a stack of its own (`stack`).
        new.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_ONSTACK;
        // SAFETY: as above.
        let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
        // SAFETY: both structs are valid; the handler is an extern "C" fn of the
        // SA_SIGINFO signature.
        unsafe {
            libc::sigemptyset(&mut new.sa_mask);
            if libc::sigaction(libc::SIGSEGV, &new, &mut old) == 0 {
                let _ = PREVIOUS.set(Previous(old));
            }
        }
    });
}

extern "C" fn on_segv(sig: i32, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: errno is this thread's; the device's work may change it.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo and ucontext to an SA_SIGINFO handler.
    let handled = unsafe { take(info, ctx) };
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    if !handled {
        // SAFETY: forwarding the kernel's arguments to the handler they were meant for.
        unsafe { chain(sig, info, ctx) };
    }
}

/// Handles a fault on an armed page; false if the fault is not ours.
///
/// # Safety
/// `info` and `ctx` are the kernel's arguments to an SA_SIGINFO handler of a fault.
#[inline(never)]
unsafe fn take(info: *mut libc::siginfo_t, ctx: *mut c_void) -> bool {
    // SAFETY: caller.
    let info = unsafe { &*info };
    if info.si_code != SEGV_ACCERR {
        return false;
    }
    // SAFETY: a SIGSEGV's siginfo carries the fault address.
    let addr = unsafe { info.si_addr() } as usize;
    let page_len = page();
    let page = addr & !(page_len - 1);
    // The page stays registered, so mapped, while this guard lives: `MmioPage::drop`
    // takes the write lock before it unmaps (a consumer storing to a queue another of
    // its threads destroys must not have efa-sim write into memory unmapped meanwhile).
    let map = pages().read().unwrap_or_else(|e| e.into_inner());
    let Some(entry) = map.get(&page) else {
        return false;
    };
    let (rw, listener) = (entry.rw, entry.listener.upgrade());
    // SAFETY: caller: ctx is the interrupted thread's context.
    let uc = unsafe { &mut *ctx.cast::<libc::ucontext_t>() };
    // SAFETY: the program counter points at the instruction that faulted (readable code).
    let store = unsafe { decode_at(uc) };
    let offset = addr - page;
    match store {
        // Only the faulting store itself: a context whose program counter is not that
        // instruction's (callgrind without precise registers) gives another address.
        Some(s) if s.addr == addr as u64 && offset + usize::from(s.width) <= page_len => {
            // SAFETY: rw + offset .. + width is inside efa-sim's writable view of the
            // page, mapped while `map` is held.
            let old = unsafe { store_into((rw + offset) as *mut u8, s) };
            drop(map);
            // SAFETY: as decode_at; the context is the thread's, resumed after we return.
            unsafe { step_over(uc, s, old) };
            // A queue being destroyed takes the store as plain memory.
            if let Some(l) = listener {
                notify(&l);
            }
        }
        _ => {
            // SAFETY: our own consumer view, mapped while `map` is held; the store is
            // then retried and lands in the shared page, where the watcher sees it.
            unsafe {
                libc::mprotect(
                    page as *mut c_void,
                    page_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                )
            };
            drop(map);
            if let Some(l) = listener {
                l.trap_opened();
            }
        }
    }
    true
}

/// Runs the device's work on this thread's device stack (the handler may be on a small
/// alternate stack); a panic there must not unwind through the signal frame.
fn notify(listener: &Arc<dyn DoorbellListener>) {
    extern "C" fn work(arg: *mut c_void) {
        // SAFETY: `arg` is the `&Arc` `notify` passed, alive for this call.
        let listener = unsafe { &*arg.cast::<Arc<dyn DoorbellListener>>() };
        let run = std::panic::AssertUnwindSafe(|| listener.doorbell_written());
        if std::panic::catch_unwind(run).is_err() {
            std::process::abort();
        }
    }
    let arg = core::ptr::from_ref(listener).cast_mut().cast::<c_void>();
    stack::run_on_device_stack(work, arg);
}

/// Stores `s` at `at` (efa-sim's view); the old value for an exchange.
///
/// # Safety
/// `at .. at + s.width` is inside a live writable page.
unsafe fn store_into(at: *mut u8, s: decode::Store) -> u64 {
    let width = usize::from(s.width);
    if width == 4 && at as usize % 4 == 0 {
        // SAFETY: aligned and inside the page (caller); the device loads it atomically.
        return u64::from(
            unsafe { AtomicU32::from_ptr(at.cast()) }.swap(s.value as u32, Ordering::AcqRel),
        );
    }
    if width == 8 && at as usize % 8 == 0 {
        // SAFETY: as above.
        return unsafe { AtomicU64::from_ptr(at.cast()) }.swap(s.value, Ordering::AcqRel);
    }
    let mut old = 0u64;
    for i in 0..width {
        // SAFETY: byte i of the range the caller vouches for.
        unsafe {
            old |= u64::from(core::ptr::read_volatile(at.add(i))) << (8 * i);
            core::ptr::write_volatile(at.add(i), (s.value >> (8 * i)) as u8);
        }
    }
    old
}

/// Decodes the instruction at the context's program counter.
///
/// # Safety
/// `uc` is a faulting thread's context; its program counter points at readable code.
#[cfg(target_arch = "x86_64")]
unsafe fn decode_at(uc: &libc::ucontext_t) -> Option<decode::Store> {
    let rip_value = uc.uc_mcontext.gregs[libc::REG_RIP as usize] as u64;
    let rip = rip_value as usize as *const u8;
    let mut code = [0u8; decode::X86_MAX_LEN];
    // Read one byte at a time, only as many as the instruction has: the bytes after it
    // may be on an unmapped page.
    for have in 0..code.len() {
        match decode::x86_64_parse(&code[..have], rip_value, |r| x86_reg(uc, r)) {
            Ok(s) => return Some(s),
            Err(decode::Stop::Other) => return None,
            Err(decode::Stop::Short) => {}
        }
        // SAFETY: the CPU fetched this instruction, so its bytes are readable, and the
        // decoder asked for this one as part of it.
        code[have] = unsafe { core::ptr::read_volatile(rip.add(have)) };
    }
    decode::x86_64(&code, rip_value, |r| x86_reg(uc, r))
}

/// Where general register `r` (the encoding's numbering) is in the saved context.
#[cfg(target_arch = "x86_64")]
fn x86_greg(r: u8) -> usize {
    const ORDER: [i32; 16] = [
        libc::REG_RAX,
        libc::REG_RCX,
        libc::REG_RDX,
        libc::REG_RBX,
        libc::REG_RSP,
        libc::REG_RBP,
        libc::REG_RSI,
        libc::REG_RDI,
        libc::REG_R8,
        libc::REG_R9,
        libc::REG_R10,
        libc::REG_R11,
        libc::REG_R12,
        libc::REG_R13,
        libc::REG_R14,
        libc::REG_R15,
    ];
    ORDER[usize::from(r & 15)] as usize
}

#[cfg(target_arch = "x86_64")]
fn x86_reg(uc: &libc::ucontext_t, r: u8) -> u64 {
    uc.uc_mcontext.gregs[x86_greg(r)] as u64
}

/// Moves the program counter past the store (and hands an exchange its old value).
///
/// # Safety
/// `uc` is the faulting thread's context and `s` the instruction at its program counter.
#[cfg(target_arch = "x86_64")]
unsafe fn step_over(uc: &mut libc::ucontext_t, s: decode::Store, old: u64) {
    let g = &mut uc.uc_mcontext.gregs;
    if let Some(r) = s.exchange_into {
        let prev = g[x86_greg(r)] as u64;
        // A 32-bit result zero-extends; 8- and 16-bit ones keep the register's other bits.
        let keep = match s.width {
            1 => prev & !0xff,
            2 => prev & !0xffff,
            _ => 0,
        };
        g[x86_greg(r)] = (keep | old) as i64;
    }
    g[libc::REG_RIP as usize] += i64::from(s.len);
}

/// Decodes the instruction at the context's program counter.
///
/// # Safety
/// `uc` is a faulting thread's context; its program counter points at readable code.
#[cfg(target_arch = "aarch64")]
unsafe fn decode_at(uc: &libc::ucontext_t) -> Option<decode::Store> {
    // SAFETY: caller: the faulting instruction word is readable and 4-byte aligned.
    let insn = unsafe { core::ptr::read_volatile(uc.uc_mcontext.pc as *const u32) };
    let m = &uc.uc_mcontext;
    decode::aarch64(insn, m.sp, |r| m.regs[usize::from(r)])
}

/// Moves the program counter past the store.
///
/// # Safety
/// `uc` is the faulting thread's context and `s` the instruction at its program counter.
#[cfg(target_arch = "aarch64")]
unsafe fn step_over(uc: &mut libc::ucontext_t, s: decode::Store, _old: u64) {
    uc.uc_mcontext.pc += u64::from(s.len);
}

/// Other architectures: nothing is decoded; every trap opens its page.
///
/// # Safety
/// None needed.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe fn decode_at(_uc: &libc::ucontext_t) -> Option<decode::Store> {
    None
}

/// # Safety
/// Never called: nothing is decoded on other architectures.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe fn step_over(_uc: &mut libc::ucontext_t, _s: decode::Store, _old: u64) {}

/// Passes a fault that is not ours to the handler efa-sim replaced.
///
/// # Safety
/// The kernel's arguments of the current SIGSEGV.
unsafe fn chain(sig: i32, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let prev = PREVIOUS.get().map(|p| p.0.sa_sigaction);
    match prev {
        Some(h) if h != libc::SIG_DFL && h != libc::SIG_IGN => {
            let flags = PREVIOUS.get().map_or(0, |p| p.0.sa_flags);
            if flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous handler was installed with this signature.
                let f: extern "C" fn(i32, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { core::mem::transmute(h) };
                f(sig, info, ctx);
            } else {
                // SAFETY: a plain handler takes the signal number only.
                let f: extern "C" fn(i32) = unsafe { core::mem::transmute(h) };
                f(sig);
            }
        }
        _ => {
            // The default action: returning re-runs the faulting access, which then
            // terminates the process as if efa-sim had never been there.
            // SAFETY: a zeroed sigaction with SIG_DFL is valid.
            let mut dfl: libc::sigaction = unsafe { core::mem::zeroed() };
            dfl.sa_sigaction = libc::SIG_DFL;
            // SAFETY: valid struct; restoring the default for this signal.
            unsafe { libc::sigaction(libc::SIGSEGV, &dfl, core::ptr::null_mut()) };
        }
    }
}
