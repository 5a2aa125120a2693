//! The per-process runtime of one device: its UDP endpoint, object tables,
//! the requester's outstanding WRs (retransmission, timeouts) and the engine
//! thread that executes incoming requests against local QPs and MRs, so
//! one-sided RDMA progresses without the target polling.
//!
//! # Protocol (SRD)
//!
//! Every send WR becomes one request datagram with a per-endpoint `req_id`.
//! The responder executes it once (duplicates are suppressed by
//! `(requester address, epoch, req_id)`; reads are idempotent and simply
//! re-executed) and answers with a response carrying the EFA status (and the
//! data of a small RDMA read). The requester completes the WR only on that
//! response (SRD: success only after the responder acked). No response within
//! [`RTO`] → retransmit. An RNR response is retried after [`RNR_DELAY`],
//! `rnr_retry` times (7 = forever), then completes with status 10.
//! Nothing heard for [`PEER_TIMEOUT`] → status 13 if that peer address ever
//! answered this device, else 15. This bounds every WR towards a dead peer
//! (killed process, destroyed QP's process, qkey mismatch) to ≈ 1 s.
//!
//! Bulk RDMA (> [`INLINE_RDMA`] bytes) between processes uses a fast path:
//! the request names the requester's pid and buffer address (which the
//! requester validated through its lkey) and the responder, after validating
//! its own rkey/range, copies with `process_vm_readv`/`process_vm_writev`.
//! If that fails (other host, EPERM, ESRCH; or `EFA_SIM_NO_PROCESS_VM=1` at
//! the responder) the responder answers `STATUS_FALLBACK` (after validating
//! the rkey and range) and the requester moves the WR as ordinary
//! data-in-datagram requests of [`INLINE_RDMA`] bytes (8 in flight), each
//! acknowledged; a write-with-imm ends with a data-less *commit* request that
//! delivers the immediate once every chunk landed.
//!
//! # Trust model
//!
//! A datagram is data from an untrusted peer. Memory of *this* process is
//! only ever reached through one of its own MRs: every responder access is
//! checked against the rkey, range and access of a live MR of the target QP's
//! PD (under the MR table lock, so deregistration waits for it), and every
//! requester-side write (small-read data in a response) goes to the WR's own
//! SGE, re-validated against its lkey when the response arrives. Responses
//! carry no addresses; they are matched to a pending WR by id, epoch and
//! source address (the WR's destination). A commit request carries no data
//! and re-validates the whole remote range.
//!
//! The one field that names memory of *another* process is the bulk fast
//! path's `(pid, local_addr)`. The responder acts on it only when it can
//! prove the request came from that very process:
//!
//! * the datagram's source `(IP, UDP port)` equals the address derived from
//!   the requester GID and the slot of its QPN (a process can send from a
//!   port only while it has it bound, and efa-sim sockets are never shared
//!   through `SO_REUSEPORT`);
//! * that slot's owner record (`slot-<N>.owner` in the lock directory,
//!   written by the slot holder, owned by our effective uid and writable by
//!   nobody else) names `pid`, lists the source address as bound, and is in
//!   our pid namespace;
//! * the live process `pid` has the start time the record names; it is then
//!   pinned with a pidfd, so its exit (and any later reuse of the pid) voids
//!   the proof. A mismatching pid re-reads the record.
//!
//! Anything else (a forged or stale pid, an address the sender does not own,
//! no pidfd support, a different pid namespace) gets the answer
//! `STATUS_FALLBACK` once the rkey and range are valid, and the data moves in
//! datagrams, which is always safe because the bytes are in the packets
//! (counted in [`Stats::unproven`]). The requester re-validates its own range
//! against its lkey at every (re)transmission before naming it. A request
//! naming this very process is additionally checked against a live MR of one
//! of its devices. What this does not defend against: a process of the same
//! uid that writes false owner records or raw packets (it could read and
//! write the victim's memory through ptrace or `/proc/<pid>/mem` anyway), and
//! deregistering an MR while a WR on it is in flight (user error, as on
//! hardware: the copy may still land).
//!
//! # Same-process direct path
//!
//! When requester and responder devices live in one process and no faults
//! are configured (and `EFA_SIM_DIRECT` is not `0`), the posting thread
//! executes the request on the target device itself (same checks, same code
//! as the engine) and completes the WR at once: no datagram, no syscall.
//! Outcomes that need time (RNR, a silent drop such as a Q_Key mismatch, the
//! bulk fallback) go on over the datagram path, so every status and timing
//! rule above still holds. Completions can therefore be in the CQ before
//! `post_send_batch` returns.
//!
//! # Choices where the hardware is unspecified (model §7)
//!
//! * Receive buffer too small for a SEND: sender status 11; the receiver gets
//!   no completion and its receive WR stays posted (at the head of the RQ).
//! * Receive SGE with a bad lkey / no LOCAL_WRITE at the responder: the
//!   receive completes with status 5 (WQE consumed), the sender with status 7.
//! * Q_Key mismatch: the datagram is dropped and counted
//!   ([`Stats::qkey_violations`]); the sender therefore times out: status 13
//!   (or 15 if the peer never answered) after ≈ 1 s.
//! * RDMA longer than `max_rdma_size`: status 6 at the requester, nothing sent.
//! * Unknown peer (responder PD has no AH for the requester's GID): status 14
//!   for RDMA read, write and write-with-imm.
//! * Unsolicited write-with-imm: decided by the *responder* QP's
//!   `EFADV_QP_FLAGS_UNSOLICITED_WRITE_RECV` flag alone (the requester's flags
//!   play no part, as on hardware where the flag changes only receive-side
//!   RQ consumption).
//! * UD: unreliable, no response, sender completes OK once sent; the receiver
//!   drops the datagram (counted in [`Stats::ud_drops`]) when no receive is
//!   posted or the buffer is too small; the first 40 bytes of the receive
//!   buffer are left as they were (GRH area, content undefined).

use super::cq::Slot;
use super::transport::wire::{self, Header, Op};
use super::transport::{Endpoint, Faults};
use super::*;
use std::cell::RefCell;
use std::collections::HashSet;
use std::net::SocketAddrV4;
use std::sync::atomic::AtomicU64;
use std::sync::RwLock;
use std::time::{Duration, Instant};

/// Multiply-shift hasher for the integer keys of the hot tables (ids and
/// keys are not attacker-chosen in a way that matters: a flood of colliding
/// keys only slows this device down).
#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(5) ^ *b as u64).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    fn write_u16(&mut self, v: u16) {
        self.write_u64(v as u64);
    }
}

/// A HashMap with [`IdHasher`].
pub(crate) type IdMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<IdHasher>>;

/// Retransmission timeout.
pub const RTO: Duration = Duration::from_millis(10);
/// Wait before retrying after an RNR response.
pub const RNR_DELAY: Duration = Duration::from_millis(1);
/// A WR whose peer stays silent this long completes with status 13/15.
pub const PEER_TIMEOUT: Duration = Duration::from_millis(1000);
/// RDMA up to this many bytes carries its data in the datagram.
pub const INLINE_RDMA: usize = 16 * 1024;

const STATUS_RNR: u8 = 10;

