//! The pure-Rust device model: devices, objects, queues, protection checks and
//! completion rules of an EFA SRD/UD device. No FFI here: the C-ABI layer
//! (`crate::abi`) translates rdma-core structs into these calls, and the
//! [`transport`] moves packets between devices (in one process, between
//! processes, across network namespaces; UDP, so it can span hosts). The
//! wire protocol, reliability, timeouts and every choice made where real
//! hardware behaviour is unspecified are documented in [`runtime`].
//!
//! INTERFACE CONTRACT between `abi` (C side) and `model` (semantics). Signatures
//! here are the agreement; bodies belong to the model. Extend, don't break.
//! Errors are positive errno values (`Errno`), exactly what rdma-core returns.
//!
//! # Configuration (environment)
//!
//! * `EFA_SIM_DEVICES=N` — number of devices `efa_0..efa_{N-1}` (default 2, at most 64).
//! * `EFA_SIM_ADDR=a.b.c.d` — IPv4 address this process's devices bind to
//!   (default 127.0.0.1). The GID encodes it: `fe80::efa5:AABB:CCDD:0:IIII`
//!   (address, then the 16-bit device index), see [`gid_for`].
//! * `EFA_SIM_READ_OPCODE=send|rdma_read` — how RDMA-read requester completions are
//!   reported (`send` = rdma-core fidelity, the default). Same as profile key `read_opcode`.
//! * `EFA_SIM_FAULTS=seed=42,reorder=0.2,delay_us=50,loss=0.05,dup=0.05,kill_after=N` —
//!   fault injection on every datagram this process sends; `kill_after` kills the
//!   process (SIGKILL) at its N-th datagram (see [`transport`]).
//! * `EFA_SIM_PORT_BASE` (default 47000), `EFA_SIM_LOCK_DIR` (default
//!   `/tmp/efa-sim-<uid>`) — UDP port layout and process-slot lock files
//!   (see [`transport`]).
//! * `EFA_SIM_NO_PROCESS_VM=1` — this process, as RDMA responder, refuses the
//!   process_vm_* fast path, forcing the chunked data-in-datagram path used
//!   between hosts.
//! * `EFA_SIM_TRACE=1` — print a line to stderr for every WR that times out.
//! * `EFA_SIM_DIRECT=0` — same-process peers also use datagrams (the direct
//!   path is on by default when no faults are configured; see [`runtime`]).
//! * `EFA_SIM_PROFILE` — overrides: if the value contains `=` it is an inline list,
//!   otherwise it is the path of a file holding the list. List syntax: `key=value`
//!   items separated by `,`, `;` or newlines; `#` starts a comment; an item
//!   `efa_N.key=value` applies to device N only (after the global items).
//!   Numbers are decimal or `0x` hex; booleans `true/false/1/0/yes/no/on/off`.
//!   Example: `max_rdma_size=65536,caps=-rdma_write,max_sq_wr=16,efa_1.mtu_bytes=4096`.
//!   Keys (one per [`Profile`] field): `vendor_id`, `vendor_part_id`, `hw_ver`,
//!   `fw_ver` (must start with `efa-sim`), `node_guid`, `caps` (alias `device_caps`:
//!   a number; `name|name` replaces the set; `+name`/`-name` items edit the default;
//!   names `rdma_read`, `rnr_retry`, `cq_with_sgid`, `rdma_write`,
//!   `unsolicited_write_recv`), `cq_notifications`, `max_sq_wr`, `max_rq_wr`,
//!   `max_sq_sge` (1..=16), `max_rq_sge` (1..=16), `max_sge_rd`, `inline_buf_size`,
//!   `inline_buf_size_ex` (≤ 80), `max_rdma_size`, `mtu_bytes` (≤ 61440), `max_qp`
//!   (≤ 511), `max_cq`, `max_cqe`, `max_mr`, `max_pd`, `max_ah`, `max_mr_size`,
//!   `page_size_cap`, `max_llq_size`, `min_sq_wr`, `link_gbps`, `num_comp_vectors`,
//!   `read_completes_as_send` (bool), `read_opcode` (`send`/`rdma_read`).
//!
//! Any malformed value (unknown key, bad number, unreadable file, per-device item
//! for a device that does not exist) makes [`Sim::get`] report **zero devices**,
//! with the reason in [`Sim::error`] and on stderr; it never silently falls back
//! to defaults.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

