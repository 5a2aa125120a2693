//! The EFA driver's hardware counters (`hw_counters`), counting what the software device
//! really did.
//!
//! Names and places are the Linux EFA driver's (drivers/infiniband/hw/efa/efa_verbs.c,
//! `EFA_DEFINE_PORT_STATS` → `<ibdev>/ports/1/hw_counters/`, `EFA_DEFINE_DEVICE_STATS` →
//! `<ibdev>/hw_counters/`, each directory with the RDMA core's `lifespan`). The kernel
//! asks the device when a file is read, at most once per `lifespan` (10 ms by default);
//! a generated tree holds plain files, so here the devices keep the counts in a small
//! shared file beside the tree (`.efa-sim-counters/<device>`, added to by every process
//! on the tree's devices, as all processes of a host share one NIC) and a thread of each
//! process on the tree rewrites the counter files whose values changed every
//! [`LIFESPAN_MS`], and once more at exit. A reader thus sees values at most about one lifespan
//! old — what the kernel's cache gives too.
//!
//! Counted (see the fidelity ledger in the README): payload bytes and packets (one per
//! MTU or less) sent and received, SEND and receive WRs with their bytes, RDMA read and
//! write WRs with their bytes at the requester, read-response and write-received bytes
//! at the responder, Q_Key violations and dropped UD datagrams (`rx_drops`), retransmitted requests
//! (`retrans_pkts`). Always 0: the `*_wr_err` counters, `retrans_bytes`, the event
//! counters and every device-wide (admin command) counter.

use super::{Entry, COMPLETE_MARKER};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Port counters, in the driver's order.
pub const PORT_COUNTERS: &[&str] = &[
    "tx_bytes",
    "tx_pkts",
    "rx_bytes",
    "rx_pkts",
    "rx_drops",
    "send_bytes",
    "send_wrs",
    "recv_bytes",
    "recv_wrs",
    "rdma_read_wrs",
    "rdma_read_bytes",
    "rdma_read_wr_err",
    "rdma_read_resp_bytes",
    "rdma_write_wrs",
    "rdma_write_bytes",
    "rdma_write_wr_err",
    "rdma_write_recv_bytes",
    "retrans_bytes",
    "retrans_pkts",
    "retrans_timeout_events",
    "unresponsive_remote_events",
    "impaired_remote_conn_events",
];

/// Device-wide counters (admin commands and failed verbs), in the driver's order.
pub const DEVICE_COUNTERS: &[&str] = &[
    "submitted_cmds",
    "completed_cmds",
    "cmds_err",
    "no_completion_cmds",
    "keep_alive_rcvd",
    "alloc_pd_err",
    "create_qp_err",
    "create_cq_err",
    "reg_mr_err",
    "alloc_ucontext_err",
    "create_ah_err",
    "mmap_err",
];

/// The RDMA core's default `lifespan` of cached counter values, in milliseconds.
pub const LIFESPAN_MS: u64 = 10;

/// Index of each counted port counter in [`PORT_COUNTERS`].
#[allow(missing_docs)]
pub mod port {
    pub const TX_BYTES: usize = 0;
    pub const TX_PKTS: usize = 1;
    pub const RX_BYTES: usize = 2;
    pub const RX_PKTS: usize = 3;
    pub const RX_DROPS: usize = 4;
    pub const SEND_BYTES: usize = 5;
    pub const SEND_WRS: usize = 6;
    pub const RECV_BYTES: usize = 7;
    pub const RECV_WRS: usize = 8;
    pub const RDMA_READ_WRS: usize = 9;
    pub const RDMA_READ_BYTES: usize = 10;
    pub const RDMA_READ_RESP_BYTES: usize = 12;
    pub const RDMA_WRITE_WRS: usize = 13;
    pub const RDMA_WRITE_BYTES: usize = 14;
    pub const RDMA_WRITE_RECV_BYTES: usize = 16;
    pub const RETRANS_PKTS: usize = 18;
}

/// The counter files of one device (zeros, as after the driver loads).
pub(super) fn entries(e: &mut Vec<Entry>, ibdev: &str) {
    for (dir, names) in [
        (format!("{ibdev}/ports/1/hw_counters"), PORT_COUNTERS),
        (format!("{ibdev}/hw_counters"), DEVICE_COUNTERS),
    ] {
        for name in names {
            e.push(Entry::file(format!("{dir}/{name}"), 0));
        }
        e.push(Entry::file(format!("{dir}/lifespan"), LIFESPAN_MS));
    }
}