/// Counters of one device in one process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests dropped because their Q_Key did not match the QP's.
    pub qkey_violations: u64,
    /// Datagrams that were not well-formed efa-sim packets.
    pub malformed: u64,
    /// Duplicate requests answered from the cache without re-executing.
    pub duplicates: u64,
    /// Requests sent again after the retransmission timeout (10 ms).
    pub retransmits: u64,
    /// RNR responses sent.
    pub rnr_naks: u64,
    /// UD datagrams dropped (no receive posted, buffer too small, bad QP).
    pub ud_drops: u64,
    /// Requests dropped as older than the requester's low watermark (late duplicates).
    pub stale: u64,
    /// Bulk RDMA WRs moved in chunks because the responder could not use process_vm_*.
    pub chunked: u64,
    /// WRs executed on a same-process device without datagrams.
    pub direct: u64,
    /// Bulk RDMA copies this responder made with process_vm_readv/writev.
    pub process_vm: u64,
    /// Bulk requests naming process memory whose sender was not proven to be
    /// that process (see "Trust model"): answered with the chunk fallback.
    pub unproven: u64,
}

#[derive(Default)]
pub(crate) struct StatsInner {
    qkey_violations: AtomicU64,
    malformed: AtomicU64,
    duplicates: AtomicU64,
    retransmits: AtomicU64,
    rnr_naks: AtomicU64,
    ud_drops: AtomicU64,
    stale: AtomicU64,
    chunked: AtomicU64,
    direct: AtomicU64,
    process_vm: AtomicU64,
    unproven: AtomicU64,
}

impl StatsInner {
    pub(crate) fn snapshot(&self) -> Stats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            qkey_violations: l(&self.qkey_violations),
            malformed: l(&self.malformed),
            duplicates: l(&self.duplicates),
            retransmits: l(&self.retransmits),
            rnr_naks: l(&self.rnr_naks),
            ud_drops: l(&self.ud_drops),
            stale: l(&self.stale),
            chunked: l(&self.chunked),
            direct: l(&self.direct),
            process_vm: l(&self.process_vm),
            unproven: l(&self.unproven),
        }
    }
}

fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

/// What a request carries, kept so it can be rebuilt for retransmission.
#[derive(Clone)]
struct Spec {
    header: Header,
    /// Local segments (lkey, iova, len), re-validated at every use.
    sges: arrayvec::ArrayVec<Sge, MAX_SEND_SGE>,
    inline: arrayvec::ArrayVec<u8, MAX_INLINE>,
    /// Whether the data travels in the datagram (SEND, small WRITE).
    carries_data: bool,
}

struct Pending {
    qp: Arc<Qp>,
    wr_id: u64,
    kind: CompletionKind,
    dest: SocketAddrV4,
    ah: Arc<Ah>,
    spec: Spec,
    next_tx: Instant,
    last_heard: Instant,
    rnr_left: u8,
    /// This request is one chunk of the pending WR with that id.
    chunk_parent: Option<u64>,
    /// This WR is being moved in chunks (its fast path failed).
    chunking: Option<Chunking>,
}

/// Progress of a WR moved as data-in-datagram chunks.
#[derive(Clone, Copy)]
struct Chunking {
    next_off: u64,
    inflight: u32,
    total: u64,
}

/// Chunks in flight per chunked WR.
const CHUNK_WINDOW: u32 = 8;

struct AhAlloc {
    next: u16,
    free: Vec<u16>,
    live: u32,
}

/// Duplicate-suppression state for one requester incarnation.
#[derive(Default)]
struct PeerDedup {
    watermark: u64,
    done: IdMap<u64, u8>,
    last_seen: Option<Instant>,
}

/// A requester incarnation silent this long is forgotten by the responder
/// (its WRs have long timed out).
const PEER_FORGET: Duration = Duration::from_secs(30);

/// Every runtime started in this process (for same-process range checks).
static RUNTIMES: Mutex<Vec<Weak<Runtime>>> = Mutex::new(Vec::new());

pub(crate) struct Runtime {
    pub gid: Gid,
    pub profile: Profile,
    pid: u32,
    epoch: u64,
    pub ep: Endpoint,
    pub pd_count: AtomicU32,
    pub next_pd: AtomicU32,
    pub cq_count: AtomicU32,
    pub next_qp_index: AtomicU32,
    pub mrs: RwLock<IdMap<u32, Arc<Mr>>>,
    next_key: AtomicU32,
    pub qps: RwLock<Vec<Option<Arc<Qp>>>>,
    ahs: Mutex<AhAlloc>,
    pending: Mutex<IdMap<u64, Pending>>,
    next_req: AtomicU64,
    low_water: AtomicU64,
    /// `EFA_SIM_NO_PROCESS_VM=1`: answer every bulk request with FALLBACK
    /// (forces the data-in-datagram chunk path, as between hosts).
    no_process_vm: bool,
    /// Device index.
    index: u32,
    /// Same-process requests may skip the datagram path (no faults configured,
    /// `EFA_SIM_DIRECT` not `0`).
    direct: bool,
    heard: Mutex<HashSet<SocketAddrV4>>,
    /// Requester processes proven (or refused) per source address.
    proofs: Mutex<IdMap<SocketAddrV4, Proof>>,
    pub stats: StatsInner,
}

/// What this responder knows about the process behind a source address.
enum Proof {
    /// The owner record named `pid` at this address; `pidfd` pins that very
    /// process (it becomes readable when the process exits).
    Proven {
        pid: u32,
        pidfd: std::os::fd::OwnedFd,
    },
    /// Proof for `pid` failed; not retried before `until`.
    Refused { pid: u32, until: Instant },
}

/// How long a failed proof is remembered (a flood of forged requests costs
/// one owner-record read per address and second).
const PROOF_RETRY: Duration = Duration::from_secs(1);

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(vec![0u8; wire::MAX_DATAGRAM]);
    /// Packet and response buffers of the same-process direct path.
    static DIRECT: RefCell<(Vec<u8>, Vec<u8>)> = RefCell::new((vec![0u8; wire::MAX_DATAGRAM], vec![0u8; wire::MAX_DATAGRAM]));
    /// Requests of one `post_send_batch`, bundled per destination.
    static TX: RefCell<(bool, wire::BundleBuf)> = RefCell::new((false, wire::BundleBuf::default()));
}

fn completion(qp: &Qp, wr_id: u64, kind: CompletionKind, status: u8) -> Completion {
    Completion {
        wr_id,
        status,
        kind,
        byte_len: 0,
        imm_be: None,
        qp_num: qp.qpn,
        src_qp: 0,
        slid: 0xffff,
        unsolicited: false,
        sgid: None,
    }
}

