//! The stack the doorbell trap runs the device's work on.
//!
//! The trap's handler is installed with `SA_ONSTACK`, as every `SIGSEGV` handler that
//! wants to report stack overflows is (Rust's own among them): when a thread has an
//! alternate signal stack the kernel runs the handler there, and when that thread
//! overflows its stack the fault can still be delivered and passed on. Alternate stacks
//! are small (Rust's: a few KiB beside the kernel's signal frame), too small for the
//! device's work, so the handler runs that work on a stack of this thread's own, mapped
//! once per thread with a guard page below it.

use core::ffi::c_void;
use std::cell::Cell;

/// Bytes of a device stack (without its guard page, one system page below it).
const STACK: usize = 512 << 10;

/// This thread's device stack: its mapping's base (guard included), or null.
struct DeviceStack(Cell<*mut u8>);

impl Drop for DeviceStack {
    fn drop(&mut self) {
        let base = self.0.get();
        if !base.is_null() {
            // SAFETY: the mapping made in `top`, of super::page() + STACK bytes; the thread is
            // exiting, so nothing runs on it any more.
            unsafe { libc::munmap(base.cast(), super::page() + STACK) };
        }
    }
}

thread_local! {
    static DEVICE_STACK: DeviceStack = const { DeviceStack(Cell::new(core::ptr::null_mut())) };
}

/// The top of this thread's device stack (16-byte aligned), mapped on first use; None
/// if it cannot be mapped or the thread is exiting.
fn top() -> Option<*mut u8> {
    DEVICE_STACK
        .try_with(|s| {
            if s.0.get().is_null() {
                // SAFETY: a fresh anonymous private mapping; failure is MAP_FAILED.
                let p = unsafe {
                    libc::mmap(
                        core::ptr::null_mut(),
                        super::page() + STACK,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                        -1,
                        0,
                    )
                };
                if p == libc::MAP_FAILED {
                    return None;
                }
                // SAFETY: the lowest page of the mapping just made: an overflow faults.
                unsafe { libc::mprotect(p, super::page(), libc::PROT_NONE) };
                s.0.set(p.cast());
            }
            // SAFETY: super::page() + STACK bytes are mapped from the base.
            Some(unsafe { s.0.get().add(super::page() + STACK) })
        })
        .ok()
        .flatten()
}

/// Runs `f(arg)` on this thread's device stack (on the current stack if none can be had).
/// `f` must not unwind.
pub(super) fn run_on_device_stack(f: extern "C" fn(*mut c_void), arg: *mut c_void) {
    match top() {
        // SAFETY: `top` is the 16-aligned top of a live stack of this thread that nothing
        // else uses (a trap does not nest: the handler's own work cannot trap), and `f`
        // does not unwind.
        Some(top) => unsafe { switch_and_call(top, f, arg) },
        None => f(arg),
    }
}

/// # Safety
/// `top` is the 16-aligned top of a mapped stack unused by anything else; `f` does not
/// unwind.
#[cfg(target_arch = "x86_64")]
unsafe fn switch_and_call(top: *mut u8, f: extern "C" fn(*mut c_void), arg: *mut c_void) {
    // SAFETY: the old stack pointer is kept in r12 (callee-saved, so `f` preserves it)
    // and restored after the call; the new one is 16-aligned at the call, as the ABI
    // wants; every caller-saved register is declared clobbered.
    unsafe {
        core::arch::asm!(
            "mov r12, rsp",
            "mov rsp, rsi",
            "call rax",
            "mov rsp, r12",
            in("rsi") top,
            in("rax") f,
            in("rdi") arg,
            out("r12") _,
            clobber_abi("C"),
        )
    }
}

/// # Safety
/// As the x86-64 form.
#[cfg(target_arch = "aarch64")]
unsafe fn switch_and_call(top: *mut u8, f: extern "C" fn(*mut c_void), arg: *mut c_void) {
    // SAFETY: the old stack pointer is kept in x20 (callee-saved) and restored after
    // the call; the new one is 16-aligned; every caller-saved register is clobbered.
    unsafe {
        core::arch::asm!(
            "mov x20, sp",
            "mov sp, x1",
            "blr x2",
            "mov sp, x20",
            in("x1") top,
            in("x2") f,
            in("x0") arg,
            out("x20") _,
            clobber_abi("C"),
        )
    }
}

/// # Safety
/// None: other architectures run `f` where they are.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe fn switch_and_call(_top: *mut u8, f: extern "C" fn(*mut c_void), arg: *mut c_void) {
    f(arg)
}
