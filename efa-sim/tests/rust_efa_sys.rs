//! A Rust consumer through efa-sys (rdma-sys types, efadv bindings) on the software device.
//! The test binary links the system `-libverbs -lefa`; each test re-runs itself in a child
//! process whose `LD_LIBRARY_PATH` selects the stand-in, like any deployed program would.

mod support;

use efa_sys::efadv::*;
use efa_sys::verbs as v;
use std::ffi::CStr;
use std::ptr::null_mut;

const CHILD: &str = "EFA_SIM_RUST_ABI_CHILD";

/// Runs `body` in a child process on the software device.
fn on_device(name: &str, body: fn()) {
    if std::env::var_os(CHILD).is_some() {
        body();
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let mut cmd = support::on_sim(exe);
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1");
    let out = support::run_with_timeout(&mut cmd, 120);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("1 passed"),
        "child did not run the test:\n{stdout}"
    );
    support::assert_no_loader_warnings(name, &out);
}

unsafe fn open(index: usize) -> *mut v::ibv_context {
    let mut n = 0;
    // SAFETY: ibv_get_device_list takes no input besides `n`, a live c_int it writes the
    // device count into.
    let list = unsafe { v::ibv_get_device_list(&mut n) };
    assert!(
        !list.is_null() && n == 2,
        "two software devices expected, got {n}"
    );
    // SAFETY: `list` is non-null and holds `n == 2` device pointers (asserted above); the
    // callers pass `index` 0 or 1, so the read stays inside the array.
    let ctx = unsafe { v::ibv_open_device(*list.add(index)) };
    assert!(!ctx.is_null());
    // SAFETY: `list` came from ibv_get_device_list and is freed once; the opened context
    // keeps its own reference to the device, as verbs allows.
    unsafe { v::ibv_free_device_list(list) };
    ctx
}

#[test]
fn queries_through_rdma_sys_types() {
    // SAFETY: `ctx` is the live context `open` returned, closed only at the end; the name
    // and fw_ver strings are NUL-terminated C strings owned by the device/attr and read
    // while those live; ibv_device_attr and ibv_port_attr are plain C structs (integers
    // and byte arrays) valid when zeroed, and each query gets a live, writable one, with
    // `inlen` for efadv_query_device the full size of the struct passed.
    on_device("queries_through_rdma_sys_types", || unsafe {
        let ctx = open(0);
        let name = CStr::from_ptr(v::ibv_get_device_name((*ctx).device))
            .to_str()
            .unwrap();
        assert_eq!(name, "efa_0");
        let mut attr: v::ibv_device_attr = std::mem::zeroed();
        assert_eq!(v::ibv_query_device(ctx, &mut attr), 0);
        let fw = CStr::from_ptr(attr.fw_ver.as_ptr()).to_str().unwrap();
        assert!(
            fw.starts_with("efa-sim"),
            "running on the software device: {fw}"
        );
        assert_eq!(attr.vendor_id, 0x1d0f);
        let mut port: v::ibv_port_attr = std::mem::zeroed();
        assert_eq!(v::ibv_query_port(ctx, 1, &mut port), 0);
        assert_eq!(port.state, v::ibv_port_state::IBV_PORT_ACTIVE);
        assert_eq!(port.active_mtu, v::ibv_mtu::IBV_MTU_4096);
        let mut ea: efadv_device_attr = Default::default();
        assert_eq!(
            efadv_query_device(
                ctx,
                &mut ea,
                std::mem::size_of::<efadv_device_attr>() as u32
            ),
            0
        );
        assert_eq!(ea.max_sq_sge, 2);
        assert_ne!(ea.device_caps & EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE, 0);
        assert_eq!(v::ibv_close_device(ctx), 0);
    });
}

struct Side {
    ctx: *mut v::ibv_context,
    pd: *mut v::ibv_pd,
    cq: *mut v::ibv_cq_ex,
    qp: *mut v::ibv_qp,
    qpx: *mut v::ibv_qp_ex,
    gid: v::ibv_gid,
}

