//! The kernel-struct marshalling helpers libibverbs exports (`ibv_copy_*_kern`):
//! `rdma/ib_user_verbs.h` and `rdma/ib_user_sa.h` layouts to and from the verbs structs.

use super::layout::AhAttr;
use core::ffi::c_int;
use efa_sys::verbs as v;

/// `struct ib_uverbs_ah_attr` (32 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernAhAttr {
    dgid: [u8; 16],
    flow_label: u32,
    sgid_index: u8,
    hop_limit: u8,
    traffic_class: u8,
    reserved0: u8,
    dlid: u16,
    sl: u8,
    src_path_bits: u8,
    static_rate: u8,
    is_global: u8,
    port_num: u8,
    reserved: u8,
}
static_assertions::const_assert_eq!(core::mem::size_of::<KernAhAttr>(), 32);

/// `struct ib_uverbs_qp_attr` (144 B).
#[repr(C)]
pub struct KernQpAttr {
    qp_attr_mask: u32,
    qp_state: u32,
    cur_qp_state: u32,
    path_mtu: u32,
    path_mig_state: u32,
    qkey: u32,
    rq_psn: u32,
    sq_psn: u32,
    dest_qp_num: u32,
    qp_access_flags: u32,
    ah_attr: KernAhAttr,
    alt_ah_attr: KernAhAttr,
    max_send_wr: u32,
    max_recv_wr: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
    max_inline_data: u32,
    pkey_index: u16,
    alt_pkey_index: u16,
    en_sqd_async_notify: u8,
    sq_draining: u8,
    max_rd_atomic: u8,
    max_dest_rd_atomic: u8,
    min_rnr_timer: u8,
    port_num: u8,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    alt_port_num: u8,
    alt_timeout: u8,
    reserved: [u8; 5],
}
static_assertions::const_assert_eq!(core::mem::size_of::<KernQpAttr>(), 144);

/// `struct ib_user_path_rec` (64 B).
#[repr(C)]
pub struct KernPathRec {
    dgid: [u8; 16],
    sgid: [u8; 16],
    dlid: u16,
    slid: u16,
    raw_traffic: u32,
    flow_label: u32,
    reversible: u32,
    mtu: u32,
    pkey: u16,
    hop_limit: u8,
    traffic_class: u8,
    numb_path: u8,
    sl: u8,
    mtu_selector: u8,
    rate_selector: u8,
    rate: u8,
    packet_life_time_selector: u8,
    packet_life_time: u8,
    preference: u8,
}
static_assertions::const_assert_eq!(core::mem::size_of::<KernPathRec>(), 64);

/// `struct ibv_sa_path_rec` (sa.h).
#[repr(C)]
pub struct SaPathRec {
    dgid: [u8; 16],
    sgid: [u8; 16],
    dlid: u16,
    slid: u16,
    raw_traffic: c_int,
    flow_label: u32,
    hop_limit: u8,
    traffic_class: u8,
    reversible: c_int,
    numb_path: u8,
    pkey: u16,
    sl: u8,
    mtu_selector: u8,
    mtu: u8,
    rate_selector: u8,
    rate: u8,
    packet_life_time_selector: u8,
    packet_life_time: u8,
    preference: u8,
}
static_assertions::const_assert_eq!(
    core::mem::size_of::<SaPathRec>(),
    core::mem::size_of::<v::ibv_sa_path_rec>()
);

fn ah_from_kern(d: &mut AhAttr, s: &KernAhAttr) {
    d.dgid = s.dgid;
    d.flow_label = s.flow_label;
    d.sgid_index = s.sgid_index;
    d.hop_limit = s.hop_limit;
    d.traffic_class = s.traffic_class;
    d.dlid = s.dlid;
    d.sl = s.sl;
    d.src_path_bits = s.src_path_bits;
    d.static_rate = s.static_rate;
    d.is_global = s.is_global;
    d.port_num = s.port_num;
}

unsafe extern "C" fn copy_ah_attr_from_kern(dst: *mut AhAttr, src: *const KernAhAttr) {
    // SAFETY: caller structs.
    unsafe { ah_from_kern(&mut *dst, &*src) }
}
export!("IBVERBS_1.1", ibv_copy_ah_attr_from_kern => copy_ah_attr_from_kern);