mod cq;
pub(crate) mod mem;
pub mod profile;
mod qp;
pub mod runtime;
#[path = "../transport/mod.rs"]
pub mod transport;

use cq::CqEntry;
use runtime::Runtime;
pub use runtime::Stats;

/// Positive errno (EINVAL, ENOMEM, EOPNOTSUPP, ...), as rdma-core reports it.
pub type Errno = i32;

/// 16-byte device address (the port's only GID).
pub type Gid = [u8; 16];

/// Raw EFA completion status (efa_io_comp_status, model §4); 0 = OK.
pub type EfaStatus = u8;

// ---------------------------------------------------------------------------
// Devices and profiles
// ---------------------------------------------------------------------------

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
    /// Smallest SQ depth granted.
    pub min_sq_wr: u32,
    /// Link speed in Gb/s.
    pub link_gbps: u32,
    /// Completion vectors.
    pub num_comp_vectors: u32,
    /// Report RDMA-read requester completions as IBV_WC_SEND (rdma-core fidelity) or RDMA_READ.
    pub read_completes_as_send: bool,
}

/// Process-global view of the configured devices (created on first use).
pub struct Sim {
    devices: Vec<Arc<Device>>,
    error: Option<String>,
}

impl Sim {
    /// The devices of this process, from `EFA_SIM_DEVICES` (default 2) and profiles.
    /// A malformed configuration yields zero devices and [`Sim::error`] says why
    /// (also printed once to stderr).
    pub fn get() -> &'static Sim {
        static SIM: OnceLock<Sim> = OnceLock::new();
        SIM.get_or_init(|| match Sim::from_env() {
            Ok(devices) => Sim {
                devices,
                error: None,
            },
            Err(msg) => {
                eprintln!("efa-sim: configuration error, no devices: {msg}");
                Sim {
                    devices: Vec::new(),
                    error: Some(msg),
                }
            }
        })
    }

    /// Builds the device list from the environment (see the module docs).
    fn from_env() -> Result<Vec<Arc<Device>>, String> {
        let get = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        Sim::build(
            get("EFA_SIM_DEVICES").as_deref(),
            get("EFA_SIM_PROFILE").as_deref(),
            get("EFA_SIM_READ_OPCODE").as_deref(),
            get("EFA_SIM_ADDR").as_deref(),
        )
    }

    /// Builds devices from explicit configuration values (same syntax as the
    /// environment variables; `None` = unset).
    pub fn build(
        devices: Option<&str>,
        profile: Option<&str>,
        read_opcode: Option<&str>,
        addr: Option<&str>,
    ) -> Result<Vec<Arc<Device>>, String> {
        let count = match devices {
            None => 2,
            Some(v) => v
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n <= MAX_DEVICES)
                .ok_or_else(|| {
                    format!("EFA_SIM_DEVICES=`{v}` must be a number 0..={MAX_DEVICES}")
                })?,
        };
        let overrides = match profile {
            None => profile::Overrides::default(),
            Some(v) => profile::Overrides::from_env_value(v)
                .map_err(|m| format!("EFA_SIM_PROFILE: {m}"))?,
        };
        if let Some(max) = overrides.max_device() {
            if max >= count {
                return Err(format!(
                    "EFA_SIM_PROFILE names efa_{max} but only {count} devices exist"
                ));
            }
        }
        let mut base = Profile::default();
        if let Some(v) = read_opcode {
            base.read_completes_as_send =
                profile::parse_read_opcode(v).map_err(|m| format!("EFA_SIM_READ_OPCODE: {m}"))?;
        }
        let ip: std::net::Ipv4Addr = match addr {
            None => std::net::Ipv4Addr::LOCALHOST,
            Some(a) => a
                .trim()
                .parse()
                .map_err(|_| format!("EFA_SIM_ADDR=`{a}` is not an IPv4 address"))?,
        };
        (0..count)
            .map(|index| {
                let profile = overrides
                    .profile_for(index, &base)
                    .map_err(|m| format!("EFA_SIM_PROFILE: {m}"))?;
                Ok(Arc::new(Device::new(index, ip, profile)))
            })
            .collect()
    }

    /// All devices of this process (empty when the configuration is malformed).
    pub fn devices(&self) -> &[Arc<Device>] {
        &self.devices
    }

    /// Why there are no devices, when the configuration was rejected.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }
}

