//! The opt-in doorbell trap (`mmio_trap=1`) takes only its own faults: with it installed (a send queue's rings
//! handed out, a doorbell stored), a program's real segmentation fault still kills it
//! with SIGSEGV, and a thread's stack overflow still reaches Rust's own handler, which
//! reports it. Each case runs in a child process (this test binary, re-run).

#[path = "model_helpers.rs"]
mod helpers;
use efa_sim::model::*;
use helpers::*;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

const CASE: &str = "EFA_SIM_TRAP_CHILD";

/// Installs the trap the way a direct consumer does and checks that it works.
fn arm_the_trap() -> Side {
    let d = special(56, |p| p.mmio_trap = true);
    let pd = d.alloc_pd().unwrap();
    let (cq, _) = d.create_cq(16, CqOptions::default()).unwrap();
    let (qp, _) = pd.create_qp(&srd_init(&cq, caps(16, 16), 0)).unwrap();
    to_rts(&qp);
    let s = Side {
        dev: d.clone(),
        pd,
        cq,
        qp,
    };
    let (sq, _) = s.qp.wq_layout();
    // SAFETY: the doorbell is a live, aligned u32 of the QP's send ring.
    let db = unsafe { AtomicU32::from_ptr(sq.doorbell) };
    let bad = d.stats().bad_doorbells;
    db.store(sq.num_entries + 9, Ordering::Release);
    assert_eq!(
        d.stats().bad_doorbells,
        bad + 1,
        "the trap consumed the store"
    );
    db.store(0, Ordering::Release);
    s
}

fn run_child(case: &str, test: &str) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CASE, case)
        .output()
        .unwrap()
}

#[test]
fn a_real_segmentation_fault_still_kills_the_program() {
    if std::env::var(CASE).as_deref() == Ok("segv") {
        let _side = arm_the_trap();
        // A read-only page of the program's own: storing to it is its bug.
        // SAFETY: a fresh anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        eprintln!("storing to a read-only page");
        // SAFETY: deliberately not: the store faults, which is what is tested.
        unsafe { AtomicU32::from_ptr(p.cast()) }.store(7, Ordering::Release);
        eprintln!("survived a store to a read-only page");
        std::process::exit(0);
    }
    let out = run_child("segv", "a_real_segmentation_fault_still_kills_the_program");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("storing to a read-only page"), "{err}");
    assert!(!err.contains("survived"), "{err}");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGSEGV),
        "{:?}: {err}",
        out.status
    );
}

#[test]
fn a_stack_overflow_still_reaches_rusts_handler() {
    if std::env::var(CASE).as_deref() == Ok("overflow") {
        let _side = arm_the_trap();
        #[allow(unconditional_recursion)] // overflowing the stack is the point
        fn deeper(n: u64, buf: &mut [u8; 4096]) -> u64 {
            buf[(n % 4096) as usize] = n as u8;
            let mut next = [0u8; 4096];
            std::hint::black_box(&mut next);
            n + deeper(n + 1, &mut next) + u64::from(buf[0])
        }
        let t = std::thread::Builder::new()
            .name("deep".into())
            .stack_size(256 << 10)
            .spawn(|| deeper(0, &mut [0u8; 4096]))
            .unwrap();
        let _ = t.join();
        std::process::exit(0);
    }
    let out = run_child("overflow", "a_stack_overflow_still_reaches_rusts_handler");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("has overflowed its stack"),
        "{:?}: {err}",
        out.status
    );
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "{:?}: {err}",
        out.status
    );
}
