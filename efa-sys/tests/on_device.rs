//! efa-sys against the selected device (efa-sim unless real EFA is present; `EFA_SIM=0/1`):
//! linked and run-time resolved efadv functions, the verbs additions and the extended-verbs
//! dispatch, through real library calls.

use efa_sys::efadv::*;
use efa_sys::vendor;
use efa_sys::verbs::*;
use std::ffi::CStr;
use std::mem::{size_of, zeroed};
use std::ptr::null;

/// Whether the tests were built for the software device (a function so the checks that depend
/// on it read as run-time conditions).
fn on_software_device() -> bool {
    std::hint::black_box(efa_sim_select::SOFTWARE_DEVICE)
}

/// An opened device context, closed on drop.
struct Device {
    list: *mut *mut ibv_device,
    ctx: *mut ibv_context,
}

impl Device {
    fn open_first() -> Device {
        let mut n = 0;
        // SAFETY: `n` is a valid out-pointer.
        let list = unsafe { ibv_get_device_list(&mut n) };
        assert!(
            !list.is_null() && n >= 1,
            "no RDMA device (sim selected: {})",
            efa_sim_select::SOFTWARE_DEVICE
        );
        // SAFETY: `list` holds `n >= 1` devices.
        let ctx = unsafe { ibv_open_device(*list) };
        assert!(!ctx.is_null(), "ibv_open_device failed");
        Device { list, ctx }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: both came from the calls in `open_first` and are released once.
        unsafe {
            ibv_close_device(self.ctx);
            ibv_free_device_list(self.list);
        }
    }
}

fn query_device(ctx: *mut ibv_context) -> ibv_device_attr {
    // SAFETY: all-zero is a valid attr; `ctx` is live.
    let mut attr: ibv_device_attr = unsafe { zeroed() };
    // SAFETY: the callers pass `Device::ctx`, live while the `Device` is; `attr` is a live,
    // writable ibv_device_attr.
    assert_eq!(unsafe { ibv_query_device(ctx, &mut attr) }, 0);
    attr
}

/// `efadv_query_device` with the full rdma-core 65 struct; fails the test unless it returns 0.
fn efa_device_attr(ctx: *mut ibv_context) -> efadv_device_attr {
    let mut attr = efadv_device_attr::default();
    // SAFETY: live context; `attr` is valid for its full size.
    let rc = unsafe { efadv_query_device(ctx, &mut attr, size_of::<efadv_device_attr>() as u32) };
    assert_eq!(rc, 0);
    attr
}

/// Extended-CQ attributes for `cqe` entries reporting byte length and immediate data.
fn cq_attr_with_len_and_imm(cqe: u32) -> ibv_cq_init_attr_ex {
    // SAFETY: all-zero is a valid attr.
    let mut cq_attr: ibv_cq_init_attr_ex = unsafe { zeroed() };
    cq_attr.cqe = cqe;
    cq_attr.wc_flags = u64::from(
        (ibv_create_cq_wc_flags::IBV_WC_EX_WITH_BYTE_LEN
            | ibv_create_cq_wc_flags::IBV_WC_EX_WITH_IMM)
            .0,
    );
    cq_attr
}

