//! Counters of one device in one process ([`Stats`], read with
//! [`crate::model::Device::stats`]).

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// Counters of one device in one process.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct Stats {
            $($(#[doc = $doc])* pub $name: u64,)*
        }

        /// The live counters behind [`Stats`].
        #[derive(Default)]
        pub(crate) struct StatsInner {
            $(pub(crate) $name: AtomicU64,)*
        }

        impl StatsInner {
            /// A consistent-enough copy (each counter read once, relaxed).
            pub(crate) fn snapshot(&self) -> Stats {
                Stats { $($name: self.$name.load(Ordering::Relaxed),)* }
            }
        }
    };
}

counters! {
    /// Requests dropped because their Q_Key did not match the QP's.
    qkey_violations,
    /// Datagrams that were not well-formed efa-sim packets.
    malformed,
    /// Duplicate requests answered from the cache without re-executing.
    duplicates,
    /// Requests sent again after the retransmission timeout (10 ms).
    retransmits,
    /// RNR responses sent.
    rnr_naks,
    /// UD datagrams dropped (no receive posted, buffer too small, bad QP).
    ud_drops,
    /// Requests dropped as older than the requester's low watermark (late duplicates).
    stale,
    /// Bulk RDMA WRs moved in chunks because the responder could not use process_vm_*.
    chunked,
    /// WRs executed on a same-process device without datagrams.
    direct,
    /// Bulk RDMA copies with process_vm_readv this responder made (writes) or let its
    /// requester make (reads, answered with a pull).
    process_vm,
    /// Pull answers to bulk reads no longer pending here (completed already, or their
    /// QP reset, destroyed or moved to ERR): dropped, nothing copied.
    late_pulls,
    /// Bulk requests naming process memory whose sender was not proven to be
    /// that process (see the trust model): answered with the chunk fallback.
    unproven,
    /// Send-queue doorbells that brought the device new WQEs.
    sq_doorbells,
    /// Of those, doorbells the watcher noticed (written by a consumer driving the rings
    /// itself rather than through efa-sim's provider).
    watched_doorbells,
    /// Send-queue doorbells that brought new WQEs and were consumed on the storing
    /// thread: a consumer's store trapped (the doorbell as MMIO: `crate::ring::mmio`).
    trapped_doorbells,
    /// Send-queue doorbells that brought new WQEs and were consumed on the storing
    /// thread because the consumer called `efa_sim_direct_sq_doorbell` after its store
    /// (no signal: `crate::abi::direct_hooks`).
    called_doorbells,
    /// CQ arm requests that repeated the `cmd_sn` of an arm an event had answered
    /// (ignored: one event per arm).
    repeated_arms,
    /// Trapped doorbell stores that could not be decoded: their page was opened, and
    /// the watcher sees that queue's doorbells from then on.
    opened_traps,
    /// Doorbell values claiming more new WQEs than the ring holds (ignored).
    bad_doorbells,
    /// Times the device found a WQE whose phase bit was not the current lap's (not yet
    /// written, or left from an earlier lap) and stopped there.
    stale_wqes,
    /// Malformed WQEs and receive descriptors, completed with an error status.
    bad_wqes,
    /// Strict mode: WQEs beyond `max_batch` in one doorbell the device saw as such,
    /// completed with status 2 (`crate::model::ring_rules`).
    batch_overruns,
    /// Strict mode: WQEs of a send-queue doorbell written by a store wider than its
    /// 32-bit register, completed with status 2 (`crate::model::ring_rules`).
    wide_doorbells,
    /// Completions lost to CQ overflow: they found their CQ ring full (by the consumer
    /// index of its doorbell), or their CQ had overflowed before.
    cq_overflows,
    /// Datagrams appended to a peer's shared-memory inbox (the rest went over UDP).
    shm_sent,
    /// Datagrams taken from this endpoint's inbox.
    shm_received,
    /// Garbage found in this endpoint's inbox (a frame or position no sender writes),
    /// skipped with everything after it that was published at the time.
    shm_garbage,
    /// Datagrams dropped because a peer's inbox was full, its lock stuck, or (with
    /// `EFA_SIM_TRANSPORT=shm`) a peer of this address had no usable inbox.
    shm_drops,
    /// Wake datagrams sent to a peer whose engine slept.
    wakeups,
    /// Times a poller drove this device's inbox (no thread hop).
    polled_progress,
}

/// Adds one to a counter.
#[inline]
pub(crate) fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

/// Adds one to a counter that only the holder of one lock ever changes (the inbound
/// path's: `shm_received`, `polled_progress`): a plain load and store, exact because the
/// lock orders its writers. A locked read-modify-write is a full barrier on x86, paid per
/// datagram on the critical path of every round trip.
#[inline]
pub(crate) fn bump_locked(a: &AtomicU64) {
    a.store(a.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
}
