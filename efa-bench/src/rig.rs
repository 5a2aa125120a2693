//! [`Rig`]: the device objects both sides of every case use (one context, PD, CQs, QPs
//! and registrations, made once through the safe API), and the raw views of them the C
//! side is given.

use std::sync::Arc;
use std::time::Duration;

use efa::*;

use crate::ffi;

/// A PD shared by everything in the rig (no lifetimes: the rig owns it all).
pub type SharedPd = Arc<Pd<Arc<Context>>>;
/// An extended CQ of the rig.
pub type SharedExtCq = Arc<ExtCq<Arc<Context>>>;
/// A classic CQ of the rig.
pub type SharedCq = Arc<Cq<Arc<Context>>>;
/// An RTS queue pair of the rig.
pub type RigQp = Qp<SharedPd, Rts>;

/// Bytes per message of the single-WR and batch cases.
pub const MSG: u32 = 64;
/// Inline payload of the inline case (within every EFA device's 32-byte inline buffer).
pub const INLINE: u32 = 16;
/// Work requests per batch (RDMA-write batch, batch build, drains).
pub const BATCH: u32 = 32;
/// Sends (and receives) per doorbell in the round-trip case.
pub const ROUND_TRIP: u32 = 16;
/// Message slots cycled through by the single-WR cases (a power of two).
pub const SLOTS: u32 = 64;
/// Receive slot size.
pub const RECV_SLOT: u32 = 256;
/// Receive slots per receiving QP.
pub const RECV_SLOTS: u32 = 256;
/// Queue depths of the QPs.
pub const DEPTH: u32 = 256;
/// How long any untimed wait of a case may take.
pub const WAIT: Duration = Duration::from_secs(10);

/// Every object the cases use. `a` sends; `b` receives on `cq_b` (drained by the
/// extended drain), `c` on the classic `cq_c` (classic drain), `e` on `cq_a` (the
/// round trip, whose sends and receives complete on one CQ). `cq_idle`/`cq_idle_classic`
/// never get a completion (empty polls).
pub struct Rig {
    /// The device.
    pub ctx: Arc<Context>,
    /// The one PD.
    pub pd: SharedPd,
    /// `a`'s send CQ, and `e`'s receive CQ.
    pub cq_a: SharedExtCq,
    /// `b`'s CQ.
    pub cq_b: SharedExtCq,
    /// `c`'s classic CQ.
    pub cq_c: SharedCq,
    /// An extended CQ no QP uses.
    pub cq_idle: SharedExtCq,
    /// A classic CQ no QP uses.
    pub cq_idle_classic: SharedCq,
    /// The sender.
    pub a: RigQp,
    /// Receiver on `cq_b`.
    pub b: RigQp,
    /// Receiver on `cq_c`.
    pub c: RigQp,
    /// Receiver on `cq_a`.
    pub e: RigQp,
    /// `a`'s peers.
    pub to_b: Peer<SharedPd>,
    /// See `to_b`.
    pub to_c: Peer<SharedPd>,
    /// See `to_b`.
    pub to_e: Peer<SharedPd>,
    /// Send and RDMA-write source (never written after registration).
    pub src: Mr<SharedPd, Vec<u8>>,
    /// Receive slots of `b`, `c` and `e`.
    pub inbox_b: Mr<SharedPd, Vec<u8>>,
    /// See `inbox_b`.
    pub inbox_c: Mr<SharedPd, Vec<u8>>,
    /// See `inbox_b`.
    pub inbox_e: Mr<SharedPd, Vec<u8>>,
    /// RDMA-write target (peers may write it: copies only).
    pub target: Mr<SharedPd, Vec<u8>, RemoteWrite>,
    /// The target as a peer addresses it (what arrives over the wire).
    pub remote: RemoteBuffer,
    /// Inline payload.
    pub inline: [u8; INLINE as usize],
    /// The raw views the C side gets (only used on a provider rig).
    pub raw: RawRig,
    backend: Backend,
}