#[test]
fn runs_on_the_selected_efa_device() {
    let dev = Device::open_first();
    let attr = query_device(dev.ctx);
    // SAFETY: fw_ver is a NUL-terminated array filled by the provider.
    let fw = unsafe { CStr::from_ptr(attr.fw_ver.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    assert!(
        efa_sim_select::fw_matches_selection(&fw),
        "fw_ver {fw:?} does not match the selection"
    );
    assert!(
        vendor::is_efa_device(attr.vendor_id, attr.vendor_part_id),
        "not an EFA device: vendor {:#x} part {:#x}",
        attr.vendor_id,
        attr.vendor_part_id
    );
}

#[test]
fn linked_efadv_query_device_fills_the_rdma_core_65_layout() {
    let dev = Device::open_first();
    let attr = efa_device_attr(dev.ctx);
    assert!(attr.max_sq_wr > 0 && attr.max_rq_wr > 0, "{attr:?}");
    assert!(attr.max_sq_sge > 0 && attr.max_rq_sge > 0, "{attr:?}");
    assert!(attr.inline_buf_size > 0, "{attr:?}");
    // rdma-core 63+: inline_buf_size_ex equals inline_buf_size without the extended value.
    assert!(attr.inline_buf_size_ex >= attr.inline_buf_size, "{attr:?}");
    let device_caps = query_device(dev.ctx);
    assert!(device_caps.max_qp > 0);

    // An `inlen` that does not even cover `inline_buf_size` is rejected.
    let mut short = efadv_device_attr::default();
    assert_eq!(
        // SAFETY: as above; the provider writes at most `inlen` bytes.
        unsafe { efadv_query_device(dev.ctx, &mut short, 8) },
        libc::EINVAL
    );
}

#[test]
fn gid_queries_agree_with_ibv_query_gid() {
    let dev = Device::open_first();
    // SAFETY: all-zero is a valid gid; `dev.ctx` is live.
    let mut gid: ibv_gid = unsafe { zeroed() };
    // SAFETY: `dev.ctx` is live; port 1, index 0 exist on EFA; `gid` is live and writable.
    assert_eq!(unsafe { ibv_query_gid(dev.ctx, 1, 0, &mut gid) }, 0);
    // SAFETY: `raw` is the byte view of the union.
    let raw = unsafe { gid.raw };
    assert_ne!(raw, [0; 16], "device GID is all zero");

    // SAFETY: all-zero is a valid entry; `dev.ctx` is live.
    let mut entry: ibv_gid_entry = unsafe { zeroed() };
    // SAFETY: `dev.ctx` is live; `entry` is a live, writable ibv_gid_entry; flags 0.
    assert_eq!(unsafe { ibv_query_gid_ex(dev.ctx, 1, 0, &mut entry, 0) }, 0);
    // SAFETY: as above.
    assert_eq!(unsafe { entry.gid.raw }, raw);
    assert_eq!((entry.gid_index, entry.port_num), (0, 1));

    // SAFETY: all-zero entries are valid; the buffer holds 4.
    let mut table: [ibv_gid_entry; 4] = unsafe { zeroed() };
    // SAFETY: `dev.ctx` is live; the pointer and length describe `table`, so the library
    // writes at most its 4 entries; flags 0.
    let n = unsafe { ibv_query_gid_table(dev.ctx, table.as_mut_ptr(), table.len(), 0) };
    assert!(n >= 1, "ibv_query_gid_table returned {n}");
    // SAFETY: as above.
    assert_eq!(unsafe { table[0].gid.raw }, raw);
}

#[test]
fn extended_verbs_reach_the_provider() {
    let dev = Device::open_first();
    // SAFETY: all-zero is a valid attr; `dev.ctx` is live.
    let mut attr_ex: ibv_device_attr_ex = unsafe { zeroed() };
    assert_eq!(
        // SAFETY: `dev.ctx` is live; a null input means no extended request; `attr_ex`
        // is a live, writable ibv_device_attr_ex.
        unsafe { ibv_query_device_ex(dev.ctx, null(), &mut attr_ex) },
        0
    );
    assert_eq!(attr_ex.orig_attr.vendor_id, vendor::EFA_VENDOR_ID);

    // SAFETY: all-zero is a valid attr; `dev.ctx` is live.
    let mut port: ibv_port_attr = unsafe { zeroed() };
    // SAFETY: `dev.ctx` is live; port 1 exists; `port` is a live, writable ibv_port_attr.
    assert_eq!(unsafe { ibv_query_port(dev.ctx, 1, &mut port) }, 0);
    assert_eq!(port.state, ibv_port_state::IBV_PORT_ACTIVE);
    assert!(
        port.gid_tbl_len >= 1 && port.max_msg_sz > 0,
        "gid_tbl_len {} max_msg_sz {}",
        port.gid_tbl_len,
        port.max_msg_sz
    );

    let mut cq_attr = cq_attr_with_len_and_imm(16);
    // SAFETY: live context, valid attr.
    let cq = unsafe { ibv_create_cq_ex(dev.ctx, &mut cq_attr) };
    assert!(
        !cq.is_null(),
        "ibv_create_cq_ex: {}",
        std::io::Error::last_os_error()
    );
    // rdma-sys 0.3's own version never finds the op (abi_compat compared with u32::MAX).
    // SAFETY: as above; it returns before calling anything.
    assert!(unsafe { efa_sys::rdma_sys::ibv_create_cq_ex(dev.ctx, &mut cq_attr) }.is_none());
    // SAFETY: `cq` is live and destroyed once.
    assert_eq!(unsafe { ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) }, 0);
}

#[test]
fn efadv_cq_and_qp_objects() {
    let dev = Device::open_first();
    let caps = efa_device_attr(dev.ctx);

    let mut cq_attr = cq_attr_with_len_and_imm(16);
    let with_sgid = caps.device_caps & EFADV_DEVICE_ATTR_CAPS_CQ_WITH_SGID != 0;
    let mut efa_cq_attr = efadv_cq_init_attr {
        wc_flags: if with_sgid { EFADV_WC_EX_WITH_SGID } else { 0 },
        ..Default::default()
    };
    // SAFETY: live context, valid attrs, `inlen` is the struct size.
    let cq = unsafe {
        efadv_create_cq(
            dev.ctx,
            &mut cq_attr,
            &mut efa_cq_attr,
            size_of::<efadv_cq_init_attr>() as u32,
        )
    };
    assert!(
        !cq.is_null(),
        "efadv_create_cq: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `cq` is a live EFA CQ.
    let efa_cq = unsafe { efadv_cq_from_ibv_cq_ex(cq) };
    assert!(!efa_cq.is_null());
    // SAFETY: `efa_cq` points into the live CQ.
    assert_eq!(unsafe { (*efa_cq).wc_read_sgid.is_some() }, with_sgid);

    // SAFETY: live context.
    let pd = unsafe { ibv_alloc_pd(dev.ctx) };
    assert!(!pd.is_null());
    // SAFETY: all-zero is a valid attr.
    let mut qp_attr: ibv_qp_init_attr_ex = unsafe { zeroed() };
    qp_attr.qp_type = ibv_qp_type::IBV_QPT_DRIVER;
    // SAFETY: an ibv_cq_ex starts with its ibv_cq.
    let base_cq = unsafe { ibv_cq_ex_to_cq(cq) };
    qp_attr.send_cq = base_cq;
    qp_attr.recv_cq = base_cq;
    qp_attr.cap.max_send_wr = 8;
    qp_attr.cap.max_recv_wr = 8;
    qp_attr.cap.max_send_sge = 1;
    qp_attr.cap.max_recv_sge = 1;
    qp_attr.pd = pd;
    qp_attr.comp_mask = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0
        | ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0;
    qp_attr.send_ops_flags = u64::from(ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_SEND.0);
    let mut efa_qp_attr = efadv_qp_init_attr {
        driver_qp_type: EFADV_QP_DRIVER_TYPE_SRD,
        ..Default::default()
    };
    // SAFETY: live context, valid attrs, `inlen` is the struct size.
    let qp = unsafe {
        efadv_create_qp_ex(
            dev.ctx,
            &mut qp_attr,
            &mut efa_qp_attr,
            size_of::<efadv_qp_init_attr>() as u32,
        )
    };
    assert!(
        !qp.is_null(),
        "efadv_create_qp_ex: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: live QP created with send ops.
    let qpx = unsafe { ibv_qp_to_qp_ex(qp) };
    assert!(!qpx.is_null());
    // SAFETY: `qpx` is a live EFA extended QP.
    match unsafe { efadv_qp_from_ibv_qp_ex(qpx) } {
        Ok(efa_qp) => {
            assert!(!efa_qp.is_null());
            // Not requested at creation, so the hint pointer stays unset and the helper says so.
            // SAFETY: `efa_qp` points into the live QP.
            assert!(!unsafe { efadv_wr_set_processing_hints(efa_qp, 0) });
        }
        Err(not_provided) => assert!(!on_software_device(), "{not_provided}"),
    }

    // SAFETY: each object is live and destroyed once, QP before CQ and PD.
    unsafe {
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
    }
}

#[test]
fn run_time_resolved_queue_depths() {
    let dev = Device::open_first();
    let caps = efa_device_attr(dev.ctx);

    let mut sq = efadv_sq_depth_attr {
        max_send_sge: 1,
        max_rdma_sge: 1,
        ..Default::default()
    };
    // SAFETY: live context, valid attr, `inlen` is the struct size.
    let sq_depth = unsafe {
        efadv_get_max_sq_depth(dev.ctx, &mut sq, size_of::<efadv_sq_depth_attr>() as u32)
    };
    let mut rq = efadv_rq_depth_attr {
        max_recv_sge: 1,
        ..Default::default()
    };
    // SAFETY: as above.
    let rq_depth = unsafe {
        efadv_get_max_rq_depth(dev.ctx, &mut rq, size_of::<efadv_rq_depth_attr>() as u32)
    };
    match (sq_depth, rq_depth) {
        (Ok(sq_depth), Ok(rq_depth)) => {
            assert!(
                sq_depth > 0 && sq_depth as u32 <= caps.max_sq_wr,
                "sq depth {sq_depth}, {caps:?}"
            );
            assert!(
                rq_depth > 0 && rq_depth as u32 <= caps.max_rq_wr,
                "rq depth {rq_depth}, {caps:?}"
            );
            // A request beyond the device limit is a negative errno, not a NotProvided.
            let mut too_many = efadv_rq_depth_attr {
                max_recv_sge: u32::from(caps.max_rq_sge) + 1,
                ..Default::default()
            };
            // SAFETY: as above.
            let r = unsafe {
                efadv_get_max_rq_depth(
                    dev.ctx,
                    &mut too_many,
                    size_of::<efadv_rq_depth_attr>() as u32,
                )
            };
            assert_eq!(r, Ok(-libc::EINVAL));
        }
        (sq, rq) => {
            // Only a real libefa older than rdma-core 63 may lack them; the software device has them.
            assert!(!on_software_device(), "{sq:?} {rq:?}");
            assert_eq!(sq.unwrap_err().version_node, "EFA_1.5");
            assert_eq!(rq.unwrap_err().version_node, "EFA_1.5");
        }
    }
}
