//! The device, and the objects one end of a test needs (PD, CQ, QPs, registrations,
//! peers), made through the safe API and owned together (`Arc`-held handles).

use std::sync::Arc;

use efa::*;
use serde_json::{json, Value};

use crate::gpu::{GpuBufs, Memory, Roles};
use crate::test::Test;
use crate::wire;

/// The software device's firmware strings start with this (efa-sim documents it).
pub const SIM_FW_PREFIX: &str = "efa-sim";
/// Bytes after each buffer that must stay untouched (checked after every size).
pub const GUARD: usize = 64;

/// What a run on a machine without EFA is told.
pub const NO_DEVICE_HINT: &str = "on a machine without EFA, run it on the software device: `efa-sim run -- efa-perf ...` (./scripts/demo.sh does)";

/// The names of the EFA devices, in the order rdma-core lists them.
pub fn efa_names() -> Result<Vec<String>, String> {
    let list =
        DeviceList::new().map_err(|e| format!("no EFA device found ({e}); {NO_DEVICE_HINT}"))?;
    let names = list.efa().map(|d| d.name().to_string()).collect();
    Ok(names)
}

/// A PD held by `Arc`.
pub type SharedPd = Arc<Pd<Arc<Context>>>;
/// An RTS QP of a test.
pub type PerfQp = Qp<SharedPd, Rts>;

/// The opened device and what the tests need to know about it.
pub struct Device {
    /// The context.
    pub ctx: Arc<Context>,
    /// `efa_0`, ...
    pub name: String,
    /// Firmware string.
    pub fw: String,
    /// True on efa-sim.
    pub software: bool,
    /// EFA capabilities.
    pub caps: DeviceCaps,
    /// Largest SEND (port 1's `max_msg_sz`).
    pub max_msg: u32,
    /// Largest RDMA operation.
    pub max_rdma: u32,
    /// Deepest receive queue.
    pub max_rq: u32,
    /// Deepest CQ.
    pub max_cqe: u32,
    /// PCI device id.
    pub part: u32,
    /// The data path this end's QPs and CQs use (`--backend`, `auto` resolved).
    pub backend: Backend,
}

impl Device {
    /// Opens `name`, or the first EFA device, for the data path `backend`.
    pub fn open(name: Option<&str>, backend: Backend) -> Result<Device, String> {
        const HINT: &str = NO_DEVICE_HINT;
        let list = DeviceList::new().map_err(|e| format!("no EFA device found ({e}); {HINT}"))?;
        let names: Vec<String> = list.efa().map(|d| d.name().to_string()).collect();
        let dev = match name {
            Some(n) => list.efa().find(|d| d.name() == n).ok_or_else(|| {
                if names.is_empty() {
                    format!("no EFA device named {n}: no EFA device at all; {HINT}")
                } else {
                    format!(
                        "no EFA device named {n} (EFA devices: {})",
                        names.join(", ")
                    )
                }
            })?,
            None => list
                .efa()
                .next()
                .ok_or_else(|| format!("no EFA device found; {HINT}"))?,
        };
        let name = dev.name().to_string();
        let ctx = dev.open().map_err(|e| format!("cannot open {name}: {e}"))?;
        let attr = ctx.query_device().map_err(|e| format!("{name}: {e}"))?;
        let efa = ctx.query_efa().map_err(|e| format!("{name}: {e}"))?;
        let port = ctx.query_port(1).map_err(|e| format!("{name}: {e}"))?;
        let fw = attr.fw_ver().to_string();
        // What `backend` resolves to on this device: a CQ made as the tests make theirs
        // tells (and `direct` where it cannot be had fails here, naming why).
        let backend = ctx
            .create_ext_cq(CqOptions::new(64).backend(backend))
            .map_err(|e| {
                format!(
                    "{name}: --backend {}: {e}",
                    crate::cli::backend_name(backend)
                )
            })?
            .backend();
        Ok(Device {
            backend,
            software: fw.starts_with(SIM_FW_PREFIX),
            caps: ctx.caps(),
            max_msg: port.max_msg_sz,
            max_rdma: efa.max_rdma_size,
            max_rq: efa.max_rq_wr,
            max_cqe: attr.max_cqe(),
            part: attr.vendor_part_id(),
            fw,
            name,
            ctx: Arc::new(ctx),
        })
    }

    /// The first line of a run: which device, and whether it is the software one.
    pub fn banner(&self) -> String {
        self.banner_on(&self.name)
    }