unsafe extern "C" fn copy_qp_attr_from_kern(dst: *mut v::ibv_qp_attr, src: *const KernQpAttr) {
    // SAFETY: caller structs; ibv_ah_attr has the AhAttr layout (32 B, asserted).
    unsafe {
        let (d, s) = (&mut *dst, &*src);
        d.qp_state = s.qp_state;
        d.cur_qp_state = s.cur_qp_state;
        d.path_mtu = s.path_mtu;
        d.path_mig_state = s.path_mig_state;
        d.qkey = s.qkey;
        d.rq_psn = s.rq_psn;
        d.sq_psn = s.sq_psn;
        d.dest_qp_num = s.dest_qp_num;
        d.qp_access_flags = s.qp_access_flags;
        d.cap.max_send_wr = s.max_send_wr;
        d.cap.max_recv_wr = s.max_recv_wr;
        d.cap.max_send_sge = s.max_send_sge;
        d.cap.max_recv_sge = s.max_recv_sge;
        d.cap.max_inline_data = s.max_inline_data;
        ah_from_kern(
            &mut *(&mut d.ah_attr as *mut v::ibv_ah_attr as *mut AhAttr),
            &s.ah_attr,
        );
        ah_from_kern(
            &mut *(&mut d.alt_ah_attr as *mut v::ibv_ah_attr as *mut AhAttr),
            &s.alt_ah_attr,
        );
        d.pkey_index = s.pkey_index;
        d.alt_pkey_index = s.alt_pkey_index;
        d.en_sqd_async_notify = s.en_sqd_async_notify;
        d.sq_draining = s.sq_draining;
        d.max_rd_atomic = s.max_rd_atomic;
        d.max_dest_rd_atomic = s.max_dest_rd_atomic;
        d.min_rnr_timer = s.min_rnr_timer;
        d.port_num = s.port_num;
        d.timeout = s.timeout;
        d.retry_cnt = s.retry_cnt;
        d.rnr_retry = s.rnr_retry;
        d.alt_port_num = s.alt_port_num;
        d.alt_timeout = s.alt_timeout;
    }
}
export!("IBVERBS_1.0", ibv_copy_qp_attr_from_kern => copy_qp_attr_from_kern);

unsafe extern "C" fn copy_path_rec_from_kern(dst: *mut SaPathRec, src: *const KernPathRec) {
    // SAFETY: caller structs.
    unsafe {
        let (d, s) = (&mut *dst, &*src);
        d.dgid = s.dgid;
        d.sgid = s.sgid;
        d.dlid = s.dlid;
        d.slid = s.slid;
        d.raw_traffic = s.raw_traffic as c_int;
        d.flow_label = s.flow_label;
        d.reversible = s.reversible as c_int;
        d.mtu = s.mtu as u8;
        d.pkey = s.pkey;
        d.hop_limit = s.hop_limit;
        d.traffic_class = s.traffic_class;
        d.numb_path = s.numb_path;
        d.sl = s.sl;
        d.mtu_selector = s.mtu_selector;
        d.rate_selector = s.rate_selector;
        d.rate = s.rate;
        d.packet_life_time_selector = s.packet_life_time_selector;
        d.packet_life_time = s.packet_life_time;
        d.preference = s.preference;
    }
}
export!("IBVERBS_1.0", ibv_copy_path_rec_from_kern => copy_path_rec_from_kern);

unsafe extern "C" fn copy_path_rec_to_kern(dst: *mut KernPathRec, src: *const SaPathRec) {
    // SAFETY: caller structs.
    unsafe {
        let (d, s) = (&mut *dst, &*src);
        d.dgid = s.dgid;
        d.sgid = s.sgid;
        d.dlid = s.dlid;
        d.slid = s.slid;
        d.raw_traffic = s.raw_traffic as u32;
        d.flow_label = s.flow_label;
        d.reversible = s.reversible as u32;
        d.mtu = u32::from(s.mtu);
        d.pkey = s.pkey;
        d.hop_limit = s.hop_limit;
        d.traffic_class = s.traffic_class;
        d.numb_path = s.numb_path;
        d.sl = s.sl;
        d.mtu_selector = s.mtu_selector;
        d.rate_selector = s.rate_selector;
        d.rate = s.rate;
        d.packet_life_time_selector = s.packet_life_time_selector;
        d.packet_life_time = s.packet_life_time;
        d.preference = s.preference;
    }
}
export!("IBVERBS_1.0", ibv_copy_path_rec_to_kern => copy_path_rec_to_kern);
