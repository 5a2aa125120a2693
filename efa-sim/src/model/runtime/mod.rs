//! The per-process runtime of one device: its UDP endpoint, object tables, the
//! requester's outstanding WRs (retransmission, timeouts), the engine thread that
//! executes incoming requests against local QPs and MRs (so one-sided RDMA progresses
//! without the target polling), and the doorbell watcher.
//!
//! * `requester`: a WQE the device took from a send queue becomes a request;
//!   `answers`: the responder's responses and acknowledgements;
//!   `responses`: the requester's side of answers, retransmission, RNR retries, timeouts; `chunks`: bulk RDMA
//!   moved in datagram chunks.
//! * `responder`: executes a request against this device's QPs and MRs and writes the
//!   receive completions.
//! * `direct`: the same-process path (the posting thread executes on the target).
//! * `trust`: when a responder may copy another process's memory.
//! * `engine`: the thread that receives datagrams and runs the timers.
//! * [`stats`], `tables`.
//!
//! # Protocol (SRD)
//!
//! Every send WQE becomes one request datagram with a per-endpoint `req_id`.
//! The responder executes it once (duplicates are suppressed by
//! `(requester address, epoch, req_id)`; small reads, whose answer carries the data,
//! are idempotent and simply re-executed) and answers with a response carrying the EFA
//! status (and the data of a small RDMA read); a success with nothing to return is
//! acknowledged instead, many requests per packet (see `answers`). The requester
//! completes the WQE only on that answer (SRD: success only after the responder
//! acked). No answer within
//! [`RTO`] → retransmit. An RNR response is retried after [`RNR_DELAY`],
//! `rnr_retry` times (7 = forever), then completes with status 10.
//! Nothing heard for the profile's `peer_timeout_ms` (default [`PEER_TIMEOUT`]) → status 13 if that peer address ever
//! answered this device, else 15. This bounds every WR towards a dead peer
//! (killed process, destroyed QP's process, qkey mismatch) to ≈ 1 s.
//!
//! Bulk RDMA (> [`INLINE_RDMA`] bytes) between processes uses a fast path:
//! the request names the requester's pid and buffer address (which the
//! requester validated through its lkey) and the responder, after validating
//! its own rkey/range, copies a write's data with `process_vm_readv`; a read it
//! answers with `STATUS_PULL` and its source address, and the requester copies
//! the data with `process_vm_readv` itself while the read is still pending
//! (`pull`: no process writes another's memory, so nothing lands after a
//! reset or destroy). If that fails (other host, EPERM, ESRCH; or
//! `EFA_SIM_NO_PROCESS_VM=1`) the responder answers `STATUS_FALLBACK` (after validating
//! the rkey and range) and the requester moves the WR as ordinary
//! data-in-datagram requests of [`INLINE_RDMA`] bytes (8 in flight), each
//! acknowledged; a write-with-imm ends with a data-less *commit* request that
//! delivers the immediate once every chunk landed.
//!
//! # Choices where the hardware is unspecified (model §7)
//!
//! * Receive buffer too small for a SEND: sender status 11; the receiver gets
//!   no completion and its receive WQE stays posted (at the head of the RQ).
//! * Receive SGE with a bad lkey / no LOCAL_WRITE at the responder: the
//!   receive completes with status 5 (WQE consumed), the sender with status 7.
//! * Q_Key mismatch: the datagram is dropped and counted
//!   ([`Stats::qkey_violations`]); the sender therefore times out: status 13
//!   (or 15 if the peer never answered) after ≈ 1 s.
//! * RDMA longer than `max_rdma_size`: status 6 at the requester, nothing sent.
//! * Unknown peer (responder PD has no AH for the requester's GID): status 14
//!   for RDMA read, write and write-with-imm.
//! * Unsolicited write-with-imm: decided by the *responder* QP's
//!   `EFADV_QP_FLAGS_UNSOLICITED_WRITE_RECV` flag alone.
//! * UD: unreliable, no response, sender completes OK once sent; the receiver
//!   drops the datagram (counted in [`Stats::ud_drops`]) when no receive is
//!   posted or the buffer is too small; the first 40 bytes of the receive
//!   buffer are left as they were (GRH area, content undefined).
//! * The queue-format choices (malformed WQEs, stale phase bits, full CQs) are listed
//!   in [`crate::model::send_queue`], [`crate::model::recv_queue`] and
//!   [`crate::model::cq`].