impl Runtime {
    pub(crate) fn start(dev: &Arc<Device>) -> Result<Arc<Runtime>, String> {
        let faults = Faults::from_env()?;
        let direct_ok =
            !faults.active() && std::env::var("EFA_SIM_DIRECT").map_or(true, |v| v != "0");
        let ep = Endpoint::bind(dev.addr, dev.index, faults)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let pid = std::process::id();
        let rt = Arc::new(Runtime {
            gid: dev.gid,
            profile: dev.profile.clone(),
            pid,
            epoch: now ^ ((pid as u64) << 32) ^ dev.index as u64,
            ep,
            pd_count: AtomicU32::new(0),
            next_pd: AtomicU32::new(1),
            cq_count: AtomicU32::new(0),
            next_qp_index: AtomicU32::new(0),
            mrs: RwLock::new(IdMap::default()),
            next_key: AtomicU32::new(1),
            qps: RwLock::new(vec![None; MAX_QPS_PER_PROCESS as usize + 1]),
            ahs: Mutex::new(AhAlloc {
                next: 1,
                free: Vec::new(),
                live: 0,
            }),
            pending: Mutex::new(IdMap::with_capacity_and_hasher(8192, Default::default())),
            next_req: AtomicU64::new(1),
            low_water: AtomicU64::new(1),
            no_process_vm: std::env::var("EFA_SIM_NO_PROCESS_VM").is_ok_and(|v| v == "1"),
            index: dev.index,
            direct: direct_ok,
            heard: Mutex::new(HashSet::new()),
            proofs: Mutex::new(IdMap::default()),
            stats: StatsInner::default(),
        });
        RUNTIMES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&rt));
        let engine_rt = rt.clone();
        std::thread::Builder::new()
            .name(format!("efa-sim-{}", dev.name))
            .spawn(move || Engine::new(engine_rt).run())
            .map_err(|e| format!("cannot spawn engine thread: {e}"))?;
        Ok(rt)
    }

    /// A fresh 24-bit key (never 0, not in use).
    pub(crate) fn alloc_key(&self, mrs: &IdMap<u32, Arc<Mr>>) -> u32 {
        loop {
            let k = self.next_key.fetch_add(1, Ordering::Relaxed) & 0xff_ffff;
            if k != 0 && !mrs.contains_key(&k) {
                return k;
            }
        }
    }

    pub(crate) fn alloc_ah_number(&self) -> Result<u16, Errno> {
        let mut a = self.ahs.lock().unwrap_or_else(|e| e.into_inner());
        if a.live >= self.profile.max_ah.min(0xfffe) {
            return Err(libc::ENOMEM);
        }
        let n = match a.free.pop() {
            Some(n) => n,
            None => {
                let n = a.next;
                a.next = a.next.wrapping_add(1);
                n
            }
        };
        a.live += 1;
        Ok(n)
    }

    pub(crate) fn free_ah_number(&self, n: u16) {
        let mut a = self.ahs.lock().unwrap_or_else(|e| e.into_inner());
        a.live -= 1;
        a.free.push(n);
    }

    fn qp_by_qpn(&self, qpn: u32) -> Option<Arc<Qp>> {
        if transport::slot_of_qpn(qpn) != self.ep.slot() {
            return None;
        }
        let idx = (qpn & ((1 << transport::QP_INDEX_BITS) - 1)) as usize;
        let qps = self.qps.read().unwrap_or_else(|e| e.into_inner());
        qps.get(idx)
            .and_then(|q| q.clone())
            .filter(|q| q.qpn == qpn && !q.dead.load(Ordering::Acquire))
    }

    /// Local range of `sge` inside a live MR of `pd` with `need` access.
    fn local_range(
        mrs: &IdMap<u32, Arc<Mr>>,
        pd: &Arc<Pd>,
        sge: &Sge,
        need: AccessFlags,
    ) -> Option<usize> {
        let mr = mrs.get(&sge.lkey)?;
        if !Arc::ptr_eq(&mr.pd, pd) {
            return None;
        }
        mr.host_range(sge.addr, sge.length as u64, need)
    }

    // -----------------------------------------------------------------
    // Requester side
    // -----------------------------------------------------------------

    /// Executes one posted send WR (its SQ slot is already taken).
    pub(crate) fn start_send(self: &Arc<Self>, qp: &Arc<Qp>, wr: &SendWr) {
        let kind = match wr.op {
            SendOp::Send | SendOp::SendImm => CompletionKind::Send,
            SendOp::RdmaRead => CompletionKind::RdmaRead,
            SendOp::RdmaWrite | SendOp::RdmaWriteImm => CompletionKind::RdmaWrite,
        };
        let fail = |status: u8| {
            qp.send_cq
                .push(completion(qp, wr.wr_id, kind, status), Slot::Sq(qp.clone()))
        };
        // The AH must be live and belong to the QP's PD.
        if wr.ah.dead.load(Ordering::Acquire) || std::ptr::addr_of!(*qp.pd) != wr.ah.pd.as_ptr() {
            return fail(4);
        }
        let Some((ip, dev)) = gid_endpoint(&wr.ah.gid) else {
            return fail(4);
        };
        let Some(dest) = transport::addr_of(ip, dev, wr.remote_qpn) else {
            return fail(4);
        };
        let (sges, inline, total) = match &wr.payload {
            Payload::Sges(s) => {
                let total: u64 = s.iter().map(|g| g.length as u64).sum();
                (s.clone(), arrayvec::ArrayVec::new(), total)
            }
            Payload::Inline(d) => (arrayvec::ArrayVec::new(), d.clone(), d.len() as u64),
        };
        // Local keys: every SGE in a live MR of this PD (LOCAL_WRITE for a read target).
        let need = if wr.op == SendOp::RdmaRead {
            ACCESS_LOCAL_WRITE
        } else {
            0
        };
        {
            let mrs = self.mrs.read().unwrap_or_else(|e| e.into_inner());
            if sges
                .iter()
                .any(|g| Self::local_range(&mrs, &qp.pd, g, need).is_none())
            {
                return fail(5);
            }
        }
        let rdma = kind != CompletionKind::Send;
        if (!rdma && total > self.profile.mtu_bytes as u64)
            || (rdma && total > self.profile.max_rdma_size as u64)
        {
            return fail(6);
        }
        let mut h = Header::new(
            wire::KIND_REQ,
            match wr.op {
                SendOp::Send | SendOp::SendImm => Op::Send,
                SendOp::RdmaRead => Op::Read,
                _ => Op::Write,
            },
        );
        h.epoch = self.epoch;
        h.src_gid = self.gid;
        h.src_qpn = qp.qpn as u16;
        h.dst_qpn = wr.remote_qpn as u16;
        h.qkey = wr.remote_qkey;
        h.total_len = total as u32;
        if matches!(wr.op, SendOp::SendImm | SendOp::RdmaWriteImm) {
            h.flags |= wire::FLAG_IMM;
            h.imm = wr.imm_be;
        }
        if let Some((addr, rkey)) = wr.remote {
            h.remote_addr = addr;
            h.rkey = rkey;
        }
        let bulk = rdma && total as usize > INLINE_RDMA;
        if bulk {
            // One SGE (check_send enforces it); its host address for the peer's copy.
            let mrs = self.mrs.read().unwrap_or_else(|e| e.into_inner());
            let host = sges
                .first()
                .and_then(|g| Self::local_range(&mrs, &qp.pd, g, need))
                .unwrap_or(0);
            h.flags |= wire::FLAG_FAST;
            h.pid = self.pid;
            h.local_addr = host as u64;
        }
        let carries_data = !bulk && wr.op != SendOp::RdmaRead;
        let spec = Spec {
            header: h,
            sges,
            inline,
            carries_data,
        };
        if qp.qp_type == QpType::Ud {
            h.flags |= wire::FLAG_UD;
            let spec = Spec { header: h, ..spec };
            let sent = self.transmit(&qp.pd, &spec, dest);
            return fail(if sent { 0 } else { 5 });
        }
        if let Some(target) = self.direct_target(ip, dev, wr.remote_qpn) {
            if self.try_direct(&target, qp, wr.wr_id, kind, &spec, dest) {
                return;
            }
        }
        let now = Instant::now();
        let mut spec = spec;
        let req_id = {
            // Allocate the id under the lock that publishes it, so the low
            // watermark (computed under the same lock) never passes a live id.
            let mut pend = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let req_id = self.next_req.fetch_add(1, Ordering::Relaxed);
            spec.header.req_id = req_id;
            let pending = Pending {
                qp: qp.clone(),
                wr_id: wr.wr_id,
                kind,
                dest,
                ah: wr.ah.clone(),
                spec: spec.clone(),
                next_tx: now + RTO,
                last_heard: now,
                rnr_left: qp.rnr_retry.load(Ordering::Acquire),
                chunk_parent: None,
                chunking: None,
            };
            pend.insert(req_id, pending);
            req_id
        };
        if !self.transmit(&qp.pd, &spec, dest) {
            self.finish(req_id, 5);
        }
    }

    /// Builds and sends the datagram of `spec`; false if a local key went
    /// away (MR deregistered while the WR was outstanding).
    fn transmit(&self, pd: &Arc<Pd>, spec: &Spec, dest: SocketAddrV4) -> bool {
        SCRATCH.with(|buf| {
            let mut buf = buf.borrow_mut();
            match self.build_packet(pd, spec, &mut buf) {
                Some(len) => {
                    self.emit(&buf[..len], dest);
                    true
                }
                None => false,
            }
        })
    }

    /// Encodes `spec` (gathering its data from registered memory) into `buf`;
    /// the packet length, or `None` if a local key went away.
    fn build_packet(&self, pd: &Arc<Pd>, spec: &Spec, buf: &mut [u8]) -> Option<usize> {
        let mut h = spec.header;
        if h.flags & wire::FLAG_FAST != 0 {
            // The peer will copy to/from this address: it must still be our
            // registered memory at every (re)transmission.
            let need = if h.op == Op::Read {
                ACCESS_LOCAL_WRITE
            } else {
                0
            };
            let mrs = self.mrs.read().unwrap_or_else(|e| e.into_inner());
            h.local_addr = Self::local_range(&mrs, pd, spec.sges.first()?, need)? as u64;
        }
        let mut len = wire::HEADER;
        if spec.carries_data {
            if !spec.inline.is_empty() {
                buf[len..len + spec.inline.len()].copy_from_slice(&spec.inline);
                len += spec.inline.len();
            } else {
                let mrs = self.mrs.read().unwrap_or_else(|e| e.into_inner());
                for g in &spec.sges {
                    let host = Self::local_range(&mrs, pd, g, 0)?;
                    let l = g.length as usize;
                    if len + l > wire::MAX_DATAGRAM {
                        return None;
                    }
                    // SAFETY: host..host+l lies in a live MR (checked under the read lock we hold).
                    unsafe { mem::read_registered(host, &mut buf[len..len + l]) };
                    len += l;
                }
            }
        }
        h.data_len = (len - wire::HEADER) as u32;
        h.watermark = self.low_water.load(Ordering::Relaxed);
        h.encode(buf);
        Some(len)
    }

    /// The runtime of device `dev` at `ip` if it lives in this process and QP
    /// `qpn` would be ours, and neither side injects faults: requests to it
    /// may be executed directly, without datagrams.
    fn direct_target(&self, ip: std::net::Ipv4Addr, dev: u32, qpn: u32) -> Option<Arc<Runtime>> {
        if !self.direct || transport::slot_of_qpn(qpn) != self.ep.slot() {
            return None;
        }
        let rts = RUNTIMES.lock().unwrap_or_else(|e| e.into_inner());
        rts.iter()
            .filter_map(Weak::upgrade)
            .find(|rt| rt.index == dev && *rt.ep.local.ip() == ip && rt.direct)
    }

    /// Executes a request on a same-process `target` and completes the WR.
    /// Returns false (nothing done) when the outcome needs the datagram path:
    /// RNR (retried with delay), fallback, or a silent drop (times out).
    fn try_direct(
        &self,
        target: &Arc<Runtime>,
        qp: &Arc<Qp>,
        wr_id: u64,
        kind: CompletionKind,
        spec: &Spec,
        dest: SocketAddrV4,
    ) -> bool {
        DIRECT.with(|bufs| {
            let mut bufs = bufs.borrow_mut();
            let (pkt, out) = &mut *bufs;
            let Some(len) = self.build_packet(&qp.pd, spec, pkt) else {
                return false;
            };
            let mut resp_len = 0usize;
            let h = spec.header;
            let outcome = target.execute(&h, &pkt[wire::HEADER..len], None, out, &mut resp_len);
            let mut status = match outcome {
                Outcome::Respond(st) if st != STATUS_RNR && st != wire::STATUS_FALLBACK => st,
                _ => return false,
            };
            if status == 0 && kind == CompletionKind::RdmaRead && h.flags & wire::FLAG_FAST == 0 {
                let mrs = self.mrs.read().unwrap_or_else(|e| e.into_inner());
                let local = spec
                    .sges
                    .first()
                    .and_then(|g| Self::local_range(&mrs, &qp.pd, g, ACCESS_LOCAL_WRITE));
                match local {
                    // SAFETY: inside a live MR with LOCAL_WRITE (read lock held).
                    Some(host) => unsafe {
                        mem::write_registered(host, &out[wire::HEADER..wire::HEADER + resp_len])
                    },
                    None if resp_len == 0 => {}
                    None => status = 5,
                }
            }
            self.mark_heard(dest);
            bump(&self.stats.direct);
            qp.send_cq
                .push(completion(qp, wr_id, kind, status), Slot::Sq(qp.clone()));
            true
        })
    }

    /// Sends a packet now, or adds it to this thread's open batch bundle.
    fn emit(&self, pkt: &[u8], dest: SocketAddrV4) {
        TX.with(|tx| {
            let mut tx = tx.borrow_mut();
            let (active, bundle) = &mut *tx;
            if !*active {
                drop(tx);
                self.ep.send(pkt, dest);
                return;
            }
            if bundle.to.is_some_and(|to| to != dest) || !bundle.fits(pkt.len()) {
                if let Some(to) = bundle.to {
                    self.ep.send(bundle.datagram(), to);
                }
                bundle.clear();
            }
            bundle.push(dest, pkt);
        })
    }

    /// Starts bundling this thread's requests (one `post_send_batch`).
    pub(crate) fn begin_batch(&self) {
        TX.with(|tx| tx.borrow_mut().0 = true);
    }

    /// Sends the open bundle and stops bundling.
    pub(crate) fn end_batch(&self) {
        TX.with(|tx| {
            let mut tx = tx.borrow_mut();
            let (active, bundle) = &mut *tx;
            *active = false;
            if let Some(to) = bundle.to {
                self.ep.send(bundle.datagram(), to);
            }
            bundle.clear();
        })
    }

    /// Completes pending request `req_id` with `status` (if still pending).
    fn finish(&self, req_id: u64, status: u8) {
        let mut to_send: Vec<(Arc<Pd>, Spec, SocketAddrV4)> = Vec::new();
        let done = {
            let mut pend = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            self.settle(&mut pend, req_id, status, &mut to_send)
        };
        self.after_settle(done, to_send);
    }

    /// Pushes the completion `settle` produced and sends the requests it queued.
    fn after_settle(
        &self,
        done: Option<(Arc<Qp>, u64, CompletionKind, u8)>,
        to_send: Vec<(Arc<Pd>, Spec, SocketAddrV4)>,
    ) {
        if let Some((qp, wr_id, kind, status)) = done {
            qp.send_cq
                .push(completion(&qp, wr_id, kind, status), Slot::Sq(qp.clone()));
        }
        for (pd, spec, dest) in &to_send {
            if !self.transmit(pd, spec, *dest) {
                self.finish(spec.header.req_id, 5);
            }
        }
    }

    /// Removes request `id` with `status`. A plain WR yields its completion; a
    /// chunk advances (or fails) its parent WR, queueing further chunks or the
    /// write-with-imm commit in `to_send`.
    fn settle(
        &self,
        pend: &mut IdMap<u64, Pending>,
        id: u64,
        status: u8,
        to_send: &mut Vec<(Arc<Pd>, Spec, SocketAddrV4)>,
    ) -> Option<(Arc<Qp>, u64, CompletionKind, u8)> {
        let p = pend.remove(&id)?;
        let Some(parent_id) = p.chunk_parent else {
            return Some((p.qp.clone(), p.wr_id, p.kind, status));
        };
        if status != 0 {
            let kids: Vec<u64> = pend
                .iter()
                .filter(|(_, c)| c.chunk_parent == Some(parent_id))
                .map(|(k, _)| *k)
                .collect();
            for k in kids {
                pend.remove(&k);
            }
            let parent = pend.remove(&parent_id)?;
            return Some((parent.qp.clone(), parent.wr_id, parent.kind, status));
        }
        let now = Instant::now();
        let parent = pend.get_mut(&parent_id)?;
        parent.last_heard = now;
        let mut ch = parent.chunking?;
        ch.inflight -= 1;
        let mut new_chunks = arrayvec::ArrayVec::<(u64, u32), 1>::new();
        if ch.next_off < ch.total {
            let len = (ch.total - ch.next_off).min(INLINE_RDMA as u64) as u32;
            new_chunks.push((ch.next_off, len));
            ch.next_off += len as u64;
            ch.inflight += 1;
        }
        parent.chunking = Some(ch);
        if ch.inflight == 0 && new_chunks.is_empty() {
            if parent.spec.header.flags & wire::FLAG_IMM != 0 {
                // All data landed: deliver the immediate with a commit request.
                parent.spec.header.flags =
                    (parent.spec.header.flags & !wire::FLAG_FAST) | wire::FLAG_COMMIT;
                parent.spec.carries_data = false;
                parent.chunking = None;
                parent.next_tx = now + RTO;
                to_send.push((parent.qp.pd.clone(), parent.spec.clone(), parent.dest));
                return None;
            }
            let parent = pend.remove(&parent_id)?;
            return Some((parent.qp.clone(), parent.wr_id, parent.kind, 0));
        }
        for (off, len) in new_chunks {
            self.spawn_chunk(pend, parent_id, off, len, to_send);
        }
        None
    }

    /// Adds chunk `[off, off+len)` of WR `parent_id` as its own request.
    fn spawn_chunk(
        &self,
        pend: &mut IdMap<u64, Pending>,
        parent_id: u64,
        off: u64,
        len: u32,
        to_send: &mut Vec<(Arc<Pd>, Spec, SocketAddrV4)>,
    ) {
        let Some(parent) = pend.get(&parent_id) else {
            return;
        };
        let mut spec = parent.spec.clone();
        spec.header.flags &= !(wire::FLAG_FAST | wire::FLAG_IMM | wire::FLAG_COMMIT);
        spec.header.remote_addr = spec.header.remote_addr.wrapping_add(off);
        spec.header.total_len = len;
        spec.header.pid = 0;
        spec.header.local_addr = 0;
        spec.header.imm = 0;
        if let Some(g) = spec.sges.first_mut() {
            g.addr = g.addr.wrapping_add(off);
            g.length = len;
        }
        spec.carries_data = spec.header.op == Op::Write;
        let now = Instant::now();
        let id = self.next_req.fetch_add(1, Ordering::Relaxed);
        spec.header.req_id = id;
        let chunk = Pending {
            qp: parent.qp.clone(),
            wr_id: parent.wr_id,
            kind: parent.kind,
            dest: parent.dest,
            ah: parent.ah.clone(),
            spec: spec.clone(),
            next_tx: now + RTO,
            last_heard: now,
            rnr_left: parent.rnr_left,
            chunk_parent: Some(parent_id),
            chunking: None,
        };
        to_send.push((parent.qp.pd.clone(), spec, parent.dest));
        pend.insert(id, chunk);
    }

    /// The responder could not copy with process_vm_*: move WR `id` in chunks.
    fn start_chunking(
        &self,
        pend: &mut IdMap<u64, Pending>,
        id: u64,
        to_send: &mut Vec<(Arc<Pd>, Spec, SocketAddrV4)>,
    ) {
        let Some(p) = pend.get_mut(&id) else { return };
        bump(&self.stats.chunked);
        let total = p.spec.header.total_len as u64;
        let mut ch = Chunking {
            next_off: 0,
            inflight: 0,
            total,
        };
        // The parent itself is not retransmitted while its chunks move.
        p.next_tx = Instant::now() + Duration::from_secs(3600);
        let mut spans = arrayvec::ArrayVec::<(u64, u32), { CHUNK_WINDOW as usize }>::new();
        while ch.next_off < total && ch.inflight < CHUNK_WINDOW {
            let len = (total - ch.next_off).min(INLINE_RDMA as u64) as u32;
            spans.push((ch.next_off, len));
            ch.next_off += len as u64;
            ch.inflight += 1;
        }
        p.chunking = Some(ch);
        for (off, len) in spans {
            self.spawn_chunk(pend, id, off, len, to_send);
        }
    }

    /// Drops outstanding requests of QP `qpn` without completions.
    pub(crate) fn purge_pending(&self, qpn: u32) {
        let gone: Vec<Pending> = {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let ids: Vec<u64> = p
                .iter()
                .filter(|(_, v)| v.qp.qpn == qpn)
                .map(|(k, _)| *k)
                .collect();
            ids.into_iter().filter_map(|k| p.remove(&k)).collect()
        };
        drop(gone);
    }

    /// Completes outstanding requests of QP `qpn` with `status`.
    pub(crate) fn flush_pending(&self, qpn: u32, status: u8) {
        self.flush_where(|p| p.qp.qpn == qpn, status);
    }

    /// Completes outstanding requests sent through `ah` with FLUSHED.
    pub(crate) fn flush_ah(&self, ah: &Ah) {
        self.flush_where(|p| std::ptr::eq(Arc::as_ptr(&p.ah), ah), 1);
    }

    fn flush_where(&self, f: impl Fn(&Pending) -> bool, status: u8) {
        let gone: Vec<Pending> = {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let ids: Vec<u64> = p.iter().filter(|(_, v)| f(v)).map(|(k, _)| *k).collect();
            ids.into_iter().filter_map(|k| p.remove(&k)).collect()
        };
        for p in gone.into_iter().filter(|p| p.chunk_parent.is_none()) {
            p.qp.send_cq.push(
                completion(&p.qp, p.wr_id, p.kind, status),
                Slot::Sq(p.qp.clone()),
            );
        }
    }

    fn handle_response(&self, h: &Header, data: &[u8], from: SocketAddrV4) {
        if h.epoch != self.epoch {
            return;
        }
        let now = Instant::now();
        let mut status = h.status;
        let mut pend = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let Some(p) = pend.get_mut(&h.req_id) else {
            return;
        };
        if p.dest != from {
            return;
        }
        p.last_heard = now;
        if status == STATUS_RNR {
            if p.rnr_left > 0 {
                if p.rnr_left != qp::RNR_RETRY_INFINITE {
                    p.rnr_left -= 1;
                }
                p.next_tx = now + RNR_DELAY;
                drop(pend);
                self.mark_heard(from);
                return;
            }
        } else if status == wire::STATUS_FALLBACK {
            if p.spec.header.flags & wire::FLAG_FAST == 0 || p.chunking.is_some() {
                return; // only a bulk request can fall back; ignore anything else
            }
            let mut to_send = Vec::new();
            self.start_chunking(&mut pend, h.req_id, &mut to_send);
            drop(pend);
            self.mark_heard(from);
            self.after_settle(None, to_send);
            return;
        } else if p.chunking.is_some() {
            return; // the parent of chunks gets no responses of its own
        } else if status == 0
            && p.kind == CompletionKind::RdmaRead
            && p.spec.header.flags & wire::FLAG_FAST == 0
        {
            // Small read: the data came with the response.
            if data.len() != p.spec.header.total_len as usize {
                return; // malformed; keep waiting (retransmission re-reads)
            }
            let mrs = self.mrs.read().unwrap_or_else(|e| e.into_inner());
            let target = p
                .spec
                .sges
                .first()
                .and_then(|g| Self::local_range(&mrs, &p.qp.pd, g, ACCESS_LOCAL_WRITE));
            match target {
                // SAFETY: the range is inside a live MR with LOCAL_WRITE (read lock held).
                Some(host) => unsafe { mem::write_registered(host, data) },
                None if data.is_empty() => {}
                None => status = 5,
            }
        }
        let mut to_send = Vec::new();
        let done = self.settle(&mut pend, h.req_id, status, &mut to_send);
        drop(pend);
        self.mark_heard(from);
        self.after_settle(done, to_send);
    }

    fn mark_heard(&self, from: SocketAddrV4) {
        let mut heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        if !heard.contains(&from) {
            heard.insert(from);
        }
    }

    /// Retransmissions, RNR retries and peer timeouts; updates the watermark.
    fn timers(&self) {
        let now = Instant::now();
        let mut resend: Vec<(Arc<Pd>, Spec, SocketAddrV4)> = Vec::new();
        let mut expired: Vec<(u64, SocketAddrV4)> = Vec::new();
        {
            let mut pend = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let mut low = self.next_req.load(Ordering::Relaxed);
            for (id, p) in pend.iter_mut() {
                low = low.min(*id);
                if now.duration_since(p.last_heard) > PEER_TIMEOUT {
                    if std::env::var_os("EFA_SIM_TRACE").is_some() {
                        eprintln!(
                            "efa-sim trace: expire req {id} lw {} next_tx_in {:?} hdr_wm {}",
                            self.low_water.load(Ordering::Relaxed),
                            p.next_tx.checked_duration_since(now),
                            p.spec.header.watermark
                        );
                    }
                    expired.push((*id, p.dest));
                } else if now >= p.next_tx {
                    p.next_tx = now + RTO;
                    resend.push((p.qp.pd.clone(), p.spec.clone(), p.dest));
                }
            }
            self.low_water.store(low, Ordering::Relaxed);
        }
        for (pd, spec, dest) in &resend {
            bump(&self.stats.retransmits);
            if !self.transmit(pd, spec, *dest) {
                self.finish(spec.header.req_id, 5);
            }
        }
        for (id, dest) in expired {
            let answered = self
                .heard
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&dest);
            self.finish(id, if answered { 13 } else { 15 });
        }
    }

    fn has_pending(&self) -> bool {
        !self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    // -----------------------------------------------------------------
    // Responder side
    // -----------------------------------------------------------------

    /// Whether the bulk request `h`, which arrived from `from`, really comes
    /// from process `h.pid` (so process_vm_* on `h.local_addr` touches only
    /// memory that process named itself): `from` must be exactly the address
    /// of the requester's GID and QPN slot, and that slot's owner record (see
    /// [`transport::read_owner`]) must name `h.pid`, list `from` as bound, be
    /// in our pid namespace and match the live process's start time. The
    /// process is then pinned by a pidfd, so a pid reused after its exit
    /// proves nothing.
    fn requester_proven(&self, h: &Header, from: SocketAddrV4) -> bool {
        let Some((ip, dev)) = gid_endpoint(&h.src_gid) else {
            return false;
        };
        if transport::addr_of(ip, dev, h.src_qpn as u32) != Some(from) {
            return false;
        }
        let now = Instant::now();
        let mut proofs = self.proofs.lock().unwrap_or_else(|e| e.into_inner());
        match proofs.get(&from) {
            Some(Proof::Proven { pid, pidfd }) if *pid == h.pid && !process_exited(pidfd) => {
                return true;
            }
            Some(Proof::Refused { pid, until }) if *pid == h.pid && now < *until => return false,
            _ => {}
        }
        if proofs.len() > 4096 {
            proofs.clear();
        }
        let proof = match Self::prove(h.pid, transport::slot_of_qpn(h.src_qpn as u32), from) {
            Some(pidfd) => Proof::Proven { pid: h.pid, pidfd },
            None => Proof::Refused {
                pid: h.pid,
                until: now + PROOF_RETRY,
            },
        };
        let ok = matches!(proof, Proof::Proven { .. });
        proofs.insert(from, proof);
        ok
    }

    /// Reads `slot`'s owner record and pins its process if it proves that
    /// `pid` owns `from`.
    fn prove(pid: u32, slot: u32, from: SocketAddrV4) -> Option<std::os::fd::OwnedFd> {
        use std::os::fd::FromRawFd;
        let owner = transport::read_owner(slot)?;
        if owner.slot != slot
            || owner.pid != pid
            || !owner.bound.contains(&from)
            || Some(owner.pidns) != transport::own_pid_namespace()
        {
            return None;
        }
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            return None; // no pidfds (old kernel, seccomp): stay on the datagram path
        }
        // SAFETY: `fd` was just returned by pidfd_open and is owned by nobody else.
        let pidfd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as libc::c_int) };
        // Read after pinning: if the start time matches, the pidfd is that process.
        (transport::process_start_time(pid) == Some(owner.start) && !process_exited(&pidfd))
            .then_some(pidfd)
    }

    /// Checks that `[addr, addr+len)` of this process lies in a live MR of
    /// some device of this process (with `need` access). Used before copying
    /// on behalf of a same-process requester named by a packet.
    fn own_range_registered(addr: u64, len: u64, need: AccessFlags) -> bool {
        let rts: Vec<Arc<Runtime>> = RUNTIMES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        rts.iter().any(|rt| {
            let mrs = rt.mrs.read().unwrap_or_else(|e| e.into_inner());
            mrs.values().any(|mr| {
                !mr.dead.load(Ordering::Acquire)
                    && mr.host != 0
                    && mr.access & need == need
                    && addr >= mr.host as u64
                    && addr
                        .checked_add(len)
                        .is_some_and(|end| end <= (mr.host + mr.len) as u64)
            })
        })
    }
}

