//! Shared helpers of the device tests (all run on efa-sim unless EFA_SIM=0).
#![allow(dead_code)]

use std::time::{Duration, Instant};

#[macro_use]
pub mod direct;
pub mod props;
#[macro_use]
pub mod rails;

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

/// A PD borrowing its context, as most tests use it.
pub type BPd<'a> = Pd<&'a Context>;

/// Creates a QP on `pd` whose sends and receives both complete on `cq` and brings it to
/// RTS with `qkey` and the crate's default RNR retry.
pub fn rts_qp<'a, C: CompletionQueue>(
    pd: &'a BPd<'_>,
    cq: &'a C,
    config: &QpConfig,
    qkey: u32,
) -> Qp<&'a BPd<'a>, Rts> {
    pd.create_qp(cq, cq, config)
        .unwrap()
        .prepare(qkey, None)
        .unwrap()
}

/// Registers `len` zero bytes as a target peers may RDMA-write into
/// (`LOCAL_WRITE | REMOTE_WRITE`).
pub fn write_target<'pd>(pd: &'pd BPd<'_>, len: usize) -> Mr<&'pd BPd<'pd>, Vec<u8>, RemoteWrite> {
    pd.register_remote_write(vec![0u8; len], AccessFlags::LOCAL_WRITE)
        .unwrap()
}

pub const QKEY_A: u32 = 0x1111_1111;
pub const QKEY_B: u32 = 0x2222_2222;

/// Runs `body` in a child process (this test binary re-run for `test_name` only) with
/// the extra environment `env`, so that variables the software device reads at start-up
/// take effect. In the child (recognised by `EFA_TS_CHILD`), runs `body` directly.
pub fn in_child(test_name: &str, env: &[(&str, &str)], body: impl FnOnce()) {
    in_child_without(test_name, env, &[], body)
}

/// [`in_child`], with the variables `unset` removed from the child's environment.
pub fn in_child_without(
    test_name: &str,
    env: &[(&str, &str)],
    unset: &[&str],
    body: impl FnOnce(),
) {
    if std::env::var("EFA_TS_CHILD").as_deref() == Ok(test_name) {
        for (k, v) in env {
            assert_eq!(std::env::var(k).as_deref(), Ok(*v), "child environment");
        }
        for k in unset {
            assert!(
                std::env::var_os(k).is_none(),
                "child environment: {k} is set"
            );
        }
        body();
        return;
    }
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    for k in unset {
        cmd.env_remove(k);
    }
    let out = cmd
        .args([test_name, "--exact", "--nocapture", "--test-threads=1"])
        .env("EFA_TS_CHILD", test_name)
        .envs(env.iter().copied())
        .output()
        .expect("spawn child test process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(stdout.contains("1 passed"), "child ran no test:\n{stdout}");
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Two SRD QPs on one device, each with its own CQ, connected both ways.
#[macro_export]
macro_rules! pair {
    ($ctx:ident, $pd:ident, $cqa:ident, $cqb:ident, $a:ident, $b:ident, $to_b:ident, $to_a:ident) => {
        pair!(
            $ctx,
            $pd,
            $cqa,
            $cqb,
            $a,
            $b,
            $to_b,
            $to_a,
            QpConfig::srd(),
            QpConfig::srd()
        )
    };
    ($ctx:ident, $pd:ident, $cqa:ident, $cqb:ident, $a:ident, $b:ident, $to_b:ident, $to_a:ident, $cfga:expr, $cfgb:expr) => {
        let $ctx = $crate::common::open(0);
        let $pd = $ctx.alloc_pd().unwrap();
        // Each side's CQ on the data path its QP asks for (a direct QP needs direct CQs).
        let $cqa = $ctx
            .create_ext_cq(CqOptions::new(1024).backend($cfga.backend_choice()))
            .unwrap();
        let $cqb = $ctx
            .create_ext_cq(
                CqOptions::new(1024)
                    .unsolicited_flag()
                    .sender_gid()
                    .backend($cfgb.backend_choice()),
            )
            .unwrap();
        let $a = rts_qp(&$pd, &$cqa, &$cfga, QKEY_A);
        let $b = rts_qp(&$pd, &$cqb, &$cfgb, QKEY_B);
        let $to_b = $pd.connect(&$b.endpoint()).unwrap();
        let $to_a = $pd.connect(&$a.endpoint()).unwrap();
    };
}

/// Posts one receive of `sge` (in any state that accepts receives).
pub fn recv_one<P: Parent, S: RecvReady>(qp: &Qp<P, S>, wr_id: u64, sge: Sge<'_>) {
    let mut r = RecvBatch::<1>::new(qp);
    r.push(wr_id, sge).unwrap();
    // SAFETY: tests read a receive buffer only after polling its completion, or after
    // resetting or destroying the QP (which ends the device's right to write it).
    unsafe { qp.post_recv(&r) }.unwrap();
}