/// Most devices `EFA_SIM_DEVICES` may ask for.
pub const MAX_DEVICES: u32 = 64;
/// Largest `mtu_bytes` (a SEND travels in one datagram).
pub const MAX_MTU_BYTES: u32 = 60 * 1024;
/// QPs one process can hold per device (QPN = process slot << 9 | index, index 1..=511).
pub const MAX_QPS_PER_PROCESS: u32 = 511;

/// One device (`efa_0`, `efa_1`, ...).
pub struct Device {
    /// Index N of `efa_N`.
    pub index: u32,
    /// `efa_N`.
    pub name: String,
    /// The port's only GID.
    pub gid: Gid,
    /// Limits and capabilities.
    pub profile: Profile,
    /// IPv4 address the device's endpoint binds to (encoded in the GID).
    pub addr: std::net::Ipv4Addr,
    rt: OnceLock<Result<Arc<Runtime>, String>>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name)
            .field("addr", &self.addr)
            .finish()
    }
}

impl Device {
    fn new(index: u32, addr: std::net::Ipv4Addr, profile: Profile) -> Device {
        Device {
            index,
            name: format!("efa_{index}"),
            gid: gid_for(addr, index),
            profile,
            addr,
            rt: OnceLock::new(),
        }
    }

    /// A device outside [`Sim::get`]'s list (tests with special profiles).
    /// Opening two devices with the same `index` in one process fails with
    /// ENODEV (they would share a UDP port); pick indices above `EFA_SIM_DEVICES`.
    pub fn standalone(
        index: u32,
        addr: std::net::Ipv4Addr,
        profile: Profile,
    ) -> Result<Arc<Device>, String> {
        profile::validate(&profile)?;
        if index >= MAX_DEVICES {
            return Err(format!("device index {index} must be < {MAX_DEVICES}"));
        }
        Ok(Arc::new(Device::new(index, addr, profile)))
    }
}

/// GID layout: `fe80::efa5:` + IPv4 address + 16-bit device index, i.e.
/// `fe80:0000:0000:efa5:AABB:CCDD:0000:IIII` (link-local, like real EFA GIDs).
pub fn gid_for(addr: std::net::Ipv4Addr, index: u32) -> Gid {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[6] = 0xef;
    g[7] = 0xa5;
    g[8..12].copy_from_slice(&addr.octets());
    g[14..16].copy_from_slice(&(index as u16).to_be_bytes());
    g
}

/// Inverse of [`gid_for`]: the (address, device index) a GID names, if it is an efa-sim GID.
pub fn gid_endpoint(g: &Gid) -> Option<(std::net::Ipv4Addr, u32)> {
    if g[0] != 0xfe || g[1] != 0x80 || g[6] != 0xef || g[7] != 0xa5 {
        return None;
    }
    let ip = std::net::Ipv4Addr::new(g[8], g[9], g[10], g[11]);
    Some((ip, u16::from_be_bytes([g[14], g[15]]) as u32))
}

// ---------------------------------------------------------------------------
// Objects. The ABI layer keeps one Arc per rdma-core object it hands out.
// ---------------------------------------------------------------------------

/// Protection domain.
pub struct Pd {
    rt: Arc<Runtime>,
    number: u16,
    users: AtomicU32,
    dead: AtomicBool,
    /// (GID → (AH number, use count)) of this PD: the device's address book.
    ahs: Mutex<HashMap<Gid, (u16, u32)>>,
}

/// Memory region.
pub struct Mr {
    pd: Arc<Pd>,
    key: u32,
    /// Host address of the first byte (0 for an unmappable dma-buf).
    host: usize,
    len: usize,
    iova: u64,
    access: AccessFlags,
    dmabuf: Option<DmaBuf>,
    dead: AtomicBool,
}

/// What a dma-buf MR was registered with.
#[derive(Debug)]
pub struct DmaBuf {
    /// The dma-buf fd given at registration.
    pub fd: i32,
    /// Offset into the dma-buf.
    pub offset: u64,
    /// Whether the model could mmap the fd (else its data path fails, see module docs).
    pub mapped: bool,
}