/// Whether the process behind `pidfd` has exited (its pidfd is readable).
fn process_exited(pidfd: &std::os::fd::OwnedFd) -> bool {
    use std::os::fd::AsRawFd;
    let mut pfd = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call; zero timeout.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n != 0 // readable (exited) or poll failed: either way, not provably alive
}

/// What the responder does with a request.
enum Outcome {
    Respond(u8),
    Drop,
}

/// The engine thread's private state.
struct Engine {
    rt: Arc<Runtime>,
    peers: IdMap<(SocketAddrV4, u64), PeerDedup>,
    out: Vec<u8>,
    /// Responses of the current receive batch, bundled per destination.
    outs: Vec<wire::BundleBuf>,
}

impl Engine {
    fn new(rt: Arc<Runtime>) -> Engine {
        Engine {
            rt,
            peers: IdMap::default(),
            out: vec![0u8; wire::MAX_DATAGRAM],
            outs: Vec::new(),
        }
    }

    fn run(mut self) {
        let mut bufs: Vec<Vec<u8>> = (0..32)
            .map(|_| vec![0u8; wire::MAX_DATAGRAM + 64])
            .collect();
        let mut got = Vec::with_capacity(32);
        let mut last_timer = Instant::now();
        loop {
            let busy = self.rt.has_pending() || self.rt.ep.flush_delayed();
            self.rt
                .ep
                .wait_readable(Duration::from_millis(if busy { 1 } else { 20 }));
            loop {
                if self.rt.ep.recv_batch(&mut bufs, &mut got).is_err() || got.is_empty() {
                    break;
                }
                for i in 0..got.len() {
                    let (len, from) = got[i];
                    let pkt = &bufs[i][..len];
                    // A bug in a handler must not take the device down with it.
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        match wire::bundle_items(pkt) {
                            Some(items) => {
                                for item in items {
                                    self.handle(item, from);
                                }
                            }
                            None => self.handle(pkt, from),
                        }
                    }));
                    if r.is_err() {
                        bump(&self.rt.stats.malformed);
                    }
                }
                self.flush_outs();
                if Instant::now().duration_since(last_timer) >= Duration::from_millis(1) {
                    break;
                }
            }
            self.rt.ep.flush_delayed();
            if Instant::now().duration_since(last_timer) >= Duration::from_millis(1) {
                last_timer = Instant::now();
                self.rt.timers();
                self.forget_silent_peers();
            }
        }
    }

    fn handle(&mut self, pkt: &[u8], from: SocketAddrV4) {
        let Some((h, data)) = Header::decode(pkt) else {
            bump(&self.rt.stats.malformed);
            return;
        };
        if h.kind == wire::KIND_RESP {
            self.rt.handle_response(&h, data, from);
            return;
        }
        if h.flags & wire::FLAG_UD != 0 {
            self.rt.ud_receive(&h, data);
            return;
        }
        let dedup = h.op != Op::Read;
        if dedup {
            let peer = self.peers.entry((from, h.epoch)).or_default();
            peer.last_seen = Some(Instant::now());
            if h.watermark > peer.watermark {
                peer.watermark = h.watermark;
                if peer.done.len() > 1024 {
                    let wm = peer.watermark;
                    peer.done.retain(|k, _| *k >= wm);
                }
            }
            if h.req_id < peer.watermark {
                bump(&self.rt.stats.stale);
                return;
            }
            if let Some(st) = peer.done.get(&h.req_id).copied() {
                bump(&self.rt.stats.duplicates);
                self.respond(&h, st, 0, from);
                return;
            }
        }
        let mut resp_len = 0usize;
        match self
            .rt
            .execute(&h, data, Some(from), &mut self.out, &mut resp_len)
        {
            Outcome::Drop => {}
            Outcome::Respond(st) => {
                if st == STATUS_RNR {
                    bump(&self.rt.stats.rnr_naks);
                } else if dedup && st != wire::STATUS_FALLBACK {
                    self.peers
                        .entry((from, h.epoch))
                        .or_default()
                        .done
                        .insert(h.req_id, st);
                }
                self.respond(&h, st, resp_len, from);
            }
        }
    }

    /// Sends a response; `self.out[HEADER..HEADER+data_len]` holds read data.
    fn respond(&mut self, req: &Header, status: u8, data_len: usize, to: SocketAddrV4) {
        let mut h = Header::new(wire::KIND_RESP, req.op);
        h.status = status;
        h.epoch = req.epoch;
        h.req_id = req.req_id;
        h.src_gid = self.rt.gid;
        h.src_qpn = req.dst_qpn;
        h.dst_qpn = req.src_qpn;
        let data_len = if status == 0 { data_len } else { 0 };
        h.data_len = data_len as u32;
        h.encode(&mut self.out);
        let pkt = &self.out[..wire::HEADER + data_len];
        let slot = match self.outs.iter().position(|b| b.to == Some(to)) {
            Some(i) if self.outs[i].fits(pkt.len()) => i,
            Some(i) => {
                self.rt.ep.send(self.outs[i].datagram(), to);
                self.outs[i].clear();
                i
            }
            None => match self.outs.iter().position(|b| b.to.is_none()) {
                Some(i) => i,
                None => {
                    self.outs.push(wire::BundleBuf::default());
                    self.outs.len() - 1
                }
            },
        };
        self.outs[slot].push(to, pkt);
    }

    /// Drops the dedup state of requester incarnations silent for [`PEER_FORGET`].
    fn forget_silent_peers(&mut self) {
        if self.peers.len() > 64 {
            let now = Instant::now();
            self.peers.retain(|_, p| {
                p.last_seen
                    .is_some_and(|t| now.duration_since(t) < PEER_FORGET)
            });
        }
    }

    /// Sends the bundled responses of this receive batch.
    fn flush_outs(&mut self) {
        for b in &mut self.outs {
            if let Some(to) = b.to {
                self.rt.ep.send(b.datagram(), to);
                b.clear();
            }
        }
    }
}