/// Raw pointers and descriptors of the rig's objects, for the C side. Every pointer
/// stays valid as long as the [`Rig`] that made it.
pub struct RawRig {
    /// `a` as `ibv_qp_ex`.
    pub qpx_a: *mut ffi::ibv_qp_ex,
    /// `e` (the round trip's receiver).
    pub qp_e: *mut ffi::ibv_qp,
    /// `cq_a`, `cq_b`, `cq_idle` as `ibv_cq_ex`.
    pub cqx_a: *mut ffi::ibv_cq_ex,
    /// See `cqx_a`.
    pub cqx_b: *mut ffi::ibv_cq_ex,
    /// See `cqx_a`.
    pub cqx_idle: *mut ffi::ibv_cq_ex,
    /// `cq_c`, `cq_idle_classic` as `ibv_cq`.
    pub cq_c: *mut ffi::ibv_cq,
    /// See `cq_c`.
    pub cq_idle_classic: *mut ffi::ibv_cq,
    /// Destinations.
    pub to_b: ffi::VsDest,
    /// See `to_b`.
    pub to_e: ffi::VsDest,
    /// Registered regions.
    pub src: ffi::VsLocal,
    /// See `src`.
    pub inbox_e: ffi::VsLocal,
    /// The RDMA-write target as a peer sees it.
    pub target: ffi::VsRemote,
    /// What the C batch builder checks against.
    pub limits: ffi::VsLimits,
}

fn dest(p: &Peer<SharedPd>) -> ffi::VsDest {
    ffi::VsDest {
        ah: p.ah().as_ptr(),
        qpn: p.qpn(),
        qkey: p.qkey(),
    }
}

fn local<M: MemoryRegion>(m: &M) -> ffi::VsLocal {
    ffi::VsLocal {
        addr: m.iova(),
        len: m.len(),
        lkey: m.lkey(),
    }
}

