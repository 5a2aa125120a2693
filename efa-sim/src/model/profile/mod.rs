//! Device profiles: the limits and capabilities of a software EFA device (model §2), their
//! defaults and the `EFA_SIM_PROFILE` override syntax.
//!
//! `EFA_SIM_PROFILE` is an inline list if it contains `=`, otherwise the path of a file
//! holding the list. List syntax: `key=value` items separated by `,`, `;` or newlines; `#`
//! starts a comment; an item `efa_N.key=value` applies to device N only (after the global
//! items). Numbers are decimal or `0x` hex; switches exactly `0`/`1`/`off`/`on`/`false`/`true`.
//! [`validate`] rejects limits that would make a device unusable or contradict its caps.
//! Example: `max_rdma_size=65536,caps=-rdma_write,max_sq_wr=16,efa_1.mtu_bytes=4096`.
//! Keys: one per [`Profile`] field ([`PROFILE_KEYS`]); `caps` (alias `device_caps`) is a
//! number, a `name|name` set, or `+name`/`-name` edits of the default (names `rdma_read`,
//! `rnr_retry`, `cq_with_sgid`, `rdma_write`, `unsolicited_write_recv`); `read_opcode`
//! (`send`/`rdma_read`) sets `read_completes_as_send`. The bare item `strict` (also the
//! whole value `EFA_SIM_PROFILE=strict`) means `strict=1` and combines with other items:
//! `strict,max_sq_wr=16`.

mod overrides;

use efa_sys::io::{TX_DESC_INLINE_MAX_SIZE_128, TX_DESC_NUM_BUFS};
pub use overrides::{apply, parse_read_opcode, Overrides};

/// Largest `mtu_bytes` (a SEND travels in one datagram).
pub const MAX_MTU_BYTES: u32 = 60 * 1024;
/// QPs one process can hold per device (QPN = process slot << 9 | index, index 1..=511).
pub const MAX_QPS_PER_PROCESS: u32 = 511;
/// Largest queue in entries: the 16-bit producer and consumer indices of the rings must
/// tell a full ring from an empty one (and keep the phase parity across their wrap).
pub const MAX_RING_ENTRIES: u32 = 1 << 15;
/// Most MRs: an MR key is a 16-bit table slot plus an 8-bit generation (keys are 24 bits).
pub const MAX_MRS: u32 = 1 << 16;
/// Most receive SGEs: descriptors one receive WQE may span.
pub const MAX_RQ_SGE: u16 = 16;