    /// [`banner`](Self::banner) naming `what` (several devices like this one) instead.
    pub fn banner_on(&self, what: &str) -> String {
        let v = env!("CARGO_PKG_VERSION");
        if self.software {
            format!(
                "efa-perf {v} on {what}: the software EFA device ({}), not EFA hardware: the numbers measure the simulator; {} data path",
                self.fw, crate::cli::backend_name(self.backend)
            )
        } else {
            format!(
                "efa-perf {v} on {what} (EFA hardware, fw {}, device id 0x{:04x}); {} data path",
                self.fw,
                self.part,
                crate::cli::backend_name(self.backend)
            )
        }
    }

    /// What the peer needs to know (part of the hello).
    pub fn to_json(&self) -> Value {
        json!({
            "device": self.name,
            "fw": self.fw,
            "software": self.software,
            "rdma_write": self.caps.contains(DeviceCaps::RDMA_WRITE),
            "rdma_read": self.caps.contains(DeviceCaps::RDMA_READ),
            "max_msg": self.max_msg,
            "max_rdma": self.max_rdma,
            "backend": crate::cli::backend_name(self.backend),
        })
    }
}

/// What both ends agree on for one test (sent by the client in its set-up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    /// The test.
    pub test: Test,
    /// QPs (1 for latency tests).
    pub qps: u32,
    /// WRs in flight per QP (bandwidth tests).
    pub depth: u32,
    /// Largest size of the run.
    pub max_size: usize,
    /// Rails: devices on each end, each with `qps` QPs (1 without `-d all` or a list).
    pub rails: u32,
}

impl Setup {
    /// As a control message.
    pub fn to_json(&self) -> Value {
        json!({
            "setup": self.test.name(),
            "qps": self.qps,
            "depth": self.depth,
            "max_size": self.max_size,
            "rails": self.rails,
        })
    }
    /// From a control message, checked against the protocol's ranges (1 to 64 QPs, 1 to
    /// 65536 WRs in flight, sizes up to [`crate::cli::MAX_SIZE`], 1 to 64 rails, 1 when
    /// not given) before any conversion.
    pub fn from_json(v: &Value) -> Result<Setup, wire::WireError> {
        let name = wire::str_of(v, "setup")?;
        let test =
            Test::from_name(name).ok_or_else(|| wire::WireError::UnknownTest(name.into()))?;
        let qps = wire::u64_in(v, "qps", 1, 64)?;
        let depth = wire::u64_in(v, "depth", 1, 65536)?;
        let max_size = wire::u64_in(v, "max_size", 1, crate::cli::MAX_SIZE as u64)?;
        let rails = match v.get("rails") {
            None => 1,
            Some(_) => wire::u64_in(v, "rails", 1, crate::rails::MAX_RAILS as u64)?,
        };
        Ok(Setup {
            test,
            // In range, checked above: the conversions are exact.
            qps: qps as u32,
            depth: depth as u32,
            max_size: max_size as usize,
            rails: rails as u32,
        })
    }

    /// Whether this end's device can move `max_size` for the test (a peer may ask for
    /// more than the client's plan, which stays within both devices, ever would).
    pub fn check_limits(&self, dev_name: &str, max_msg: u32, max_rdma: u32) -> Result<(), String> {
        let (limit, what) = if self.test.uses_send() {
            (max_msg, "max_msg_sz")
        } else {
            (max_rdma, "max_rdma_size")
        };
        if self.max_size as u64 > u64::from(limit) {
            return Err(format!(
                "set-up max_size {} exceeds the {what} of {dev_name}, {limit} B",
                self.max_size
            ));
        }
        Ok(())
    }
}

/// Bytes of `qps` rings of `slots` receive slots of `slot` bytes, or `None` if that
/// overflows `usize`.
pub fn ring_bytes(qps: u32, slots: u32, slot: usize) -> Option<usize> {
    usize::try_from(qps)
        .ok()?
        .checked_mul(usize::try_from(slots).ok()?)?
        .checked_mul(slot)
}

/// `n` zero bytes, or an error (not an abort) when the memory cannot be had.
pub fn zeroed(n: usize) -> std::result::Result<Vec<u8>, String> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|e| format!("cannot allocate {n} bytes: {e}"))?;
    v.resize(n, 0);
    Ok(v)
}

/// Receive slots per QP that `server` (or the client) keeps posted for `s`.
pub fn recv_slots(s: &Setup, server: bool, dev: &Device) -> u32 {
    let n = match s.test {
        Test::SendLat | Test::WriteLat => 16,
        Test::SendBw if server => (2 * s.depth).max(64),
        _ => 0,
    };
    n.min(dev.max_rq)
}