impl Rig {
    /// Opens the first EFA device and makes every object with `backend`; `Err` says what
    /// failed. The C side's raw views are only valid on a [`Backend::Provider`] rig.
    ///
    /// # Panics
    /// For [`Backend::Auto`]: a rig is of one known data path.
    pub fn new(backend: Backend) -> Result<Rig> {
        assert_ne!(backend, Backend::Auto, "a rig is of one known data path");
        let ctx = Arc::new(Context::open_first_efa()?);
        let pd: SharedPd = Arc::new(Pd::new(Arc::clone(&ctx))?);
        let opts = CqOptions::new(2048).backend(backend);
        let ext = || ExtCq::new(Arc::clone(&ctx), opts).map(Arc::new);
        let classic = || Cq::new(Arc::clone(&ctx), opts).map(Arc::new);
        let (cq_a, cq_b, cq_idle) = (ext()?, ext()?, ext()?);
        let (cq_c, cq_idle_classic) = (classic()?, classic()?);
        let cfg = QpConfig::srd().depth(DEPTH, DEPTH).backend(backend);
        let qp = |send: &SharedExtCq, recv: RecvCq<'_>, qkey: u32| -> Result<RigQp> {
            let send = Arc::clone(send);
            let q = match recv {
                RecvCq::Ext(r) => Qp::new(Arc::clone(&pd), send, Arc::clone(r), &cfg)?,
                RecvCq::Classic(r) => Qp::new(Arc::clone(&pd), send, Arc::clone(r), &cfg)?,
            };
            q.prepare(qkey, None)
        };
        let a = qp(&cq_a, RecvCq::Ext(&cq_a), 0xa)?;
        let b = qp(&cq_a, RecvCq::Ext(&cq_b), 0xb)?;
        let c = qp(&cq_a, RecvCq::Classic(&cq_c), 0xc)?;
        let e = qp(&cq_a, RecvCq::Ext(&cq_a), 0xe)?;
        let peer = |q: &RigQp| Peer::connect(Arc::clone(&pd), &q.endpoint());
        let (to_b, to_c, to_e) = (peer(&b)?, peer(&c)?, peer(&e)?);
        let src = Mr::new(
            Arc::clone(&pd),
            (0..64 * 1024).map(|i| i as u8).collect(),
            AccessFlags::empty(),
        )?;
        let inbox = || {
            Mr::new(
                Arc::clone(&pd),
                vec![0u8; (RECV_SLOT * RECV_SLOTS) as usize],
                AccessFlags::LOCAL_WRITE,
            )
        };
        let (inbox_b, inbox_c, inbox_e) = (inbox()?, inbox()?, inbox()?);
        let target = Mr::new_remote_write(
            Arc::clone(&pd),
            vec![0u8; 64 * 1024],
            AccessFlags::LOCAL_WRITE,
        )?;
        let remote = target.remote();
        let raw = RawRig {
            // SAFETY: `a` was created by the safe API with extended send ops, so
            // ibv_qp_to_qp_ex returns its live ibv_qp_ex.
            qpx_a: unsafe { ffi::ibv_qp_to_qp_ex(a.as_ptr()) },
            qp_e: e.as_ptr(),
            // An extended CQ's ibv_cq_ex starts with its ibv_cq.
            cqx_a: cq_a.as_cq_ptr().cast(),
            cqx_b: cq_b.as_cq_ptr().cast(),
            cqx_idle: cq_idle.as_cq_ptr().cast(),
            cq_c: cq_c.as_cq_ptr(),
            cq_idle_classic: cq_idle_classic.as_cq_ptr(),
            to_b: dest(&to_b),
            to_e: dest(&to_e),
            src: local(&src),
            inbox_e: local(&inbox_e),
            target: {
                let r = remote;
                ffi::VsRemote {
                    addr: r.addr(),
                    len: r.len(),
                    rkey: r.rkey(),
                }
            },
            limits: ffi::VsLimits {
                max_send_wr: a.limits().max_send_wr(),
                max_rdma_size: a.limits().max_rdma_size(),
            },
        };
        if raw.qpx_a.is_null() {
            return Err(Error::NoSuchDevice);
        }
        Ok(Rig {
            ctx,
            pd,
            cq_a,
            cq_b,
            cq_c,
            cq_idle,
            cq_idle_classic,
            a,
            b,
            c,
            e,
            to_b,
            to_c,
            to_e,
            src,
            inbox_b,
            inbox_c,
            inbox_e,
            target,
            remote,
            inline: *b"sixteen bytes!!!",
            raw,
            backend,
        })
    }

    /// The rig's data path.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The device's firmware string (efa-sim's starts with `efa-sim`).
    pub fn fw_ver(&self) -> String {
        self.ctx
            .query_device()
            .map(|a| a.fw_ver().to_string())
            .unwrap_or_default()
    }

    /// Posts `n` receives of one slot each on `qp` (`inbox` its slots), through the
    /// safe API: the untimed set-up of the cases that send.
    pub fn post_recvs(&self, qp: &RigQp, inbox: &Mr<SharedPd, Vec<u8>>, n: u32) -> Result<()> {
        let mut left = n;
        let mut slot = 0u64;
        while left > 0 {
            let k = left.min(32);
            let mut r = RecvBatch::<32>::new(qp);
            for _ in 0..k {
                let off = (slot % RECV_SLOTS as u64) * RECV_SLOT as u64;
                r.push(slot, inbox.sge(off, RECV_SLOT as u64)?)?;
                slot += 1;
            }
            // SAFETY: the inbox is never read; the device may write it at any time.
            unsafe { qp.post_recv(&r)? };
            left -= k;
        }
        Ok(())
    }
}

/// The receive CQ of a rig QP, of either kind.
enum RecvCq<'a> {
    Ext(&'a SharedExtCq),
    Classic(&'a SharedCq),
}

/// Polls `cq` until `n` completions arrived (each must have succeeded) or [`WAIT`]
/// passed: the untimed clean-up of the cases.
pub fn drain<Q: CompletionQueue>(cq: &Q, n: u32) -> Result<()> {
    let mut left = n as usize;
    while left >= 32 {
        let mut got = ArrayVec::<Completion, 32>::new();
        cq.poll_until(&mut got, 32, WAIT)?;
        got.iter().try_for_each(|c| c.result().map(drop))?;
        left -= 32;
    }
    // One at a time: never take a completion that is not this drain's.
    for _ in 0..left {
        cq.wait(WAIT)?.result()?;
    }
    Ok(())
}