/// Every limit and capability of one software device (model §2). Built from the
/// defaults, then `EFA_SIM_PROFILE` / config file overrides.
#[derive(Clone, Debug)]
pub struct Profile {
    /// PCI vendor id (0x1d0f, Amazon).
    pub vendor_id: u32,
    /// PCI device id (0xefa0..0xefa4).
    pub vendor_part_id: u32,
    /// Hardware version (PCI subsystem id).
    pub hw_ver: u32,
    /// Firmware version string; must start with "efa-sim" (efa-sim-select relies on it).
    pub fw_ver: String,
    /// Node GUID (0 like older drivers).
    pub node_guid: u64,
    /// `EFADV_DEVICE_ATTR_CAPS_*` bits.
    pub device_caps: u32,
    /// Whether CQs can have a completion channel.
    pub cq_notifications: bool,
    /// Largest SQ depth (WQEs).
    pub max_sq_wr: u32,
    /// Largest RQ depth in buffer descriptors.
    pub max_rq_wr: u32,
    /// Most SGEs per send WR.
    pub max_sq_sge: u16,
    /// Most SGEs per receive WR.
    pub max_rq_sge: u16,
    /// Most SGEs per RDMA WR.
    pub max_sge_rd: u32,
    /// Inline bytes of a 64-byte WQE.
    pub inline_buf_size: u16,
    /// Inline bytes with wide (128-byte) WQEs.
    pub inline_buf_size_ex: u16,
    /// Largest RDMA read/write in bytes.
    pub max_rdma_size: u32,
    /// Port MTU in bytes (`max_msg_sz`): the largest SEND.
    pub mtu_bytes: u32,
    /// Most QPs (also capped at 511 per process).
    pub max_qp: u32,
    /// Most CQs.
    pub max_cq: u32,
    /// Largest CQ depth.
    pub max_cqe: u32,
    /// Most MRs.
    pub max_mr: u32,
    /// Most PDs.
    pub max_pd: u32,
    /// Most AHs.
    pub max_ah: u32,
    /// Largest MR.
    pub max_mr_size: u64,
    /// Supported page sizes bitmap.
    pub page_size_cap: u64,
    /// LLQ bytes per SQ: bounds SQ depth × WQE size.
    pub max_llq_size: u32,
    /// Most send-queue bytes per doorbell, in 64-byte units (the kernel's `max_tx_batch`;
    /// the provider rings the doorbell every `max_tx_batch * 64 / wqe_size` WQEs); 0 = no
    /// limit.
    pub max_tx_batch: u16,
    /// Smallest SQ depth granted.
    pub min_sq_wr: u32,
    /// Link speed in Gb/s.
    pub link_gbps: u32,
    /// Completion vectors.
    pub num_comp_vectors: u32,
    /// Sub-CQs per CQ (rdma-core's `sub_cqs_per_cq`, which the device reports): 1, 2, 4
    /// or 8, or 0 (the default) for the device's own count, 4 on first-generation EFA
    /// (`vendor_part_id` 0xefa0; the count itself is UNCONFIRMED) and 1 elsewhere.
    pub sub_cqs_per_cq: u16,
    /// How long a requester waits for a peer that answers nothing before failing the
    /// request with status 13 (milliseconds; default 1000, efa-sim's assumption: EFA
    /// documents none). Longer for many software devices on few cores, whose peers can
    /// be starved of CPU for longer than a NIC is ever silent.
    pub peer_timeout_ms: u32,
    /// Report RDMA-read requester completions as IBV_WC_SEND (rdma-core fidelity) or RDMA_READ.
    pub read_completes_as_send: bool,
    /// Whether `ibv_reg_dmabuf_mr` works (off: EOPNOTSUPP, as a kernel or driver without
    /// dma-buf MRs answers, so consumers take their fallback).
    pub dmabuf_mr: bool,
    /// Whether `efadv_query_qp_wqs` and `efadv_query_cq` hand out the rings (off:
    /// EOPNOTSUPP, the answer the reference gives for a device or library that does not
    /// let consumers drive its rings; libfabric and efa-typestate's `Auto` backend then
    /// stay on the provider path).
    pub ring_query: bool,
    /// Whether a send queue's doorbell, once handed out, is a trapped page whose stores
    /// reach the device on the storing thread through a `SIGSEGV` handler
    /// (`crate::ring::mmio`). Off by default (issue 38): a program that installs its own
    /// handler after efa-sim's would take the trap for a crash. Off, the doorbell is
    /// plain memory that the watcher scans, and a consumer may call
    /// `efa_sim_direct_sq_doorbell` after its store (efa-typestate does).
    pub mmio_trap: bool,
    /// Whether efa-sim's calls for direct consumers (`efa_sim_direct_sq_doorbell`,
    /// `_cq_doorbell`, `_progress`) do the device's work on the caller's thread (off:
    /// they return at once and the watcher does it, as for a consumer that never calls
    /// them; instruction counts of a direct consumer's own work use this).
    pub direct_calls: bool,
    /// Whether `ibv_reg_mr` on CUDA device memory works (the nvidia_peermem path; off:
    /// EFAULT, as the kernel fails to pin GPU pages without nvidia_peermem).
    pub peermem: bool,
    /// Strict mode (`strict=1`, or the bare item `strict`): the orders SRD does not
    /// promise are really given up (the WQEs of a doorbell run in a seeded random
    /// permutation, overtaken ones later) and datagrams are delayed at random; see
    /// `crate::model::runtime::strict`.
    pub strict: bool,
}

/// `EFADV_DEVICE_ATTR_CAPS_RDMA_READ`.
pub const CAP_RDMA_READ: u32 = efa_sys::efadv::EFADV_DEVICE_ATTR_CAPS_RDMA_READ;
/// `EFADV_DEVICE_ATTR_CAPS_RNR_RETRY`.
pub const CAP_RNR_RETRY: u32 = efa_sys::efadv::EFADV_DEVICE_ATTR_CAPS_RNR_RETRY;
/// `EFADV_DEVICE_ATTR_CAPS_CQ_WITH_SGID`.
pub const CAP_CQ_WITH_SGID: u32 = efa_sys::efadv::EFADV_DEVICE_ATTR_CAPS_CQ_WITH_SGID;
/// `EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE`.
pub const CAP_RDMA_WRITE: u32 = efa_sys::efadv::EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE;
/// `EFADV_DEVICE_ATTR_CAPS_UNSOLICITED_WRITE_RECV`.
pub const CAP_UNSOLICITED_WRITE_RECV: u32 =
    efa_sys::efadv::EFADV_DEVICE_ATTR_CAPS_UNSOLICITED_WRITE_RECV;

