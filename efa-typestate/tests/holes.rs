//! Demonstrations of the three soundness holes of issue 10, written against the API as it
//! stands before the fix. Each test PASSES on that API, which is the point: it shows safe
//! code observing what the crate docs promise cannot happen. The fix replaces each with a
//! compile-fail doctest (the types rule the misuse out) or a typed-error test on efa-sim.

mod common;
use common::*;
use efa_typestate::*;

/// Hole 1: a safe `&mut [u8]` over REMOTE_WRITE memory changes under a peer's RDMA write.
#[test]
fn hole_1_live_mut_slice_changes_under_rdma_write() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(16)).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A);
    let to_a = pd.connect(&a.endpoint()).unwrap();
    let src = pd.register(vec![0x5au8; 64], AccessFlags::empty()).unwrap();
    let mut target = write_target(&pd, 64);
    let remote = target.remote();
    let view: &mut [u8] = target.as_mut_slice();
    assert_eq!(view[0], 0);
    let mut batch = SendBatch::<1>::new();
    batch
        .write(
            1,
            &to_a,
            src.sge(0, 64).unwrap(),
            remote.slice(0, 64).unwrap(),
        )
        .unwrap();
    // SAFETY: the contract of post_send is kept: `src` is never written.
    unsafe { a.post_send(&batch) }.unwrap();
    expect_n(&cq, 1)[0].result().unwrap();
    // The exclusive borrow is still live, yet its bytes were changed by the device.
    assert_eq!(std::hint::black_box(&*view)[0], 0x5a, "hole 1 is open");
}

/// Hole 2: a receive posted on device 0's QP with an SGE of device 1's MR: the lkeys of the
/// two devices collide, so the device writes into an unrelated MR of device 0.
#[test]
fn hole_2_sge_of_another_device_writes_an_unrelated_mr() {
    const IOVA: u64 = 0x7000_0000;
    let ctx0 = open(0);
    let ctx1 = open(1);
    let pd0 = ctx0.alloc_pd().unwrap();
    let pd1 = ctx1.alloc_pd().unwrap();
    let cq = ctx0.create_ext_cq(CqOptions::new(16)).unwrap();
    let a = rts_qp(&pd0, &cq, &QpConfig::srd(), QKEY_A);
    let b = rts_qp(&pd0, &cq, &QpConfig::srd(), QKEY_B);
    let to_b = pd0.connect(&b.endpoint()).unwrap();
    // Registrations on both devices until a device-0 MR and a device-1 MR share an lkey.
    let (mut victims, mut foreign) = (Vec::new(), Vec::new());
    fn reg<'pd>(pd: &'pd Pd<'pd>) -> Mr<'pd, Vec<u8>> {
        pd.register_with_iova(vec![0u8; 64], IOVA, AccessFlags::LOCAL_WRITE)
            .unwrap()
    }
    victims.push(reg(&pd0));
    foreign.push(reg(&pd1));
    for _ in 0..100_000 {
        let (v, f) = (
            victims.last().unwrap().lkey(),
            foreign.last().unwrap().lkey(),
        );
        if v == f {
            break;
        }
        if v < f {
            victims.push(reg(&pd0));
        } else {
            foreign.push(reg(&pd1));
        }
    }
    let (victim, other) = (victims.last().unwrap(), foreign.last().unwrap());
    assert_eq!(victim.lkey(), other.lkey(), "no colliding lkeys found");
    let mut r = RecvBatch::<1>::new();
    r.push(1, other.sge(0, 64).unwrap()).unwrap();
    // SAFETY: `other` is not touched until the completion is polled.
    unsafe { b.post_recv(&r) }.unwrap();
    let mut s = SendBatch::<1>::new();
    s.send_inline(2, &to_b, b"written elsewhere").unwrap();
    // SAFETY: inline payload.
    unsafe { a.post_send(&s) }.unwrap();
    let got = expect_n(&cq, 2);
    assert!(got.iter().all(|c| c.is_ok()), "{got:?}");
    // `victim` was never posted, yet the message landed in it.
    assert_eq!(
        &victim.as_slice()[..17],
        b"written elsewhere",
        "hole 2 is open"
    );
    assert!(other.as_slice().iter().all(|&x| x == 0));
}

/// Hole 3: REMOTE_READ on borrowed memory, `mem::forget` of the Mr, memory reused for a
/// secret: a peer's RDMA read returns the secret.
#[test]
fn hole_3_remote_read_of_forgotten_borrowed_registration() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(16)).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A);
    let to_a = pd.connect(&a.endpoint()).unwrap();
    let mut buf = [0u8; 64]; // on the stack, as in the report
    let mr = pd.register(&mut buf[..], AccessFlags::REMOTE_READ).unwrap();
    let remote = mr.remote();
    std::mem::forget(mr); // safe: ends the borrow, the registration stays
    buf[..6].copy_from_slice(b"secret");
    let sink = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let mut s = SendBatch::<1>::new();
    s.read(1, &to_a, sink.sge(0, 64).unwrap(), remote).unwrap();
    // SAFETY: `sink` is not touched until the completion is polled.
    unsafe { a.post_send(&s) }.unwrap();
    expect_n(&cq, 1)[0].result().unwrap();
    assert_eq!(&sink.as_slice()[..6], b"secret", "hole 3 is open");
}