pub(crate) mod answered;
pub(crate) mod answers;
pub(crate) mod chunks;
pub(crate) mod direct;
pub(crate) mod doorbell;
pub(crate) mod engine;
pub(crate) mod inbound;
pub(crate) mod pending;
pub(crate) mod pull;
pub(crate) mod request;
pub(crate) mod requester;
pub(crate) mod responder;
pub(crate) mod responses;
pub(crate) mod route;
pub mod stats;
pub(crate) mod strict;
pub(crate) mod tables;
pub(crate) mod trust;
pub(crate) mod window;

use crate::config::Config;
use crate::model::{Device, Errno, Gid, Mr, Profile, Qp, MAX_QPS_PER_PROCESS};
use crate::rcu::Guard;
use crate::transport::{self, Endpoint};
use pending::PendingTable;
use request::Pending;
pub use stats::Stats;
use stats::StatsInner;
use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tables::{AhTable, MrTable, QpTable};

/// Retransmission timeout.
pub const RTO: Duration = Duration::from_millis(10);
/// Wait before retrying after an RNR response.
pub const RNR_DELAY: Duration = Duration::from_millis(1);
/// A WR whose peer stays silent this long completes with status 13/15.
pub const PEER_TIMEOUT: Duration = Duration::from_millis(1000);
/// RDMA up to this many bytes carries its data in the datagram.
pub const INLINE_RDMA: usize = 16 * 1024;
/// Slots of the ring of outstanding requests ([`pending`]): more requests than this in
/// flight at once, or one much older than the rest, go to its overflow map.
const PENDING_RING: usize = 1024;

/// Multiply-shift hasher for the integer keys of the datagram path's tables (ids and
/// addresses are not attacker-chosen in a way that matters: a flood of colliding
/// keys only slows this device down).
#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Eight bytes per step (an IPv4 address is one): a byte-wise loop cost a multiply
        // per byte of every address key.
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
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

/// Every runtime started in this process. Runtimes are never dropped (the engine thread
/// holds one for ever), so references into this list stay valid for the process.
static RUNTIMES: Mutex<Vec<Arc<Runtime>>> = Mutex::new(Vec::new());
/// Bumped whenever a runtime starts (invalidates cached "not in this process" answers).
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The device side of one device in this process.
pub(crate) struct Runtime {
    pub gid: Gid,
    pub profile: Profile,
    pub config: Arc<Config>,
    /// `config.direct_path()`, decided once (the configuration does not change).
    direct: bool,
    pid: u32,
    epoch: u64,
    index: u32,
    pub ep: Endpoint,
    /// Strict mode's permutation stream and held WQEs (`None` unless the profile is
    /// strict).
    pub(crate) strict: Option<strict::Strict>,
    pub pd_count: AtomicU32,
    pub next_pd: AtomicU32,
    pub cq_count: AtomicU32,
    pub next_qp_index: AtomicU32,
    mrs: MrTable,
    /// QPs by the low [`transport::QP_INDEX_BITS`] bits of their QPN.
    pub qps: QpTable,
    /// Generation of each QP table slot (bumped per QP created there).
    qp_gens: Box<[AtomicU16]>,
    ahs: AhTable,
    pending: Mutex<PendingTable<Pending>>,
    /// Held by the requester's copy of a pulled bulk read (see [`pull`]), which takes it
    /// before it lets go of `pending`: a reset, destroy or ERR takes it after removing
    /// the QP's requests, so it returns only once no copy into their buffers runs.
    pulls: Mutex<()>,
    low_water: AtomicU64,
    heard: Mutex<HashSet<SocketAddrV4>>,
    /// Addresses known to be in `heard`, direct-mapped by port (a hit needs no lock).
    heard_cache: Box<[AtomicU64]>,
    proofs: Mutex<IdMap<SocketAddrV4, trust::Proof>>,
    pub stats: Arc<StatsInner>,
    /// The driver's `hw_counters` of this device (see [`crate::sysfs::counters`]).
    pub(crate) hw: Arc<crate::sysfs::counters::PortCounters>,
    pub(crate) watcher: crate::model::watcher::Watcher,
    /// The inbound path (engine thread or a poller, see [`inbound`]).
    inbound: Mutex<inbound::Inbound>,
    /// Bumped by pollers that look for work (the engine then sleeps without wake-ups).
    pub(crate) poll_ticks: AtomicU64,
    /// A CQ was armed since the engine last looked (its consumer blocks instead).
    pub(crate) pollers_parked: AtomicBool,
    /// The engine naps without its inbox's sleeping flag.
    pub(crate) engine_napping: AtomicBool,
    /// The inbox consumer position as last published (a lock-free "anything new?" hint).
    pub(crate) inbox_hint: AtomicU64,
    /// Acknowledgements wait in the inbound path for a poller's next call or a request
    /// to carry them (see [`answers`]).
    pub(crate) acks_waiting: AtomicBool,
    /// Acknowledgements of lazy requesters wait (for more of them, or the engine).
    pub(crate) lazy_acks: AtomicBool,
    /// Polls that found nothing new while lazy acknowledgements waited.
    pub(crate) lazy_polls: AtomicU32,
}