/// The port counters of one device in this process.
pub struct PortCounters {
    values: &'static [AtomicU64],
    /// Where the counter files are, when this process runs on a generated tree.
    dir: Option<PathBuf>,
    /// The values last written to the files (compared, not flagged: the hot path only
    /// adds, and other processes' additions show up too).
    written: Mutex<Vec<u64>>,
}

impl PortCounters {
    /// The counters of device `name`: shared with every process on the same generated
    /// tree under `root`, or private (and never written) when `root` is not one.
    pub fn open(root: &Path, name: &str) -> Arc<PortCounters> {
        let dir = root.join(format!("class/infiniband/{name}/ports/1/hw_counters"));
        let shared = root
            .join(COMPLETE_MARKER)
            .is_file()
            .then(|| map_shared(&root.join(".efa-sim-counters").join(name)).ok())
            .flatten();
        let counters = Arc::new(PortCounters {
            dir: shared.is_some().then_some(dir),
            values: shared.unwrap_or_else(|| {
                Box::leak(
                    (0..PORT_COUNTERS.len())
                        .map(|_| AtomicU64::new(0))
                        .collect(),
                )
            }),
            written: Mutex::new(Vec::new()),
        });
        if counters.dir.is_some() {
            register(counters.clone());
        }
        counters
    }

    /// Adds `n` to counter `index` (one of [`port`]).
    #[inline]
    pub fn add(&self, index: usize, n: u64) {
        self.values[index].fetch_add(n, Ordering::Relaxed);
    }

    /// Counts one transfer of `bytes` payload in packets of at most `mtu` bytes.
    #[inline]
    pub fn add_transfer(&self, bytes_index: usize, pkts_index: usize, bytes: u64, mtu: u32) {
        self.add(bytes_index, bytes);
        self.add(pkts_index, bytes.div_ceil(u64::from(mtu.max(1))).max(1));
    }

    /// Current value of counter `index`.
    pub fn get(&self, index: usize) -> u64 {
        self.values[index].load(Ordering::Relaxed)
    }

    /// Rewrites the counter files whose values changed since they were last written.
    fn write_changed(&self) {
        let Some(dir) = &self.dir else { return };
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        let now: Vec<u64> = (0..PORT_COUNTERS.len()).map(|i| self.get(i)).collect();
        for (i, name) in PORT_COUNTERS.iter().enumerate() {
            if written.get(i) == Some(&now[i]) {
                continue;
            }
            // Replaced by rename, so that a reader never sees a half-written number.
            let tmp = dir.join(format!(".{name}.{}", std::process::id()));
            let value = format!("{}\n", now[i]);
            if std::fs::write(&tmp, value).is_ok() && std::fs::rename(&tmp, dir.join(name)).is_err()
            {
                let _ = std::fs::remove_file(&tmp);
            }
        }
        *written = now;
    }
}

/// Maps `path` (created with room for every port counter) shared and returns its counters.
fn map_shared(path: &Path) -> std::io::Result<&'static [AtomicU64]> {
    use std::os::unix::io::AsRawFd;
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    let len = PORT_COUNTERS.len() * 8;
    if file.metadata()?.len() < len as u64 {
        // Extending with zeros; never shrinks what another process already counted.
        file.set_len(len as u64)?;
    }
    // SAFETY: a fresh shared mapping of `len` bytes of an open file; no Rust reference
    // exists to that memory yet.
    let ptr = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the mapping is page-aligned, `len` bytes long, stays mapped for the rest of
    // the process (never unmapped), and is only accessed through atomics, here and in
    // every other process that maps the file.
    Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<AtomicU64>(), PORT_COUNTERS.len()) })
}

/// Counters whose files this process keeps current.
fn registry() -> &'static Mutex<Vec<Arc<PortCounters>>> {
    static ALL: OnceLock<Mutex<Vec<Arc<PortCounters>>>> = OnceLock::new();
    ALL.get_or_init(|| {
        let _ = std::thread::Builder::new()
            .name("efa-sim-counters".into())
            .spawn(|| loop {
                std::thread::sleep(std::time::Duration::from_millis(LIFESPAN_MS));
                write_all();
            });
        static AT_EXIT: std::sync::Once = std::sync::Once::new();
        // SAFETY: registers a plain extern "C" function with no preconditions.
        AT_EXIT.call_once(|| unsafe {
            libc::atexit(write_at_exit);
        });
        Mutex::new(Vec::new())
    })
}

fn register(c: Arc<PortCounters>) {
    registry().lock().unwrap_or_else(|e| e.into_inner()).push(c);
}

fn write_all() {
    let all = registry().lock().unwrap_or_else(|e| e.into_inner()).clone();
    for c in all {
        c.write_changed();
    }
}

extern "C" fn write_at_exit() {
    write_all();
}
