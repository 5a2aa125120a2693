//! Helpers libibverbs exports besides the verbs: strings, rate conversions, fork
//! control, sysfs access, AH-from-WC (kernel-struct marshalling: [`super::marshall`]).

use super::layout::{AhAttr, Wc};
use super::set_errno;
use core::ffi::{c_char, c_int, c_void, CStr};
use core::ptr;
use efa_sys::verbs as v;
use libc::EINVAL;

macro_rules! cstrs {
    ($($s:literal),* $(,)?) => { [$(concat!($s, "\0")),*] };
}

fn table_str(table: &'static [&'static str], i: usize, unknown: &'static str) -> *const c_char {
    table.get(i).copied().unwrap_or(unknown).as_ptr() as *const c_char
}

const WC_STATUS: [&str; 24] = cstrs!(
    "success",
    "local length error",
    "local QP operation error",
    "local EE context operation error",
    "local protection error",
    "Work Request Flushed Error",
    "memory management operation error",
    "bad response error",
    "local access error",
    "remote invalid request error",
    "remote access error",
    "remote operation error",
    "transport retry counter exceeded",
    "RNR retry counter exceeded",
    "local RDD violation error",
    "remote invalid RD request",
    "aborted error",
    "invalid EE context number",
    "invalid EE context state",
    "fatal error",
    "response timeout error",
    "general error",
    "TM error",
    "TM software rendezvous",
);

unsafe extern "C" fn wc_status_str(status: u32) -> *const c_char {
    table_str(&WC_STATUS, status as usize, "unknown\0")
}
export!("IBVERBS_1.1", ibv_wc_status_str => wc_status_str);

const NODE_TYPE: [&str; 8] = cstrs!(
    "unknown",
    "InfiniBand channel adapter",
    "InfiniBand switch",
    "InfiniBand router",
    "iWARP NIC",
    "usNIC",
    "usNIC UDP",
    "unspecified",
);

unsafe extern "C" fn node_type_str(t: c_int) -> *const c_char {
    if t < 0 {
        return c"unknown".as_ptr();
    }
    table_str(&NODE_TYPE, t as usize, "unknown\0")
}
export!("IBVERBS_1.1", ibv_node_type_str => node_type_str);

const PORT_STATE: [&str; 6] = cstrs!(
    "no state change (NOP)",
    "down",
    "init",
    "armed",
    "active",
    "active defer"
);

unsafe extern "C" fn port_state_str(s: u32) -> *const c_char {
    table_str(&PORT_STATE, s as usize, "unknown\0")
}
export!("IBVERBS_1.1", ibv_port_state_str => port_state_str);

const EVENT_TYPE: [&str; 20] = cstrs!(
    "CQ error",
    "local work queue catastrophic error",
    "invalid request local work queue error",
    "local access violation work queue error",
    "communication established",
    "send queue drained",
    "path migrated",
    "path migration request error",
    "local catastrophic error",
    "port active",
    "port error",
    "LID change",
    "P_Key change",
    "SM change",
    "SRQ catastrophic error",
    "SRQ limit reached",
    "last WQE reached",
    "client reregistration",
    "GID table change",
    "WQ fatal",
);

unsafe extern "C" fn event_type_str(e: u32) -> *const c_char {
    table_str(&EVENT_TYPE, e as usize, "unknown\0")
}
export!("IBVERBS_1.1", ibv_event_type_str => event_type_str);

/// (ibv_rate, multiple of 2.5 Gb/s or -1, Mb/s).
const RATES: [(c_int, c_int, c_int); 23] = [
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (4, 12, 30000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, -1, 14062),
    (12, -1, 56250),
    (13, -1, 112500),
    (14, -1, 168750),
    (15, -1, 25781),
    (16, -1, 103125),
    (17, -1, 206250),
    (18, -1, 309375),
    (19, -1, 28125),
    (20, -1, 53125),
    (21, -1, 425000),
    (22, -1, 637500),
    (23, -1, 850000),
    (24, -1, 1275000),
];

unsafe extern "C" fn rate_to_mult(rate: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.0 == rate)
        .map(|r| r.1)
        .unwrap_or(-1)
}
export!("IBVERBS_1.0", ibv_rate_to_mult => rate_to_mult);

unsafe extern "C" fn mult_to_rate(mult: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.1 == mult && mult > 0)
        .map(|r| r.0)
        .unwrap_or(0)
}
export!("IBVERBS_1.0", mult_to_ibv_rate => mult_to_rate);

unsafe extern "C" fn rate_to_mbps(rate: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.0 == rate)
        .map(|r| r.2)
        .unwrap_or(-1)
}
export!("IBVERBS_1.1", ibv_rate_to_mbps => rate_to_mbps);