impl Profile {
    /// The sub-CQs of each CQ ([`Profile::sub_cqs_per_cq`], its 0 resolved).
    pub fn sub_cqs(&self) -> u32 {
        match self.sub_cqs_per_cq {
            0 if self.vendor_part_id == efa_sys::vendor::EFA_PART_ID_EFA0 => FIRST_GEN_SUB_CQS,
            0 => 1,
            n => u32::from(n),
        }
    }
}

/// Sub-CQs per CQ of a first-generation device when the profile names no count
/// (UNCONFIRMED: no public dump of `sub_cqs_per_cq` exists; any count above one shows
/// a consumer that polls only the first).
pub const FIRST_GEN_SUB_CQS: u32 = 4;

impl Default for Profile {
    fn default() -> Self {
        Profile {
            vendor_id: 0x1d0f,
            vendor_part_id: 0xefa2,
            hw_ver: 0xefa2,
            fw_ver: concat!("efa-sim ", env!("CARGO_PKG_VERSION")).to_string(),
            node_guid: 0,
            device_caps: CAP_RDMA_READ
                | CAP_RNR_RETRY
                | CAP_CQ_WITH_SGID
                | CAP_RDMA_WRITE
                | CAP_UNSOLICITED_WRITE_RECV,
            cq_notifications: true,
            // Limits as model §2.4 gives them for real devices: 4096-entry SQs and 32768 RQ
            // descriptors are achievable (libfabric#11976), the true maxima UNCONFIRMED.
            max_sq_wr: 4096,
            max_rq_wr: 32768,
            // Two buffer descriptors in a 64-byte WQE (EFA_IO_TX_DESC_NUM_BUFS), one in an
            // RDMA WQE; max_rq_sge UNCONFIRMED (libfabric sizes its recv SGEs at 2).
            max_sq_sge: 2,
            max_rq_sge: 2,
            max_sge_rd: 1,
            // 32 on EC2 (libfabric's efa_unit_test_info.c); the wide value UNCONFIRMED.
            inline_buf_size: 32,
            inline_buf_size_ex: 32,
            // ≈ 1 GiB (libfabric's RDMA segment size); MTU "approximately 8 KiB", exact
            // bytes UNCONFIRMED.
            max_rdma_size: 1 << 30,
            mtu_bytes: 8192,
            // The counts below, max_cqe, page_size_cap, max_llq_size and min_sq_wr have no
            // public real value (model §2.4, §7): chosen for the emulator. max_qp is the
            // per-process QPN room.
            max_qp: 511,
            max_cq: 1024,
            max_cqe: MAX_RING_ENTRIES,
            max_mr: 1 << 16,
            max_pd: 256,
            max_ah: 1024,
            max_mr_size: 1 << 40,
            page_size_cap: 0xffff_f000,
            // 4096 64-byte WQEs (or 2048 wide ones).
            max_llq_size: 4096 * 64,
            // 16 regular or 8 wide WQEs per doorbell.
            max_tx_batch: 16,
            min_sq_wr: 8,
            link_gbps: 100,
            num_comp_vectors: 1,
            peer_timeout_ms: crate::model::runtime::PEER_TIMEOUT.as_millis() as u32,
            sub_cqs_per_cq: 0,
            read_completes_as_send: true,
            dmabuf_mr: true,
            ring_query: true,
            mmio_trap: false,
            direct_calls: true,
            peermem: true,
            strict: false,
        }
    }
}

/// Longest `peer_timeout_ms`.
pub const MAX_PEER_TIMEOUT_MS: u32 = 600_000;

/// Every key `EFA_SIM_PROFILE` accepts (one per `Profile` field).
pub const PROFILE_KEYS: &[&str] = &[
    "vendor_id",
    "vendor_part_id",
    "hw_ver",
    "fw_ver",
    "node_guid",
    "caps",
    "cq_notifications",
    "max_sq_wr",
    "max_rq_wr",
    "max_sq_sge",
    "max_rq_sge",
    "max_sge_rd",
    "inline_buf_size",
    "inline_buf_size_ex",
    "max_rdma_size",
    "mtu_bytes",
    "max_qp",
    "max_cq",
    "max_cqe",
    "max_mr",
    "max_pd",
    "max_ah",
    "max_mr_size",
    "page_size_cap",
    "max_llq_size",
    "max_tx_batch",
    "min_sq_wr",
    "link_gbps",
    "num_comp_vectors",
    "peer_timeout_ms",
    "sub_cqs_per_cq",
    "read_completes_as_send",
    "dmabuf_mr",
    "ring_query",
    "mmio_trap",
    "direct_calls",
    "peermem",
    "strict",
];