/// Address handle: a (PD, GID) pair with a device AH number.
#[derive(Debug)]
pub struct Ah {
    pd: Weak<Pd>,
    gid: Gid,
    number: u16,
    dead: AtomicBool,
}

/// Completion queue.
pub struct Cq {
    rt: Arc<Runtime>,
    depth: u32,
    opts: CqOptions,
    ring: Mutex<VecDeque<CqEntry>>,
    armed: AtomicBool,
    notifier: Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
    users: AtomicU32,
    dead: AtomicBool,
}

/// Queue pair.
pub struct Qp {
    me: Weak<Qp>,
    pd: Arc<Pd>,
    qpn: u32,
    qp_type: QpType,
    send_cq: Arc<Cq>,
    recv_cq: Arc<Cq>,
    caps: QpCaps,
    sq_sig_all: bool,
    send_ops_flags: Option<u64>,
    efa_flags: u16,
    state: AtomicU32,
    qkey: AtomicU32,
    sq_psn: AtomicU32,
    rnr_retry: AtomicU8,
    sq_inflight: AtomicU32,
    rq_inflight: AtomicU32,
    rq: Mutex<VecDeque<RecvWr>>,
    /// Serialises posters so "room for N" and "take N" are one step.
    post_lock: Mutex<()>,
    dead: AtomicBool,
}

/// IBV_ACCESS_* bits as given by the caller (the model applies model §3.7 rules).
pub type AccessFlags = u32;

/// `IBV_ACCESS_LOCAL_WRITE`.
pub const ACCESS_LOCAL_WRITE: u32 = 1;
/// `IBV_ACCESS_REMOTE_WRITE`.
pub const ACCESS_REMOTE_WRITE: u32 = 2;
/// `IBV_ACCESS_REMOTE_READ`.
pub const ACCESS_REMOTE_READ: u32 = 4;
/// `IBV_ACCESS_OPTIONAL_RANGE` (silently dropped, like rdma-core).
pub const ACCESS_OPTIONAL_RANGE: u32 = 0x3ff0_0000;

impl Device {
    /// This device's runtime (endpoint + engine thread), started on first use.
    fn runtime(self: &Arc<Self>) -> Result<Arc<Runtime>, Errno> {
        let rt = self.rt.get_or_init(|| {
            Runtime::start(self).map_err(|m| {
                eprintln!("efa-sim: {}: cannot start: {m}", self.name);
                m
            })
        });
        rt.as_ref().cloned().map_err(|_| libc::ENODEV)
    }

    /// Counters of this device in this process (zero before first use).
    pub fn stats(self: &Arc<Self>) -> Stats {
        match self.rt.get() {
            Some(Ok(rt)) => rt.stats.snapshot(),
            _ => Stats::default(),
        }
    }

    /// `ibv_alloc_pd`; ENOMEM beyond `max_pd`.
    pub fn alloc_pd(self: &Arc<Self>) -> Result<Arc<Pd>, Errno> {
        let rt = self.runtime()?;
        let n = rt.pd_count.fetch_add(1, Ordering::AcqRel);
        if n >= self.profile.max_pd {
            rt.pd_count.fetch_sub(1, Ordering::AcqRel);
            return Err(libc::ENOMEM);
        }
        let number = (rt.next_pd.fetch_add(1, Ordering::Relaxed) & 0xffff) as u16;
        Ok(Arc::new(Pd {
            rt,
            number,
            users: AtomicU32::new(0),
            dead: AtomicBool::new(false),
            ahs: Mutex::new(HashMap::new()),
        }))
    }

    /// `depth` = requested cqe; returns the CQ and the granted depth (power of two).
    pub fn create_cq(
        self: &Arc<Self>,
        depth: u32,
        opts: CqOptions,
    ) -> Result<(Arc<Cq>, u32), Errno> {
        let rt = self.runtime()?;
        Cq::create(rt, depth, opts)
    }
}

#[derive(Clone, Copy, Debug, Default)]
/// Extended CQ options (efadv_create_cq wc_flags).
pub struct CqOptions {
    /// EFADV_WC_EX_WITH_SGID requested.
    pub with_sgid: bool,
    /// EFADV_WC_EX_WITH_IS_UNSOLICITED requested.
    pub with_unsolicited: bool,
}