unsafe extern "C" fn mbps_to_rate(mbps: c_int) -> c_int {
    RATES.iter().find(|r| r.2 == mbps).map(|r| r.0).unwrap_or(0)
}
export!("IBVERBS_1.1", mbps_to_ibv_rate => mbps_to_rate);

/// The kernel handles fork for us (`IBV_FORK_UNNEEDED`), so fork init is a no-op.
unsafe extern "C" fn fork_init() -> c_int {
    0
}
export!("IBVERBS_1.1", ibv_fork_init => fork_init);

unsafe extern "C" fn is_fork_initialized() -> c_int {
    2 // IBV_FORK_UNNEEDED
}
export!("IBVERBS_1.13", ibv_is_fork_initialized => is_fork_initialized);

unsafe extern "C" fn fork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}
export!("IBVERBS_1.1", ibv_dofork_range => fork_range);
export!("IBVERBS_1.1", ibv_dontfork_range => fork_range);

/// Providers register through a private interface; this public hook is obsolete.
unsafe extern "C" fn register_driver(_name: *const c_char, _init: *mut c_void) {}
export!(compat "IBVERBS_1.1", ibv_register_driver => register_driver);

/// EFA's link layer is not Ethernet: no L2 address to resolve.
unsafe extern "C" fn resolve_eth_l2_from_gid() -> c_int {
    EINVAL
}
export!("IBVERBS_1.1", ibv_resolve_eth_l2_from_gid => resolve_eth_l2_from_gid);

// --- sysfs -------------------------------------------------------------------------------

unsafe extern "C" fn get_sysfs_path() -> *const c_char {
    crate::sysfs::root().as_ptr()
}
export!("IBVERBS_1.0", ibv_get_sysfs_path => get_sysfs_path);

/// Reads `dir/file` into `buf` (at most `size` bytes), strips a trailing newline,
/// NUL-terminates when room is left; returns the length or -1 with errno.
unsafe extern "C" fn read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    if dir.is_null() || file.is_null() || buf.is_null() {
        set_errno(EINVAL);
        return -1;
    }
    // SAFETY: NUL-terminated caller strings.
    let (d, f) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
    let path = format!("{}/{}", d.to_string_lossy(), f.to_string_lossy());
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EIO));
            return -1;
        }
    };
    let mut n = data.len().min(size);
    // SAFETY: buf holds size bytes.
    unsafe { ptr::copy_nonoverlapping(data.as_ptr(), buf as *mut u8, n) };
    if n > 0 && data[n - 1] == b'\n' {
        n -= 1;
    }
    if n < size {
        // SAFETY: n < size.
        unsafe { *buf.add(n) = 0 };
    }
    n as c_int
}
export!("IBVERBS_1.0", ibv_read_sysfs_file => read_sysfs_file);

// --- AH from a receive completion ---------------------------------------------------------

const IBV_WC_GRH: u32 = v::ibv_wc_flags::IBV_WC_GRH.0;

unsafe extern "C" fn init_ah_from_wc(
    _ctx: *mut v::ibv_context,
    port: u8,
    wc: *const Wc,
    grh: *const u8,
    ah: *mut AhAttr,
) -> c_int {
    if wc.is_null() || ah.is_null() {
        return -1;
    }
    // SAFETY: caller structs; a GRH (40 B) is read only when the WC says one is present.
    unsafe {
        ptr::write_bytes(ah, 0, 1);
        let (w, a) = (&*wc, &mut *ah);
        a.dlid = w.slid;
        a.sl = w.sl;
        a.src_path_bits = w.dlid_path_bits;
        a.port_num = port;
        if w.wc_flags & IBV_WC_GRH != 0 && !grh.is_null() {
            a.is_global = 1;
            // GRH: sgid at byte 8, dgid at byte 24; the reply goes to the sender's GID.
            ptr::copy_nonoverlapping(grh.add(8), a.dgid.as_mut_ptr(), 16);
            a.hop_limit = 0xff;
        }
    }
    0
}
export!("IBVERBS_1.1", ibv_init_ah_from_wc => init_ah_from_wc);

unsafe extern "C" fn create_ah_from_wc(
    pd: *mut v::ibv_pd,
    wc: *const Wc,
    grh: *const u8,
    port: u8,
) -> *mut v::ibv_ah {
    if pd.is_null() {
        return super::null_with(EINVAL);
    }
    // SAFETY: zeroed plain data; forwarded caller contract.
    unsafe {
        let mut a: AhAttr = core::mem::zeroed();
        if init_ah_from_wc((*pd).context, port, wc, grh, &mut a) != 0 {
            return super::null_with(EINVAL);
        }
        super::pd::create_ah(pd, &mut a)
    }
}
export!("IBVERBS_1.1", ibv_create_ah_from_wc => create_ah_from_wc);
