//! `Context::query_port` and `Qp::query` report what the device's own verbs report: each
//! field is compared with a direct C call of the same verb on the same object.

mod common;
use common::*;
use efa_typestate::sys::verbs::{self as v, ibv_qp_attr_mask as Mask};
use efa_typestate::*;

#[test]
fn port_attr_is_the_devices_ibv_port_attr() {
    let ctx = open(0);
    let port = ctx.query_port(1).unwrap();
    // SAFETY: all-zero is a valid ibv_port_attr (integers only).
    let mut raw: v::ibv_port_attr = unsafe { core::mem::zeroed() };
    // SAFETY: live context, writable out-struct.
    let rc = unsafe { v::ibv_query_port(ctx.as_ptr(), 1, &mut raw) };
    assert_eq!(rc, 0);
    let want = PortAttr {
        state: raw.state,
        phys_state: raw.phys_state,
        max_msg_sz: raw.max_msg_sz,
        max_mtu: raw.max_mtu,
        active_mtu: raw.active_mtu,
        gid_tbl_len: raw.gid_tbl_len,
        pkey_tbl_len: raw.pkey_tbl_len,
        port_cap_flags: raw.port_cap_flags,
        lid: raw.lid,
        sm_lid: raw.sm_lid,
        lmc: raw.lmc,
        max_vl_num: raw.max_vl_num,
        link_layer: raw.link_layer,
        active_width: raw.active_width,
        active_speed: raw.active_speed,
    };
    assert_eq!(port, want);
    // The device reports a real table and MTU (not zeroes left by a short copy).
    assert!(port.pkey_tbl_len >= 1 && port.max_mtu >= port.active_mtu && port.max_mtu > 0);
}

#[test]
fn qp_attr_has_the_devices_port_and_pkey_index() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(CqOptions::new(64)).unwrap();
    let qp = pd
        .create_qp(&cq, &cq, &QpConfig::srd().depth(8, 8))
        .unwrap()
        .prepare(0x77, None)
        .unwrap();
    let a = qp.query().unwrap();
    // SAFETY: all-zero is a valid ibv_qp_attr / ibv_qp_init_attr (integers, null pointers).
    let (mut raw, mut init): (v::ibv_qp_attr, v::ibv_qp_init_attr) =
        unsafe { (core::mem::zeroed(), core::mem::zeroed()) };
    raw.port_num = 0xee;
    raw.pkey_index = 0xeeee;
    let mask = Mask::IBV_QP_PORT.0 | Mask::IBV_QP_PKEY_INDEX.0;
    // SAFETY: live QP, writable out-structs.
    let rc = unsafe { v::ibv_query_qp(qp.as_ptr(), &mut raw, mask as i32, &mut init) };
    assert_eq!(rc, 0);
    assert_eq!((a.port_num, a.pkey_index), (raw.port_num, raw.pkey_index));
    assert_eq!(a.port_num, 1, "EFA QPs live on port 1");
    assert_eq!((a.state, a.qkey), (QpStateKind::Rts, 0x77));
}

#[test]
fn num_comp_vectors_is_the_devices() {
    in_child(
        "num_comp_vectors_is_the_devices",
        &[("EFA_SIM_PROFILE", "num_comp_vectors=3")],
        || {
            let ctx = open(0);
            assert_eq!(ctx.num_comp_vectors(), 3, "the profile's count");
            // SAFETY: live context; a plain field.
            let raw = unsafe { (*ctx.as_ptr()).num_comp_vectors };
            assert_eq!(i64::from(ctx.num_comp_vectors()), i64::from(raw));
            // The last vector takes a CQ; one past it is the device's to refuse.
            ctx.create_cq(CqOptions::new(64).comp_vector(2)).unwrap();
            assert!(ctx.create_cq(CqOptions::new(64).comp_vector(3)).is_err());
        },
    );
}

#[test]
fn a_status_in_words_is_libibverbs_ibv_wc_status_str() {
    assert_eq!(WcStatus::SUCCESS.description(), "success");
    assert_eq!(
        WcStatus::REM_ACCESS_ERR.description(),
        "remote access error"
    );
    assert_eq!(
        WcStatus::WR_FLUSH_ERR.description(),
        "Work Request Flushed Error"
    );
    assert_eq!(WcStatus::GENERAL_ERR.description(), "general error");
    assert_eq!(WcStatus(1000).description(), "unknown");
}