/// Checks the invariants the model relies on, and rejects limits that would make the
/// device unusable or contradict its capabilities. The error names the field, its value
/// and what is allowed: `max_rdma_size=0: must be 1..=4294967295 while caps has
/// rdma_read or rdma_write`.
pub fn validate(p: &Profile) -> Result<(), String> {
    let range = |key: &str, v: u64, lo: u64, hi: u64, why: &str| -> Result<(), String> {
        if (lo..=hi).contains(&v) {
            return Ok(());
        }
        Err(format!("{key}={v}: must be {lo}..={hi}{why}"))
    };
    let ring = " (16-bit ring indices)";
    let unusable = " (0 makes the device unusable)";
    range(
        "max_sq_sge",
        p.max_sq_sge.into(),
        1,
        TX_DESC_NUM_BUFS as u64,
        " (buffer descriptors in a send WQE)",
    )?;
    range("max_rq_sge", p.max_rq_sge.into(), 1, MAX_RQ_SGE.into(), "")?;
    let inline_max = TX_DESC_INLINE_MAX_SIZE_128 as u64;
    range(
        "inline_buf_size",
        p.inline_buf_size.into(),
        0,
        inline_max,
        " (inline bytes of a WQE)",
    )?;
    range(
        "inline_buf_size_ex",
        p.inline_buf_size_ex.into(),
        0,
        inline_max,
        " (inline bytes of a WQE)",
    )?;
    let entries = u64::from(MAX_RING_ENTRIES);
    range("max_sq_wr", p.max_sq_wr.into(), 1, entries, ring)?;
    range("max_rq_wr", p.max_rq_wr.into(), 1, entries, ring)?;
    range("max_cqe", p.max_cqe.into(), 1, entries, ring)?;
    range(
        "max_llq_size",
        p.max_llq_size.into(),
        64,
        entries * 64,
        " (64-byte WQEs, 16-bit ring indices)",
    )?;
    range(
        "min_sq_wr",
        p.min_sq_wr.into(),
        0,
        p.max_sq_wr.into(),
        " (at most max_sq_wr)",
    )?;
    range(
        "max_mr",
        p.max_mr.into(),
        1,
        MAX_MRS.into(),
        " (24-bit MR keys)",
    )?;
    range(
        "max_qp",
        p.max_qp.into(),
        1,
        MAX_QPS_PER_PROCESS.into(),
        " (QPNs are 16-bit)",
    )?;
    range("max_cq", p.max_cq.into(), 1, u32::MAX.into(), unusable)?;
    range("max_pd", p.max_pd.into(), 1, u32::MAX.into(), unusable)?;
    range("max_ah", p.max_ah.into(), 1, u32::MAX.into(), unusable)?;
    range("max_mr_size", p.max_mr_size, 1, u64::MAX, unusable)?;
    range(
        "page_size_cap",
        p.page_size_cap,
        1,
        u64::MAX,
        " (0: no page size at all)",
    )?;
    range(
        "mtu_bytes",
        p.mtu_bytes.into(),
        1,
        MAX_MTU_BYTES.into(),
        " (a SEND travels in one datagram)",
    )?;
    range(
        "num_comp_vectors",
        p.num_comp_vectors.into(),
        1,
        u32::MAX.into(),
        "",
    )?;
    if !matches!(p.sub_cqs_per_cq, 0 | 1 | 2 | 4 | 8) {
        return Err(format!(
            "sub_cqs_per_cq={}: must be 0 (the device's count), 1, 2, 4 or 8",
            p.sub_cqs_per_cq
        ));
    }
    range(
        "peer_timeout_ms",
        p.peer_timeout_ms.into(),
        1,
        MAX_PEER_TIMEOUT_MS.into(),
        " (10 minutes at most: a request must fail some time)",
    )?;
    if p.device_caps & (CAP_RDMA_READ | CAP_RDMA_WRITE) != 0 {
        let rdma =
            " while caps has rdma_read or rdma_write (drop them with caps=-rdma_read-rdma_write)";
        range(
            "max_rdma_size",
            p.max_rdma_size.into(),
            1,
            u32::MAX.into(),
            rdma,
        )?;
        range("max_sge_rd", p.max_sge_rd.into(), 1, u32::MAX.into(), rdma)?;
    }
    Ok(())
}
