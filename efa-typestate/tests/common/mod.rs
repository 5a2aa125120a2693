//! Shared helpers of the device tests (all run on efa-sim unless EFA_SIM=0).
#![allow(dead_code)]

use std::time::{Duration, Instant};

use arrayvec::ArrayVec;
use efa_typestate::*;

/// Opens `efa_<index>` and asserts it is the device this build selected.
pub fn open(index: usize) -> Context {
    let list = DeviceList::new().expect("ibv_get_device_list");
    let dev = list.efa().nth(index).unwrap_or_else(|| {
        panic!(
            "no EFA device #{index} (software device selected: {}, lib dir {:?}); {} devices listed",
            efa_sim_select::SOFTWARE_DEVICE,
            efa_sim_select::LIB_DIR,
            list.len()
        )
    });
    let ctx = dev.open().expect("ibv_open_device");
    let attr = ctx.query_device().expect("ibv_query_device");
    assert!(
        efa_sim_select::fw_matches_selection(attr.fw_ver()),
        "running on the wrong device: fw_ver {:?}",
        attr.fw_ver()
    );
    ctx
}

/// Polls until `n` completions arrived or `timeout` passed; returns what arrived.
pub fn poll_n<C: CompletionQueue>(cq: &C, n: usize, timeout: Duration) -> Vec<Completion> {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    while out.len() < n && Instant::now() < deadline {
        let mut got = ArrayVec::<Completion, 16>::new();
        cq.poll(&mut got).expect("poll");
        if got.is_empty() {
            std::thread::sleep(Duration::from_micros(50));
        }
        out.extend(got);
    }
    out
}

/// Polls for `n` completions and fails the test if they do not all arrive.
pub fn expect_n<C: CompletionQueue>(cq: &C, n: usize) -> Vec<Completion> {
    let got = poll_n(cq, n, Duration::from_secs(10));
    assert_eq!(got.len(), n, "expected {n} completions, got {got:?}");
    got
}

/// Asserts nothing more arrives within `wait`.
pub fn expect_none<C: CompletionQueue>(cq: &C, wait: Duration) {
    let got = poll_n(cq, 1, wait);
    assert!(got.is_empty(), "unexpected completions: {got:?}");
}

pub const QKEY_A: u32 = 0x1111_1111;
pub const QKEY_B: u32 = 0x2222_2222;