unsafe fn side(index: usize) -> Side {
    // SAFETY: every verb gets the live ctx/pd/cq/qp created just before (each checked
    // non-null); ibv_cq_init_attr_ex, ibv_qp_init_attr_ex, ibv_qp_attr and ibv_gid are C
    // structs of integers and null pointers, valid when zeroed, and are live and writable
    // for each call; the efadv `inlen`s are the sizes of the structs passed; the qp_ex
    // comes from ibv_qp_to_qp_ex on a QP created with SEND_OPS_FLAGS.
    unsafe {
        let ctx = open(index);
        let pd = v::ibv_alloc_pd(ctx);
        assert!(!pd.is_null());
        let mut ca: v::ibv_cq_init_attr_ex = std::mem::zeroed();
        ca.cqe = 64;
        ca.wc_flags = 0x7f;
        let mut ecq: efadv_cq_init_attr = Default::default();
        let cq = efadv_create_cq(
            ctx,
            &mut ca,
            &mut ecq,
            std::mem::size_of::<efadv_cq_init_attr>() as u32,
        );
        assert!(!cq.is_null());
        let mut qa: v::ibv_qp_init_attr_ex = std::mem::zeroed();
        qa.send_cq = cq.cast();
        qa.recv_cq = cq.cast();
        qa.cap.max_send_wr = 16;
        qa.cap.max_recv_wr = 16;
        qa.cap.max_send_sge = 1;
        qa.cap.max_recv_sge = 1;
        qa.qp_type = v::ibv_qp_type::IBV_QPT_DRIVER;
        qa.comp_mask = 1 | (1 << 6); // PD | SEND_OPS_FLAGS
        qa.pd = pd;
        qa.send_ops_flags = (1 << 0) | (1 << 2); // RDMA_WRITE | SEND
        let mut ea = efadv_qp_init_attr {
            driver_qp_type: EFADV_QP_DRIVER_TYPE_SRD,
            ..Default::default()
        };
        let qp = efadv_create_qp_ex(
            ctx,
            &mut qa,
            &mut ea,
            std::mem::size_of::<efadv_qp_init_attr>() as u32,
        );
        assert!(
            !qp.is_null(),
            "efadv_create_qp_ex: {}",
            std::io::Error::last_os_error()
        );
        let qpx = v::ibv_qp_to_qp_ex(qp);
        assert!(!qpx.is_null());
        let mut a: v::ibv_qp_attr = std::mem::zeroed();
        a.qp_state = v::ibv_qp_state::IBV_QPS_INIT;
        a.port_num = 1;
        a.qkey = 0x1234;
        assert_eq!(v::ibv_modify_qp(qp, &mut a, 1 | 16 | 32 | 64), 0);
        a.qp_state = v::ibv_qp_state::IBV_QPS_RTR;
        assert_eq!(v::ibv_modify_qp(qp, &mut a, 1), 0);
        a.qp_state = v::ibv_qp_state::IBV_QPS_RTS;
        assert_eq!(v::ibv_modify_qp(qp, &mut a, 1 | (1 << 16)), 0);
        let mut gid: v::ibv_gid = std::mem::zeroed();
        assert_eq!(v::ibv_query_gid(ctx, 1, 0, &mut gid), 0);
        Side {
            ctx,
            pd,
            cq,
            qp,
            qpx,
            gid,
        }
    }
}

unsafe fn poll_one(cq: *mut v::ibv_cq_ex) -> (u32, u64, u32) {
    // SAFETY: the caller passes a live cq_ex from efadv_create_cq; its start_poll,
    // read_opcode and end_poll pointers are unwrapped (checked) before the call; `pa` is a
    // live poll attr with comp_mask 0; status/wr_id/read_opcode are read only after a
    // successful start_poll, and end_poll closes that session exactly once.
    unsafe {
        let start = (*cq).start_poll.unwrap();
        let mut pa = v::ibv_poll_cq_attr { comp_mask: 0 };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let r = start(cq, &mut pa);
            if r == 0 {
                break;
            }
            assert_eq!(r, libc::ENOENT);
            assert!(std::time::Instant::now() < deadline, "no completion");
            std::thread::yield_now();
        }
        let got = ((*cq).status, (*cq).wr_id, ((*cq).read_opcode.unwrap())(cq));
        ((*cq).end_poll.unwrap())(cq);
        got
    }
}