impl Runtime {
    fn receiver_info(qp: &Qp, h: &Header) -> (u16, Option<Gid>) {
        let slid = qp.pd.ah_number_of(&h.src_gid);
        let sgid = (slid == 0xffff && qp.recv_cq.opts.with_sgid).then_some(h.src_gid);
        (slid, sgid)
    }

    /// Executes one SRD request against this device's QPs and MRs (engine
    /// thread, or a same-process requester's direct path). `out[HEADER..]`
    /// receives the data of a small RDMA read.
    ///
    /// `from` is the datagram's source; `None` for the same-process direct
    /// path, whose header this process built itself.
    fn execute(
        self: &Arc<Self>,
        h: &Header,
        data: &[u8],
        from: Option<SocketAddrV4>,
        out: &mut [u8],
        resp_len: &mut usize,
    ) -> Outcome {
        let rt = self.clone();
        let Some(qp) = rt.qp_by_qpn(h.dst_qpn as u32) else {
            return Outcome::Respond(9);
        };
        if qp.qp_type != QpType::Srd
            || !matches!(
                qp.state(),
                QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
            )
        {
            return Outcome::Respond(9);
        }
        if h.qkey != qp.qkey.load(Ordering::Acquire) {
            bump(&rt.stats.qkey_violations);
            return Outcome::Drop;
        }
        let imm = (h.flags & wire::FLAG_IMM != 0).then_some(h.imm);
        match h.op {
            Op::Send => {
                if data.len() != h.total_len as usize || h.flags & wire::FLAG_FAST != 0 {
                    bump(&rt.stats.malformed);
                    return Outcome::Drop;
                }
                self.deliver_send(&qp, h, data, imm, 0)
            }
            Op::Write | Op::Read => {
                if qp.pd.ah_number_of(&h.src_gid) == 0xffff {
                    return Outcome::Respond(14);
                }
                let len = h.total_len as usize;
                let (need, write) = if h.op == Op::Write {
                    (ACCESS_REMOTE_WRITE, true)
                } else {
                    (ACCESS_REMOTE_READ, false)
                };
                let fast = h.flags & wire::FLAG_FAST != 0;
                let commit = h.flags & wire::FLAG_COMMIT != 0;
                let inline_bad = if commit {
                    !data.is_empty() || !write || imm.is_none() || fast
                } else if write {
                    data.len() != len
                } else {
                    len > wire::MAX_DATA
                };
                if (!fast && inline_bad) || (!write && imm.is_some()) {
                    bump(&rt.stats.malformed);
                    return Outcome::Drop;
                }
                // Solicited write-with-imm needs a posted receive (checked before any byte moves).
                let unsolicited = qp.efa_flags & qp::QP_FLAG_UNSOLICITED_WRITE_RECV != 0;
                if imm.is_some()
                    && !unsolicited
                    && qp.rq.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
                {
                    return Outcome::Respond(STATUS_RNR);
                }
                // A same-process requester's buffer must be registered memory of
                // this process (checked before taking our MR lock: the check reads
                // every local MR table, ours included).
                if fast && !commit && h.pid == rt.pid && !rt.no_process_vm {
                    let local_need = if write { 0 } else { ACCESS_LOCAL_WRITE };
                    if !Runtime::own_range_registered(h.local_addr, len as u64, local_need) {
                        bump(&rt.stats.malformed);
                        return Outcome::Drop;
                    }
                }
                // process_vm_* only for the process that really sent this
                // request (file I/O on first contact: before taking our MR lock).
                let proven = !fast
                    || commit
                    || rt.no_process_vm
                    || from.map_or(true, |f| rt.requester_proven(h, f));
                let mrs = rt.mrs.read().unwrap_or_else(|e| e.into_inner());
                let target = mrs
                    .get(&h.rkey)
                    .filter(|mr| Arc::ptr_eq(&mr.pd, &qp.pd))
                    .and_then(|mr| mr.host_range(h.remote_addr, len as u64, need));
                let Some(host) = target else {
                    return Outcome::Respond(7);
                };
                if commit {
                    // Chunked data already landed; only the immediate is left.
                } else if fast {
                    if rt.no_process_vm {
                        return Outcome::Respond(wire::STATUS_FALLBACK);
                    }
                    if !proven {
                        bump(&rt.stats.unproven);
                        return Outcome::Respond(wire::STATUS_FALLBACK);
                    }
                    let r = if write {
                        // SAFETY: host..host+len is inside our live MR (read lock held).
                        unsafe { mem::pull_from_process(h.pid, h.local_addr, host, len) }
                    } else {
                        // SAFETY: as above.
                        unsafe { mem::push_to_process(h.pid, h.local_addr, host, len) }
                    };
                    if r.is_err() {
                        return Outcome::Respond(wire::STATUS_FALLBACK);
                    }
                    bump(&rt.stats.process_vm);
                } else if write {
                    // SAFETY: host..host+len is inside our live MR with REMOTE_WRITE (read lock held).
                    unsafe { mem::write_registered(host, data) };
                } else {
                    // SAFETY: host..host+len is inside our live MR with REMOTE_READ (read lock held).
                    unsafe {
                        mem::read_registered(host, &mut out[wire::HEADER..wire::HEADER + len])
                    };
                    *resp_len = len;
                }
                drop(mrs);
                if let Some(imm) = imm {
                    let (slid, sgid) = Self::receiver_info(&qp, h);
                    let mut c = completion(&qp, 0, CompletionKind::RecvRdmaWithImm, 0);
                    c.byte_len = h.total_len;
                    c.imm_be = Some(imm);
                    c.src_qp = h.src_qpn as u32;
                    c.slid = slid;
                    c.sgid = sgid;
                    if unsolicited {
                        c.unsolicited = true;
                        qp.recv_cq.push(c, Slot::None);
                    } else {
                        let wr = qp.rq.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                        match wr {
                            Some(wr) => {
                                c.wr_id = wr.wr_id;
                                qp.recv_cq.push(c, Slot::Rq(qp.clone()));
                            }
                            // Raced with a QP reset: the data landed, nobody to tell.
                            None => return Outcome::Respond(STATUS_RNR),
                        }
                    }
                }
                Outcome::Respond(0)
            }
        }
    }

