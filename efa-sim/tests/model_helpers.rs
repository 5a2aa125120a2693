//! Shared helpers for the model_* tests (included with `#[path]`; as a test
//! target of its own it contains no tests).
#![allow(dead_code)]

use efa_sim::model::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const QKEY: u32 = 0x1111_1111;
pub const ALL_ACCESS: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_WRITE;
pub const SIGNALED: u32 = 1 << 1;

pub fn dev(i: usize) -> Arc<Device> {
    let sim = Sim::get();
    assert!(sim.error().is_none(), "{:?}", sim.error());
    sim.devices()[i].clone()
}

/// Registered memory that stays alive until the MR is deregistered.
pub struct Region {
    mem: Box<[u8]>,
    pub mr: Arc<Mr>,
}

impl Region {
    pub fn new(pd: &Arc<Pd>, len: usize, access: u32) -> Region {
        let mut mem = vec![0u8; len].into_boxed_slice();
        // SAFETY: `mem` lives in this Region and is only freed after dereg (Drop).
        let mr = unsafe { pd.reg_mr(mem.as_mut_ptr() as usize, len, mem.as_ptr() as u64, access) }
            .expect("reg_mr");
        Region { mem, mr }
    }
    pub fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }
    pub fn sge(&self, off: usize, len: u32) -> Sge {
        Sge {
            addr: self.addr() + off as u64,
            length: len,
            lkey: self.mr.lkey(),
        }
    }
    /// Snapshot of the bytes (read through a volatile copy: the device writes
    /// asynchronously, tests read only after the matching completion).
    pub fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        for (i, b) in v.iter_mut().enumerate() {
            // SAFETY: in bounds of `mem`.
            *b = unsafe { std::ptr::read_volatile(self.mem.as_ptr().add(off + i)) };
        }
        v
    }
    pub fn fill(&self, off: usize, data: &[u8]) {
        for (i, b) in data.iter().enumerate() {
            // SAFETY: in bounds of `mem`; the device only reads it while a WR is outstanding.
            unsafe { std::ptr::write_volatile(self.mem.as_ptr().add(off + i) as *mut u8, *b) };
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let _ = self.mr.dereg();
    }
}

pub fn caps(send: u32, recv: u32) -> QpCaps {
    QpCaps {
        max_send_wr: send,
        max_recv_wr: recv,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 32,
    }
}

pub fn srd_init(cq: &Arc<Cq>, c: QpCaps, efa_flags: u16) -> QpInit {
    QpInit {
        qp_type: QpType::Srd,
        send_cq: cq.clone(),
        recv_cq: cq.clone(),
        caps: c,
        sq_sig_all: false,
        send_ops_flags: Some(0x1f),
        efa_flags,
        sl: 0,
    }
}

pub fn modify(qp: &Qp, mask: u32, state: QpState) -> Result<(), Errno> {
    qp.modify(&ModifyQp {
        mask,
        state: state as u32,
        port_num: 1,
        qkey: QKEY,
        ..Default::default()
    })
}

/// RESET → INIT → RTR → RTS with the canonical attribute sets.
pub fn to_rts(qp: &Qp) {
    modify(qp, 1 | 16 | 32 | 64, QpState::Init).expect("INIT");
    modify(qp, 1, QpState::Rtr).expect("RTR");
    modify(qp, 1 | (1 << 16), QpState::Rts).expect("RTS");
}

/// One side of a connection: PD, CQ, QP in RTS.
pub struct Side {
    pub dev: Arc<Device>,
    pub pd: Arc<Pd>,
    pub cq: Arc<Cq>,
    pub qp: Arc<Qp>,
}

impl Side {
    pub fn new(dev: &Arc<Device>, efa_flags: u16) -> Side {
        Self::with_opts(dev, efa_flags, CqOptions::default(), QpType::Srd)
    }
    pub fn with_opts(dev: &Arc<Device>, efa_flags: u16, opts: CqOptions, t: QpType) -> Side {
        let pd = dev.alloc_pd().expect("pd");
        let (cq, _) = dev.create_cq(1024, opts).expect("cq");
        let mut init = srd_init(&cq, caps(256, 256), efa_flags);
        init.qp_type = t;
        if t == QpType::Ud {
            init.send_ops_flags = Some(0xc);
        }
        let (qp, _) = pd.create_qp(&init).expect("qp");
        to_rts(&qp);
        Side {
            dev: dev.clone(),
            pd,
            cq,
            qp,
        }
    }
    pub fn ah_to(&self, other: &Side) -> Arc<Ah> {
        self.pd.create_ah(&other.dev.gid).expect("ah")
    }
}

pub fn wr(ah: &Arc<Ah>, remote_qpn: u32, wr_id: u64, op: SendOp, sges: &[Sge]) -> SendWr {
    SendWr {
        wr_id,
        op,
        send_flags: SIGNALED,
        imm_be: 0,
        ah: ah.clone(),
        remote_qpn,
        remote_qkey: QKEY,
        payload: Payload::Sges(sges.iter().copied().collect()),
        remote: None,
    }
}

pub fn recv(wr_id: u64, sges: &[Sge]) -> RecvWr {
    RecvWr {
        wr_id,
        sges: sges.iter().copied().collect(),
    }
}

/// Waits for the next completion on `cq` (panics after `secs`), retires it.
pub fn next(cq: &Cq, secs: u64) -> Completion {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(c) = cq.peek() {
            cq.retire();
            return c;
        }
        assert!(Instant::now() < deadline, "no completion within {secs} s");
        std::thread::yield_now();
    }
}

/// Asserts no completion arrives within `ms`.
pub fn none_within(cq: &Cq, ms: u64) {
    let deadline = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < deadline {
        if let Some(c) = cq.peek() {
            panic!("unexpected completion {c:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A standalone device with a profile tweak (index must be unique per test binary).
pub fn special(index: u32, tweak: impl FnOnce(&mut Profile)) -> Arc<Device> {
    let mut p = Profile::default();
    tweak(&mut p);
    Device::standalone(index, std::net::Ipv4Addr::LOCALHOST, p).expect("standalone device")
}

/// A byte pattern of `len` bytes (`seed` varies it).
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A side on device 0 and one on device 1 (its QP created with `flags_b`).
pub fn pair(flags_b: u16) -> (Side, Side) {
    (Side::new(&dev(0), 0), Side::new(&dev(1), flags_b))
}

/// An RDMA work request of `op` from `local` to `remote` (address, rkey).
pub fn rdma(
    ah: &std::sync::Arc<Ah>,
    qpn: u32,
    id: u64,
    op: SendOp,
    local: Sge,
    remote: (u64, u32),
) -> SendWr {
    let mut w = wr(ah, qpn, id, op, &[local]);
    w.remote = Some(remote);
    w
}

/// Re-runs the calling test binary's other tests over the datagram path
/// (`EFA_SIM_DIRECT=0`; `this` is the calling test, skipped there): same-process requests
/// normally take the direct path, and both paths must give the same results. Returns at
/// once inside the re-run.
pub fn rerun_over_datagrams(this: &str) {
    if std::env::var_os("EFA_SIM_DIRECT").is_some() {
        return; // we are the re-run
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--skip", this, "--test-threads=4"])
        .env("EFA_SIM_DIRECT", "0")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "datagram-path run failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("test result: ok"), "{text}");
    assert!(!text.contains(" 0 passed"), "nothing ran: {text}");
}