impl Runtime {
    /// Binds the device's endpoint and starts its engine thread.
    pub(crate) fn start(dev: &Arc<Device>) -> Result<Arc<Runtime>, String> {
        let config = dev.config().clone();
        let stats = Arc::new(StatsInner::default());
        // Strict mode breaks every order SRD does not promise, in every run; the `reorder`
        // fault knob alone permutes that fraction of the doorbells at random.
        let reorder = config.faults.reorder;
        let strict = if dev.profile.strict {
            Some(strict::Strict::adversarial(config.faults.seed, dev.index))
        } else {
            (reorder > 0.0).then(|| strict::Strict::random(config.faults.seed, dev.index, reorder))
        };
        let ep = if dev.profile.strict {
            // Strict mode delays datagrams (see [`strict`]); the direct path stays on.
            let mut faulty = (*config).clone();
            if faulty.faults.reorder == 0.0 {
                faulty.faults.reorder = strict::DATAGRAM_REORDER;
            }
            Endpoint::bind(dev.addr, dev.index, &faulty, stats.clone())?
        } else {
            Endpoint::bind(dev.addr, dev.index, &config, stats.clone())?
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let pid = std::process::id();
        let rt = Arc::new(Runtime {
            gid: dev.gid,
            profile: dev.profile.clone(),
            direct: config.direct_path(),
            config,
            pid,
            epoch: now ^ ((pid as u64) << 32) ^ dev.index as u64,
            index: dev.index,
            ep,
            strict,
            pd_count: AtomicU32::new(0),
            next_pd: AtomicU32::new(1),
            cq_count: AtomicU32::new(0),
            next_qp_index: AtomicU32::new(0),
            mrs: MrTable::default(),
            qps: QpTable::new(MAX_QPS_PER_PROCESS as usize + 1),
            qp_gens: (0..=MAX_QPS_PER_PROCESS)
                .map(|_| AtomicU16::new(0))
                .collect(),
            ahs: AhTable::default(),
            pending: Mutex::new(PendingTable::with_capacity(PENDING_RING)),
            pulls: Mutex::new(()),
            low_water: AtomicU64::new(1),
            heard: Mutex::new(HashSet::new()),
            heard_cache: (0..HEARD_CACHE).map(|_| AtomicU64::new(0)).collect(),
            proofs: Mutex::new(IdMap::default()),
            stats,
            hw: crate::sysfs::counters::PortCounters::open(
                std::path::Path::new(std::ffi::OsStr::from_bytes(crate::sysfs::root().to_bytes())),
                &dev.name,
            ),
            watcher: Default::default(),
            inbound: Mutex::new(inbound::Inbound::default()),
            poll_ticks: AtomicU64::new(0),
            pollers_parked: AtomicBool::new(false),
            engine_napping: AtomicBool::new(false),
            inbox_hint: AtomicU64::new(0),
            acks_waiting: AtomicBool::new(false),
            lazy_acks: AtomicBool::new(false),
            lazy_polls: AtomicU32::new(0),
        });
        static AT_EXIT: std::sync::Once = std::sync::Once::new();
        // SAFETY: registers a plain extern "C" function with no preconditions.
        AT_EXIT.call_once(|| unsafe {
            libc::atexit(answers::flush_at_exit);
        });
        RUNTIMES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(rt.clone());
        GENERATION.fetch_add(1, Ordering::AcqRel);
        let engine_rt = rt.clone();
        std::thread::Builder::new()
            .name(format!("efa-sim-{}", dev.name))
            .spawn(move || engine::Engine::new(engine_rt).run())
            .map_err(|e| format!("cannot spawn engine thread: {e}"))?;
        Ok(rt)
    }

    /// Changes whenever a runtime starts in this process.
    pub(crate) fn generation() -> u64 {
        GENERATION.load(Ordering::Acquire)
    }

    /// The same-process runtime of device `dev` at `ip`, if there is one and it takes
    /// direct requests.
    pub(crate) fn find_local(ip: Ipv4Addr, dev: u32) -> Option<&'static Runtime> {
        let rts = RUNTIMES.lock().unwrap_or_else(|e| e.into_inner());
        let rt = rts
            .iter()
            .find(|rt| rt.index == dev && *rt.ep.local.ip() == ip && rt.config.direct_path())?;
        // SAFETY: runtimes in RUNTIMES are never removed or dropped (see RUNTIMES), so the
        // allocation outlives every caller.
        Some(unsafe { &*Arc::as_ptr(rt) })
    }