    /// SEND into the head receive WR: scatter, complete, answer.
    fn deliver_send(
        &self,
        qp: &Arc<Qp>,
        h: &Header,
        data: &[u8],
        imm: Option<u32>,
        skip: usize,
    ) -> Outcome {
        let rt = self;
        let mut rq = qp.rq.lock().unwrap_or_else(|e| e.into_inner());
        let Some(wr) = rq.front() else {
            return Outcome::Respond(STATUS_RNR);
        };
        let room: u64 = wr.sges.iter().map(|s| s.length as u64).sum();
        if room < (skip + data.len()) as u64 {
            return Outcome::Respond(11);
        }
        let Some(wr) = rq.pop_front() else {
            return Outcome::Respond(STATUS_RNR);
        };
        drop(rq);
        let (slid, sgid) = Self::receiver_info(qp, h);
        let mut c = completion(qp, wr.wr_id, CompletionKind::Recv, 0);
        c.src_qp = h.src_qpn as u32;
        c.slid = slid;
        c.sgid = sgid;
        c.imm_be = imm;
        c.byte_len = (skip + data.len()) as u32;
        let mut ok = true;
        {
            let mrs = rt.mrs.read().unwrap_or_else(|e| e.into_inner());
            // Bytes [0, skip) are the UD GRH area: left untouched.
            let mut pos = 0usize; // position in the virtual stream skip + data
            let end = skip + data.len();
            for s in &wr.sges {
                if pos >= end {
                    break;
                }
                let take = (s.length as usize).min(end - pos);
                let seg = Sge {
                    addr: s.addr,
                    length: take as u32,
                    lkey: s.lkey,
                };
                let Some(host) = Runtime::local_range(&mrs, &qp.pd, &seg, ACCESS_LOCAL_WRITE)
                else {
                    ok = false;
                    break;
                };
                // Part of this segment that holds payload bytes.
                let from = pos.max(skip);
                let to = pos + take;
                if to > from {
                    let src = &data[from - skip..to - skip];
                    // SAFETY: host..host+take is in a live MR with LOCAL_WRITE (read lock held).
                    unsafe { mem::write_registered(host + (from - pos), src) };
                }
                pos += take;
            }
        }
        if !ok {
            c.status = 5;
            c.byte_len = 0;
        }
        qp.recv_cq.push(c, Slot::Rq(qp.clone()));
        Outcome::Respond(if ok { 0 } else { 7 })
    }

    fn ud_receive(self: &Arc<Self>, h: &Header, data: &[u8]) {
        let rt = self.clone();
        let qp = match rt.qp_by_qpn(h.dst_qpn as u32) {
            Some(qp)
                if qp.qp_type == QpType::Ud
                    && h.op == Op::Send
                    && data.len() == h.total_len as usize
                    && matches!(
                        qp.state(),
                        QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
                    ) =>
            {
                qp
            }
            _ => {
                bump(&rt.stats.ud_drops);
                return;
            }
        };
        if h.qkey != qp.qkey.load(Ordering::Acquire) {
            bump(&rt.stats.qkey_violations);
            return;
        }
        let imm = (h.flags & wire::FLAG_IMM != 0).then_some(h.imm);
        if !matches!(
            self.deliver_send(&qp, h, data, imm, 40),
            Outcome::Respond(0)
        ) {
            bump(&rt.stats.ud_drops);
        }
    }
}