/// One end's objects for one test.
pub struct Res {
    /// The CQ every QP of the test completes on.
    pub cq: Arc<ExtCq<Arc<Context>>>,
    /// The QPs, in order.
    pub qps: Vec<PerfQp>,
    /// Send and RDMA-write source, RDMA-read destination (and, at a read server, the
    /// RDMA-read source).
    pub local: Mr<SharedPd, Vec<u8>>,
    /// RDMA-write target (write tests, at the target).
    pub target: Option<Mr<SharedPd, Vec<u8>, RemoteWrite>>,
    /// Receive slots, `slots` per QP of `slot` bytes (SEND tests).
    pub ring: Option<Mr<SharedPd, Vec<u8>>>,
    /// Receive slots per QP.
    pub slots: u32,
    /// Bytes per receive slot.
    pub slot: usize,
    /// The peer QP of each of ours.
    pub peers: Vec<Peer<SharedPd>>,
    /// The peer's buffer, for RDMA.
    pub remote: Option<RemoteBuffer>,
    /// With several rails, this one's device (errors name it); `None` with one.
    pub rail: Option<String>,
    /// With `--mem gpu` (`write_bw`, `read_bw`): the RDMA buffers in GPU memory, which
    /// then take the place of `local` (as source or destination) and `target`.
    pub gpu: Option<GpuBufs>,
    pd: SharedPd,
}

impl Res {
    /// Makes everything one end of `s` needs, its RDMA buffers in `mem` (GPU memory for
    /// `write_bw` and `read_bw` only).
    pub fn new(dev: &Device, s: &Setup, server: bool, mem: Memory) -> Result<Res, String> {
        let e = |what: &str, err: Error| format!("{}: {what}: {err}", dev.name);
        let ctx = &dev.ctx;
        let pd: SharedPd = Arc::new(Pd::new(Arc::clone(ctx)).map_err(|x| e("PD", x))?);
        let slots = recv_slots(s, server, dev);
        let send_depth = if s.test.is_latency() { 16 } else { s.depth };
        // Every QP's granted depths (the device rounds them up to powers of two) must fit
        // the shared CQ, or QP creation refuses it (CqTooSmall): it could overflow.
        let per_qp = send_depth.next_power_of_two() + slots.max(16).next_power_of_two();
        let cqe = (s.qps * per_qp + 64).min(dev.max_cqe);
        let cq = Arc::new(
            ExtCq::new(Arc::clone(ctx), CqOptions::new(cqe).backend(dev.backend))
                .map_err(|x| e("CQ", x))?,
        );
        // RNR: SEND tests retry until the receiver reposts (as perftest sets rnr_retry 7);
        // every wait of efa-perf still has its own timeout.
        let rnr = s.test.uses_send().then_some(RnrRetry::Forever);
        let cfg = QpConfig::srd()
            .depth(send_depth, slots.max(16))
            .backend(dev.backend);
        let mut qps = Vec::new();
        for i in 0..s.qps {
            let qp = Qp::new(Arc::clone(&pd), Arc::clone(&cq), Arc::clone(&cq), &cfg)
                .map_err(|x| e("QP", x))?
                .prepare(0x5e4f_0000 | i, rnr)
                .map_err(|x| e("QP to RTS", x))?;
            qps.push(qp);
        }
        let read_source = server && s.test == Test::ReadBw;
        let access = if read_source {
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ
        } else {
            AccessFlags::LOCAL_WRITE
        };
        let buf_bytes = s.max_size.checked_add(GUARD).ok_or_else(|| {
            format!(
                "{}: a buffer of {} bytes is too large",
                dev.name, s.max_size
            )
        })?;
        let local = Mr::new(Arc::clone(&pd), zeroed(buf_bytes)?, access)
            .map_err(|x| e("registering the local buffer", x))?;
        let is_target = match s.test {
            Test::WriteLat => true,
            Test::WriteBw => server,
            _ => false,
        };
        let gpu = if mem.gpu_for(s.test) {
            let roles = Roles {
                local: !is_target,
                read_source,
                target: is_target,
            };
            Some(GpuBufs::new(&pd, &dev.name, buf_bytes, roles)?)
        } else {
            None
        };
        let target = if is_target && gpu.is_none() {
            let t = Mr::new_remote_write(
                Arc::clone(&pd),
                zeroed(buf_bytes)?,
                AccessFlags::LOCAL_WRITE,
            )
            .map_err(|x| e("registering the RDMA-write target", x))?;
            Some(t)
        } else {
            None
        };
        let slot = if s.test.uses_send() { s.max_size } else { 0 };
        let ring = if slot > 0 && slots > 0 {
            let bytes = ring_bytes(s.qps, slots, slot).ok_or_else(|| {
                format!(
                    "{}: {} QPs of {slots} receive slots of {slot} bytes overflow",
                    dev.name, s.qps
                )
            })?;
            let r = Mr::new(Arc::clone(&pd), zeroed(bytes)?, AccessFlags::LOCAL_WRITE)
                .map_err(|x| e("registering the receive slots", x))?;
            Some(r)
        } else {
            None
        };
        let res = Res {
            cq,
            qps,
            local,
            target,
            ring,
            slots,
            slot,
            peers: Vec::new(),
            remote: None,
            rail: (s.rails > 1).then(|| dev.name.clone()),
            gpu,
            pd,
        };
        for q in 0..res.qps.len() {
            for i in 0..slots {
                res.post_recv(q, i).map_err(|x| e("posting receives", x))?;
            }
        }
        Ok(res)
    }