impl Pd {
    /// Checks and normalises MR access flags (model §3.7).
    fn mr_access(&self, access: AccessFlags) -> Result<AccessFlags, Errno> {
        let caps = self.rt.profile.device_caps;
        let access = access & !ACCESS_OPTIONAL_RANGE;
        let mut allowed = ACCESS_LOCAL_WRITE;
        if caps & profile::CAP_RDMA_READ != 0 {
            allowed |= ACCESS_REMOTE_READ;
        }
        if caps & profile::CAP_RDMA_WRITE != 0 {
            allowed |= ACCESS_REMOTE_WRITE;
        }
        if access & !allowed != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        Ok(access)
    }

    fn add_mr(
        self: &Arc<Self>,
        host: usize,
        len: usize,
        iova: u64,
        access: AccessFlags,
        dmabuf: Option<DmaBuf>,
    ) -> Result<Arc<Mr>, Errno> {
        if self.dead.load(Ordering::Acquire) {
            return Err(libc::EINVAL);
        }
        if len as u64 > self.rt.profile.max_mr_size || iova.checked_add(len as u64).is_none() {
            return Err(libc::EINVAL);
        }
        let mut mrs = self.rt.mrs.write().unwrap_or_else(|e| e.into_inner());
        if mrs.len() >= self.rt.profile.max_mr as usize {
            return Err(libc::ENOMEM);
        }
        let key = self.rt.alloc_key(&mrs);
        let mr = Arc::new(Mr {
            pd: self.clone(),
            key,
            host,
            len,
            iova,
            access,
            dmabuf,
            dead: AtomicBool::new(false),
        });
        mrs.insert(key, mr.clone());
        self.users.fetch_add(1, Ordering::AcqRel);
        Ok(mr)
    }

    /// Host memory `[addr, addr+len)` addressed by the peer as `[iova, iova+len)`.
    ///
    /// # Safety
    /// `[addr, addr+len)` must stay valid, readable and (if any write access is
    /// granted) writable memory until [`Mr::dereg`] returns; peers and the device
    /// read and write it at any time in between (like DMA).
    pub unsafe fn reg_mr(
        self: &Arc<Self>,
        addr: usize,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Arc<Mr>, Errno> {
        let access = self.mr_access(access)?;
        if addr.checked_add(len).is_none() || (addr == 0 && len != 0) {
            return Err(libc::EINVAL);
        }
        self.add_mr(addr, len, iova, access, None)
    }

    /// dma-buf registration: records fd/offset/len/iova. The model mmaps
    /// `[offset, offset+len)` of the fd (shared, read/write); if that fails the MR
    /// still registers but every data-path access to it fails (local side:
    /// status 5 LOC_PROT, remote side: status 7 REM_ACCESS).
    pub fn reg_dmabuf_mr(
        self: &Arc<Self>,
        offset: u64,
        len: usize,
        iova: u64,
        fd: i32,
        access: AccessFlags,
    ) -> Result<Arc<Mr>, Errno> {
        let access = self.mr_access(access)?;
        if fd < 0 {
            return Err(libc::EINVAL);
        }
        let mut host = 0usize;
        if len > 0 {
            // SAFETY: mmap of a caller-owned fd into fresh address space; no existing
            // memory is touched; failure is reported as MAP_FAILED.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    offset as libc::off_t,
                )
            };
            if p != libc::MAP_FAILED {
                host = p as usize;
            }
        }
        let mapped = host != 0 || len == 0;
        self.add_mr(host, len, iova, access, Some(DmaBuf { fd, offset, mapped }))
    }

    /// Same (PD, GID) gives the same AH number (model §3.7).
    pub fn create_ah(self: &Arc<Self>, gid: &Gid) -> Result<Arc<Ah>, Errno> {
        if self.dead.load(Ordering::Acquire) {
            return Err(libc::EINVAL);
        }
        let mut ahs = self.ahs.lock().unwrap_or_else(|e| e.into_inner());
        let number = match ahs.get_mut(gid) {
            Some((n, uses)) => {
                *uses += 1;
                *n
            }
            None => {
                let n = self.rt.alloc_ah_number()?;
                ahs.insert(*gid, (n, 1));
                n
            }
        };
        self.users.fetch_add(1, Ordering::AcqRel);
        Ok(Arc::new(Ah {
            pd: Arc::downgrade(self),
            gid: *gid,
            number,
            dead: AtomicBool::new(false),
        }))
    }

    /// Creates a QP (model §3.1 checks); returns it in RESET with the granted caps.
    pub fn create_qp(self: &Arc<Self>, init: &QpInit) -> Result<(Arc<Qp>, QpCaps), Errno> {
        Qp::create(self, init)
    }

    /// EBUSY while MRs/AHs/QPs use it.
    pub fn dealloc(&self) -> Result<(), Errno> {
        if self.users.load(Ordering::Acquire) != 0 {
            return Err(libc::EBUSY);
        }
        if !self.dead.swap(true, Ordering::AcqRel) {
            self.rt.pd_count.fetch_sub(1, Ordering::AcqRel);
        }
        Ok(())
    }

    /// The device PD number.
    pub fn number(&self) -> u16 {
        self.number
    }

    /// The receiver-side AH number of `gid` in this PD, or 0xFFFF.
    fn ah_number_of(&self, gid: &Gid) -> u16 {
        self.ahs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(gid)
            .map(|(n, _)| *n)
            .unwrap_or(0xffff)
    }
}