    /// Every runtime of this process.
    fn all() -> Vec<Arc<Runtime>> {
        RUNTIMES.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The MR table (look keys up inside a read section).
    #[inline]
    pub(crate) fn mrs(&self) -> &MrTable {
        &self.mrs
    }

    /// Registers the MR `make` builds for a fresh key.
    pub(crate) fn insert_mr(&self, make: impl FnOnce(u32) -> Arc<Mr>) -> Result<Arc<Mr>, Errno> {
        self.mrs.insert(self.profile.max_mr as usize, make)
    }

    /// Deregisters the MR with `key`; returns once no device access can reach it.
    pub(crate) fn remove_mr(&self, key: u32) {
        self.mrs.remove(key);
    }

    /// The AH table (look numbers up inside a read section).
    #[inline]
    pub(crate) fn ahs(&self) -> &AhTable {
        &self.ahs
    }

    /// A new device AH of the PD at `pd` to `gid`.
    pub(crate) fn alloc_ah(&self, pd: usize, gid: &Gid) -> Result<u16, Errno> {
        self.ahs.insert(self.profile.max_ah, pd, gid)
    }

    /// Destroys device AH `n`; send WRs still outstanding to it complete with FLUSHED.
    pub(crate) fn free_ah(&self, n: u16) {
        self.ahs.remove(n);
        self.flush_ah(n);
    }

    /// Claims the next generation of QP table slot `idx`.
    pub(crate) fn next_qp_gen(&self, idx: usize) -> u16 {
        self.qp_gens[idx]
            .fetch_add(1, Ordering::AcqRel)
            .wrapping_add(1)
    }

    /// The QP table slot of `qpn`, if `qpn` belongs to this process's slot.
    #[inline]
    pub(crate) fn qp_index(&self, qpn: u32) -> Option<usize> {
        if transport::slot_of_qpn(qpn) != self.ep.slot() {
            return None;
        }
        Some((qpn & ((1 << transport::QP_INDEX_BITS) - 1)) as usize)
    }

    /// The live QP `qpn`, valid while `g` is open.
    #[inline(always)]
    pub(crate) fn qp<'g>(&'g self, qpn: u32, g: &'g Guard) -> Option<&'g Qp> {
        let idx = self.qp_index(qpn)?;
        self.qps
            .get(idx, g)
            .filter(|q| q.qpn() == qpn && !q.is_dead())
    }

    /// The device's counters, with the shares its send queues keep themselves.
    pub(crate) fn stats(&self) -> Stats {
        let mut s = self.stats.snapshot();
        let g = Guard::enter();
        self.qps.for_each(&g, |_, qp| {
            let (doorbells, direct) = qp.sq_dev().counts();
            s.sq_doorbells += doorbells;
            s.direct += direct;
        });
        s
    }

    /// Remembers that `from` answered this device (a later silence is status 13, not 15).
    #[inline(always)]
    pub(crate) fn mark_heard(&self, from: SocketAddrV4) {
        let packed = u64::from(u32::from(*from.ip())) << 16 | u64::from(from.port()) | 1 << 63;
        let cached = &self.heard_cache[usize::from(from.port()) % HEARD_CACHE];
        if cached.load(Ordering::Relaxed) != packed {
            self.mark_heard_slow(from, cached, packed);
        }
    }

    #[cold]
    fn mark_heard_slow(&self, from: SocketAddrV4, cached: &AtomicU64, packed: u64) {
        self.heard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(from);
        cached.store(packed, Ordering::Relaxed);
    }

    /// Whether `addr` ever answered this device.
    pub(crate) fn was_heard(&self, addr: &SocketAddrV4) -> bool {
        self.heard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(addr)
    }
}

/// Entries of [`Runtime::heard_cache`].
const HEARD_CACHE: usize = 64;