    /// Our endpoints and the buffer the peer may RDMA into or out of, as a message.
    pub fn to_json(&self) -> Value {
        let eps: Vec<String> = self
            .qps
            .iter()
            .map(|q| wire::hex(&q.endpoint().to_bytes()))
            .collect();
        let remote = match (
            &self.gpu,
            &self.target,
            self.local.access().contains(AccessFlags::REMOTE_READ),
        ) {
            (Some(g), _, _) => g.remote(),
            (None, Some(t), _) => Some(t.remote()),
            (None, None, true) => Some(self.local.remote()),
            (None, None, false) => None,
        };
        json!({ "endpoints": eps, "remote": remote.map(|r| wire::hex(&r.to_bytes())) })
    }

    /// Connects each of our QPs to the peer's of the same index, from the peer's
    /// [`to_json`](Self::to_json).
    pub fn connect(&mut self, v: &Value) -> Result<(), String> {
        let eps = v
            .get("endpoints")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("malformed control message: no endpoints in {v}"))?;
        if eps.len() != self.qps.len() {
            return Err(format!(
                "peer has {} QPs, this end {}",
                eps.len(),
                self.qps.len()
            ));
        }
        for ep in eps {
            let bytes = ep
                .as_str()
                .and_then(wire::unhex)
                .ok_or_else(|| format!("malformed endpoint {ep}"))?;
            let info = EndpointInfo::parse(&bytes).map_err(|x| format!("peer endpoint: {x}"))?;
            let peer = Peer::connect(Arc::clone(&self.pd), &info)
                .map_err(|x| format!("address handle for the peer: {x}"))?;
            self.peers.push(peer);
        }
        self.remote = match v.get("remote") {
            Some(Value::String(s)) => {
                let b = wire::unhex(s).ok_or("malformed remote buffer")?;
                Some(RemoteBuffer::parse(&b).map_err(|x| format!("peer buffer: {x}"))?)
            }
            _ => None,
        };
        Ok(())
    }

    /// Posts receive slot `i` of QP `q` (wr_id = slot index); without a ring (write
    /// tests) a zero-length receive for a write-with-immediate.
    pub fn post_recv(&self, q: usize, i: u32) -> Result<()> {
        let mut r = RecvBatch::<1>::new(&self.qps[q]);
        match &self.ring {
            Some(ring) => {
                let at = (q * self.slots as usize + i as usize) * self.slot;
                r.push(i as u64, ring.sge(at as u64, self.slot as u64)?)?;
            }
            None => r.push(i as u64, self.local.sge(0, 0)?)?,
        }
        // SAFETY: a slot is read only after its receive completed, and reposted only
        // after that read; a zero-length receive names no memory.
        unsafe { self.qps[q].post_recv(&r) }
    }

    /// Copies `dst.len()` bytes of receive slot `i` of QP `q` into `dst`, once its receive
    /// completed (a copy of that slot only: other slots may be posted, so no slice of the
    /// ring is ever made).
    pub fn read_slot(&self, q: usize, i: u32, dst: &mut [u8]) -> Result<()> {
        match &self.ring {
            Some(ring) => {
                let at = (q * self.slots as usize + i as usize) * self.slot;
                let n = dst.len().min(self.slot);
                ring.copy_to_slice(at, &mut dst[..n])
            }
            None => Ok(()),
        }
    }

    /// Zeroes the RDMA-write target (if any) before a size, so that what the size
    /// writes is what gets checked.
    pub fn zero_target(&mut self) -> Result<()> {
        if let Some(t) = self.target.as_mut() {
            let zeros = vec![0u8; t.elems()];
            t.copy_from_slice(0, &zeros)?;
        }
        Ok(())
    }

    /// Index of our QP `qpn`.
    pub fn qp_index(&self, qpn: u32) -> Option<usize> {
        self.qps.iter().position(|q| q.qpn() == qpn)
    }
}