impl Mr {
    /// Local key (< 2^24).
    pub fn lkey(&self) -> u32 {
        self.key
    }
    /// Remote key (equals the lkey).
    pub fn rkey(&self) -> u32 {
        self.key
    }
    /// Registered length.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the MR is zero-length.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// IOVA of the first byte.
    pub fn iova(&self) -> u64 {
        self.iova
    }
    /// Normalised access flags.
    pub fn access(&self) -> AccessFlags {
        self.access
    }
    /// dma-buf registration facts, if this is a dma-buf MR.
    pub fn dmabuf(&self) -> Option<&DmaBuf> {
        self.dmabuf.as_ref()
    }
    /// Deregisters; EINVAL if already deregistered. Waits for in-flight device accesses.
    pub fn dereg(&self) -> Result<(), Errno> {
        if self.dead.swap(true, Ordering::AcqRel) {
            return Err(libc::EINVAL);
        }
        self.pd
            .rt
            .mrs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
        self.pd.users.fetch_sub(1, Ordering::AcqRel);
        Ok(())
    }

    /// Host address of `[iova, iova+len)` if it lies inside this live MR and
    /// the MR has `need` access bits.
    fn host_range(&self, iova: u64, len: u64, need: AccessFlags) -> Option<usize> {
        if self.dead.load(Ordering::Acquire) || self.access & need != need {
            return None;
        }
        let off = iova.checked_sub(self.iova)?;
        let end = off.checked_add(len)?;
        if end > self.len as u64 {
            return None;
        }
        if self.host == 0 {
            // Unmappable dma-buf (or zero-length MR): only empty accesses succeed.
            return if len == 0 { Some(0) } else { None };
        }
        Some(self.host + off as usize)
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        if let Some(d) = &self.dmabuf {
            if d.mapped && self.host != 0 {
                // SAFETY: we mapped exactly [host, host+len) in reg_dmabuf_mr and nothing
                // references it any more (the MR is being dropped).
                unsafe { libc::munmap(self.host as *mut libc::c_void, self.len) };
            }
        }
    }
}