#[test]
fn srd_send_and_rdma_write_through_qp_ex_pointers() {
    on_device(
        "srd_send_and_rdma_write_through_qp_ex_pointers",
        // SAFETY: `a` and `b` hold live ctx/pd/cq/qp/qpx from `side`, destroyed only at the
        // end, after the AHs and MRs that use them; `abuf`/`bbuf` are registered and
        // outlive their MRs and every posted WR (each WR is polled to completion before the
        // buffers are read or the MRs deregistered), and all SGEs/RDMA ranges lie inside
        // the 4096-byte buffers; `sge`/`rwr`/`bad` live across post_recv, and
        // ibv_ah_attr/ibv_recv_wr are valid zeroed; every provider function pointer is
        // unwrapped (checked) before it is called, SEND and RDMA_WRITE being the ops the
        // QPs were created with; the qp_ex borrow `q` is the only access to `*a.qpx`.
        || unsafe {
            let (a, b) = (side(0), side(1));
            let mut abuf = vec![0u8; 4096];
            let mut bbuf = vec![0u8; 4096];
            for (i, x) in abuf.iter_mut().enumerate() {
                *x = (i * 13) as u8;
            }
            let acc = 1 | 2 | 4; // LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ
            let amr = v::ibv_reg_mr(a.pd, abuf.as_mut_ptr().cast(), abuf.len(), acc);
            let bmr = v::ibv_reg_mr(b.pd, bbuf.as_mut_ptr().cast(), bbuf.len(), acc);
            assert!(!amr.is_null() && !bmr.is_null());
            let mut attr: v::ibv_ah_attr = std::mem::zeroed();
            attr.is_global = 1;
            attr.port_num = 1;
            attr.grh.dgid = b.gid;
            let a2b = v::ibv_create_ah(a.pd, &mut attr);
            attr.grh.dgid = a.gid;
            let b2a = v::ibv_create_ah(b.pd, &mut attr);
            assert!(!a2b.is_null() && !b2a.is_null());

            // receive + SEND
            let mut sge = v::ibv_sge {
                addr: bbuf.as_mut_ptr() as u64,
                length: 4096,
                lkey: (*bmr).lkey,
            };
            let mut rwr: v::ibv_recv_wr = std::mem::zeroed();
            rwr.wr_id = 9;
            rwr.sg_list = &mut sge;
            rwr.num_sge = 1;
            let mut bad = null_mut();
            let post_recv = (*(*b.qp).context).ops.post_recv.unwrap();
            assert_eq!(post_recv(b.qp, &mut rwr, &mut bad), 0);
            let q = &mut *a.qpx;
            (q.wr_start.unwrap())(q);
            q.wr_id = 1;
            q.wr_flags = 2; // SIGNALED
            (q.wr_send.unwrap())(q);
            (q.wr_set_ud_addr.unwrap())(q, a2b, (*b.qp).qp_num, 0x1234);
            (q.wr_set_sge.unwrap())(q, (*amr).lkey, abuf.as_ptr() as u64, 300);
            assert_eq!((q.wr_complete.unwrap())(q), 0);
            assert_eq!(poll_one(a.cq), (0, 1, 0));
            assert_eq!(poll_one(b.cq), (0, 9, 128));
            assert_eq!(&bbuf[..300], &abuf[..300]);

            // RDMA write
            bbuf.iter_mut().for_each(|x| *x = 0);
            (q.wr_start.unwrap())(q);
            q.wr_id = 2;
            q.wr_flags = 2;
            (q.wr_rdma_write.unwrap())(q, (*bmr).rkey, bbuf.as_ptr() as u64 + 100);
            (q.wr_set_ud_addr.unwrap())(q, a2b, (*b.qp).qp_num, 0x1234);
            (q.wr_set_sge.unwrap())(q, (*amr).lkey, abuf.as_ptr() as u64, 2000);
            assert_eq!((q.wr_complete.unwrap())(q), 0);
            assert_eq!(poll_one(a.cq), (0, 2, 1));
            assert_eq!(&bbuf[100..2100], &abuf[..2000]);
            assert!(
                q.wr_rdma_read.is_none() && q.wr_send_imm.is_none(),
                "only the requested ops"
            );

            assert_eq!(v::ibv_destroy_ah(a2b), 0);
            assert_eq!(v::ibv_destroy_ah(b2a), 0);
            assert_eq!(v::ibv_dereg_mr(amr), 0);
            assert_eq!(v::ibv_dereg_mr(bmr), 0);
            for s in [a, b] {
                assert_eq!(v::ibv_destroy_qp(s.qp), 0);
                assert_eq!(v::ibv_destroy_cq(s.cq.cast()), 0);
                assert_eq!(v::ibv_dealloc_pd(s.pd), 0);
                assert_eq!(v::ibv_close_device(s.ctx), 0);
            }
        },
    );
}
