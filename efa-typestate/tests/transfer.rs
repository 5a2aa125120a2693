//! `Qp::write_all` / `read_all` on a device whose max_rdma_size is 4096 (EFA_SIM_PROFILE,
//! in a child process), through a QP whose send queue holds 8: 25 chunks each way,
//! never more in flight than the queue holds, every byte checked.

mod common;
use std::time::Duration;

use common::*;
use efa_typestate::*;

const PROFILE: &str = "max_rdma_size=4096";
const LEN: usize = 24 * 4096 + 1000; // 25 chunks, the last one short

#[test]
fn write_all_and_read_all_move_any_size_within_the_queue() {
    in_child(
        "write_all_and_read_all_move_any_size_within_the_queue",
        &[("EFA_SIM_PROFILE", PROFILE)],
        || {
            let ctx = open(0);
            assert_eq!(
                ctx.efa_attr().unwrap().max_rdma_size,
                4096,
                "profile applied"
            );
            let pd = ctx.alloc_pd().unwrap();
            let cq = ctx.create_ext_cq(CqOptions::new(1024).waitable()).unwrap();
            let a = rts_qp(&pd, &cq, &QpConfig::srd().depth(8, 8), QKEY_A);
            let b = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_B);
            assert!(
                a.limits().max_send_wr() < 25,
                "the queue is shallower than the transfer"
            );
            let to_b = pd.connect(&b.endpoint()).unwrap();
            let to_a = pd.connect(&a.endpoint()).unwrap();

            // A completion of another QP on the same CQ, handed to `others`.
            let mut ping = SendBatch::<1>::new(&b);
            ping.send_inline(77, &to_a, b"hi").unwrap();
            let sink = pd.register(vec![0u8; 8], AccessFlags::LOCAL_WRITE).unwrap();
            let mut r = RecvBatch::<1>::new(&a);
            r.push(78, sink.sge_all().unwrap()).unwrap();
            // SAFETY: `sink` is read only after its completion (it arrives in `others`).
            unsafe { a.post_recv(&r) }.unwrap();
            // SAFETY: inline payload, copied during the call.
            unsafe { b.post_send(&ping) }.unwrap();

            let pattern: Vec<u8> = (0..LEN).map(|i| (i * 13 % 251) as u8).collect();
            let src = pd.register(pattern.clone(), AccessFlags::empty()).unwrap();
            let target = pd
                .register_remote_write(vec![0u8; LEN], AccessFlags::REMOTE_READ)
                .unwrap();
            let mut others = Vec::new();
            let opts = Transfer::new(Duration::from_secs(20));
            let chunks = a
                .write_all(&cq, &to_b, &src, target.remote(), opts, |c| others.push(c))
                .unwrap();
            assert_eq!(chunks, 25);
            assert_eq!(target.to_vec(), pattern, "every byte arrived");

            let mut back = pd
                .register(vec![0u8; LEN + 10], AccessFlags::LOCAL_WRITE)
                .unwrap();
            let opts = opts.local_offset(10);
            let chunks = a
                .read_all(&cq, &to_b, &mut back, target.remote(), opts, |c| {
                    others.push(c)
                })
                .unwrap();
            assert_eq!(chunks, 25);
            assert_eq!(&back.as_slice()[10..], &pattern[..]);
            assert!(back.as_slice()[..10].iter().all(|&x| x == 0));

            // The two completions of the other work requests went to `others`, intact.
            let mut ids: Vec<u64> = others.iter().map(|c| c.wr_id()).collect();
            ids.sort();
            assert_eq!(ids, vec![77, 78], "{others:?}");
            assert!(others.iter().all(|c| c.is_ok()));
            assert_eq!(&sink.as_slice()[..2], b"hi");
            expect_none(&cq, Duration::from_millis(20));
        },
    );
}

#[test]
fn write_all_stops_at_the_first_error_with_nothing_left_in_flight() {
    in_child(
        "write_all_stops_at_the_first_error_with_nothing_left_in_flight",
        &[("EFA_SIM_PROFILE", PROFILE)],
        || {
            let ctx = open(0);
            let pd = ctx.alloc_pd().unwrap();
            let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
            let a = rts_qp(&pd, &cq, &QpConfig::srd().depth(8, 8), QKEY_A);
            let b = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_B);
            let to_b = pd.connect(&b.endpoint()).unwrap();
            let src = pd.register(vec![1u8; LEN], AccessFlags::empty()).unwrap();
            // No REMOTE_WRITE right: every chunk fails at the target.
            let target = pd
                .register(vec![0u8; LEN], AccessFlags::LOCAL_WRITE)
                .unwrap();
            let opts = Transfer::new(Duration::from_secs(20));
            let err = a
                .write_all(&cq, &to_b, &src, target.remote(), opts, |c| {
                    panic!("no other completions expected: {c:?}")
                })
                .unwrap_err();
            assert_eq!(
                err.efa_status(),
                Some(EfaStatus::REMOTE_BAD_ADDRESS),
                "{err}"
            );
            expect_none(&cq, Duration::from_millis(50));
            assert!(target.as_slice().iter().all(|&x| x == 0));
            // A local range that does not fit is refused before anything is posted.
            let small = pd.register(vec![0u8; 16], AccessFlags::empty()).unwrap();
            assert!(matches!(
                a.write_all(&cq, &to_b, &small, target.remote(), opts, drop),
                Err(Error::Invalid(InvalidInput::SgeOutOfBounds { .. }))
            ));
        },
    );
}