impl Ah {
    /// Device AH number (u16, never 0xFFFF).
    pub fn number(&self) -> u16 {
        self.number
    }
    /// Destination GID.
    pub fn gid(&self) -> &Gid {
        &self.gid
    }
    /// Releases this handle; the AH number lives on while other handles of the
    /// same (PD, GID) exist. Send WRs still outstanding through this handle
    /// complete with status 1 (FLUSHED).
    pub fn destroy(&self) -> Result<(), Errno> {
        if self.dead.swap(true, Ordering::AcqRel) {
            return Err(libc::EINVAL);
        }
        if let Some(pd) = self.pd.upgrade() {
            let mut ahs = pd.ahs.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((n, uses)) = ahs.get_mut(&self.gid) {
                *uses -= 1;
                if *uses == 0 {
                    let n = *n;
                    ahs.remove(&self.gid);
                    pd.rt.free_ah_number(n);
                }
            }
            drop(ahs);
            pd.users.fetch_sub(1, Ordering::AcqRel);
            pd.rt.flush_ah(self);
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// QP transport type.
pub enum QpType {
    /// Unreliable datagram.
    Ud,
    /// Scalable reliable datagram (efadv driver QP).
    Srd,
}

#[derive(Clone, Copy, Debug, Default)]
/// QP capacities (requested or granted).
pub struct QpCaps {
    /// Send WRs.
    pub max_send_wr: u32,
    /// Receive WRs.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline bytes.
    pub max_inline_data: u32,
}

/// QP creation input (ibv_qp_init_attr_ex + efadv_qp_init_attr).
pub struct QpInit {
    /// UD or SRD.
    pub qp_type: QpType,
    /// CQ for send completions.
    pub send_cq: Arc<Cq>,
    /// CQ for receive completions.
    pub recv_cq: Arc<Cq>,
    /// Requested capacities.
    pub caps: QpCaps,
    /// Every WR signaled implicitly.
    pub sq_sig_all: bool,
    /// IBV_QP_EX_WITH_* bits when created with SEND_OPS_FLAGS, else None.
    pub send_ops_flags: Option<u64>,
    /// EFADV_QP_FLAGS_* (UNSOLICITED_WRITE_RECV, INLINE_WRITE).
    pub efa_flags: u16,
    /// Service level (0 = default; accepted, no effect).
    pub sl: u8,
}

/// ibv_qp_state numbering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum QpState {
    /// IBV_QPS_RESET.
    Reset = 0,
    /// IBV_QPS_INIT.
    Init = 1,
    /// IBV_QPS_RTR.
    Rtr = 2,
    /// IBV_QPS_RTS.
    Rts = 3,
    /// IBV_QPS_SQD.
    Sqd = 4,
    /// IBV_QPS_SQE.
    Sqe = 5,
    /// IBV_QPS_ERR.
    Err = 6,
}

/// Decoded ibv_modify_qp input: `mask` is the raw IBV_QP_* mask, fields valid per mask.
#[derive(Clone, Copy, Debug, Default)]
pub struct ModifyQp {
    /// Raw `IBV_QP_*` attribute mask.
    pub mask: u32,
    /// Target state (ibv_qp_state) if STATE is set.
    pub state: u32,
    /// Assumed current state if CUR_STATE is set.
    pub cur_state: u32,
    /// Q_Key if QKEY is set.
    pub qkey: u32,
    /// P_Key index if PKEY_INDEX is set (must be 0).
    pub pkey_index: u16,
    /// Port if PORT is set (must be 1).
    pub port_num: u8,
    /// Send PSN if SQ_PSN is set (24 bits kept).
    pub sq_psn: u32,
    /// RNR retry count if RNR_RETRY is set (7 = infinite).
    pub rnr_retry: u8,
    /// SQD async notify flag (no effect).
    pub en_sqd_async_notify: u8,
}

#[derive(Clone, Copy, Debug)]
/// `ibv_query_qp` result.
pub struct QpAttrs {
    /// Current state.
    pub state: QpState,
    /// Current Q_Key.
    pub qkey: u32,
    /// Send PSN.
    pub sq_psn: u32,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Always false (SQD is immediate).
    pub sq_draining: bool,
    /// Granted capacities.
    pub caps: QpCaps,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// Send opcode.
pub enum SendOp {
    /// SEND.
    Send,
    /// SEND with immediate.
    SendImm,
    /// RDMA read.
    RdmaRead,
    /// RDMA write.
    RdmaWrite,
    /// RDMA write with immediate.
    RdmaWriteImm,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
/// Scatter/gather element.
pub struct Sge {
    /// Address (IOVA of the MR named by `lkey`).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key.
    pub lkey: u32,
}

/// Most SGEs a send WR can carry in any profile; profiles limit further.
pub const MAX_SEND_SGE: usize = 16;
/// Most bytes of inline data (128-byte WQE).
pub const MAX_INLINE: usize = 80;
/// Most SGEs a receive WR can carry in any profile.
pub const MAX_RECV_SGE: usize = 16;

#[derive(Clone, Debug)]
/// Where a send WR's data comes from.
pub enum Payload {
    /// Registered memory.
    Sges(arrayvec::ArrayVec<Sge, MAX_SEND_SGE>),
    /// Bytes copied at post time.
    Inline(arrayvec::ArrayVec<u8, MAX_INLINE>),
}

/// One send work request, as staged by `ibv_post_send` or an `ibv_wr_*` session.
#[derive(Clone, Debug)]
pub struct SendWr {
    /// Caller's id, reported in the completion.
    pub wr_id: u64,
    /// Opcode.
    pub op: SendOp,
    /// IBV_SEND_* bits as given (the model enforces model §3.3 rule 2/3).
    pub send_flags: u32,
    /// Immediate data exactly as the caller gave it (network byte order).
    pub imm_be: u32,
    /// Destination address handle.
    pub ah: Arc<Ah>,
    /// Destination QPN.
    pub remote_qpn: u32,
    /// Destination Q_Key.
    pub remote_qkey: u32,
    /// Data.
    pub payload: Payload,
    /// (remote iova, rkey) for RDMA ops.
    pub remote: Option<(u64, u32)>,
}

#[derive(Clone, Debug)]
/// One receive work request.
pub struct RecvWr {
    /// Caller's id, reported in the completion.
    pub wr_id: u64,
    /// Buffers, filled in order.
    pub sges: arrayvec::ArrayVec<Sge, MAX_RECV_SGE>,
}

// `impl Qp` lives in qp.rs (creation, state machine, posting).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// What a completion reports.
pub enum CompletionKind {
    /// Requester: SEND/SEND_IMM done.
    Send,
    /// Requester: RDMA read done (ABI maps per `read_completes_as_send`).
    RdmaRead,
    /// Requester: RDMA write(+imm) done.
    RdmaWrite,
    /// Responder: a SEND/SEND_IMM arrived.
    Recv,
    /// Responder: write-with-imm arrived.
    RecvRdmaWithImm,
}

/// One completion as the device reports it; the ABI layer maps it to ibv_wc /
/// ibv_cq_ex reads (status table of model §4, `vendor_err` = `status`).
#[derive(Clone, Copy, Debug)]
pub struct Completion {
    /// wr_id of the WR (0 for unsolicited write-with-imm).
    pub wr_id: u64,
    /// Raw EFA status (model §4), 0 = OK.
    pub status: EfaStatus,
    /// Kind.
    pub kind: CompletionKind,
    /// Bytes received (receive kinds; 0 for requester kinds).
    pub byte_len: u32,
    /// Immediate (network byte order) when present.
    pub imm_be: Option<u32>,
    /// Local QPN.
    pub qp_num: u32,
    /// Sender QPN (receive kinds).
    pub src_qp: u32,
    /// Receiver-side AH number of the sender, 0xFFFF if unknown.
    pub slid: u16,
    /// Write-with-imm that consumed no receive WR.
    pub unsolicited: bool,
    /// Sender GID when slid == 0xFFFF and the CQ was created with_sgid.
    pub sgid: Option<Gid>,
}

// `impl Cq` lives in cq.rs.

#[cfg(test)]
mod sim_tests {
    use super::*;

    #[test]
    fn build_default_devices() {
        let d = Sim::build(None, None, None, None).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[1].name, "efa_1");
        assert_eq!(
            gid_endpoint(&d[1].gid),
            Some((std::net::Ipv4Addr::LOCALHOST, 1))
        );
        assert!(d[0].profile.read_completes_as_send);
    }

    #[test]
    fn build_rejects_bad_config() {
        assert!(Sim::build(Some("x"), None, None, None)
            .unwrap_err()
            .contains("EFA_SIM_DEVICES"));
        assert!(Sim::build(None, Some("efa_5.max_qp=3"), None, None)
            .unwrap_err()
            .contains("efa_5"));
        assert!(Sim::build(None, None, Some("maybe"), None)
            .unwrap_err()
            .contains("EFA_SIM_READ_OPCODE"));
        assert!(Sim::build(None, None, None, Some("::1"))
            .unwrap_err()
            .contains("EFA_SIM_ADDR"));
        let d = Sim::build(
            Some("3"),
            Some("efa_2.max_rdma_size=7"),
            Some("rdma_read"),
            Some("10.0.0.2"),
        )
        .unwrap();
        assert_eq!(d[2].profile.max_rdma_size, 7);
        assert!(!d[2].profile.read_completes_as_send);
        assert_eq!(
            gid_endpoint(&d[0].gid).unwrap().0,
            std::net::Ipv4Addr::new(10, 0, 0, 2)
        );
    }
}
