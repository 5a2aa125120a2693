//! Handles held by `Arc` (an engine owns its objects and moves them between threads) and
//! typed buffers (plain-data element types, byte offsets with element helpers).

mod common;
use std::sync::Arc;
use std::time::Duration;

use arrayvec::ArrayVec;
use common::*;
use efa_typestate::zerocopy::{FromBytes, Immutable, IntoBytes};
use efa_typestate::*;

type SharedPd = Arc<Pd<Arc<Context>>>;

/// Everything an engine needs, owned, without a lifetime.
struct Engine {
    qp: Qp<SharedPd, Rts>,
    peer: Peer<SharedPd>,
    inbox: Mr<SharedPd, Vec<u8>>,
    cq: Arc<Cq<Arc<Context>>>,
    _channel: Arc<CompChannel<Arc<Context>>>,
}

fn assert_send_static<T: Send + 'static>(_: &T) {}

#[test]
fn an_engine_owns_its_handles_and_moves_to_another_thread() {
    let ctx = Arc::new(open(0));
    let pd: SharedPd = Arc::new(Pd::new(Arc::clone(&ctx)).unwrap());
    let channel = Arc::new(CompChannel::new(Arc::clone(&ctx)).unwrap());
    let cq = Arc::new(
        Cq::with_channel(Arc::clone(&ctx), Arc::clone(&channel), CqOptions::new(1024)).unwrap(),
    );
    let qp = Qp::new(
        Arc::clone(&pd),
        Arc::clone(&cq),
        Arc::clone(&cq),
        &QpConfig::srd(),
    )
    .unwrap()
    .prepare(QKEY_A, None)
    .unwrap();
    let peer = Peer::connect(Arc::clone(&pd), &qp.endpoint()).unwrap();
    let inbox = Mr::new(Arc::clone(&pd), vec![0u8; 64], AccessFlags::LOCAL_WRITE).unwrap();
    let engine = Engine {
        qp,
        peer,
        inbox,
        cq,
        _channel: channel,
    };
    assert_send_static(&engine);
    // Only the engine holds the objects now (plus these two counts, dropped next).
    assert_eq!(
        Arc::strong_count(&pd),
        4,
        "QP, peer's AH and MR hold the PD"
    );
    drop((pd, ctx));

    let worker = std::thread::spawn(move || {
        let e = engine;
        let mut r = RecvBatch::<1>::new(&e.qp);
        r.push(1, e.inbox.sge(0, 64).unwrap()).unwrap();
        // SAFETY: `inbox` is read only after the receive's completion.
        unsafe { e.qp.post_recv(&r) }.unwrap();
        let mut s = SendBatch::<1>::new(&e.qp);
        s.send_inline(2, &e.peer, b"engine thread").unwrap();
        // SAFETY: inline payload, copied during the call.
        unsafe { e.qp.post_send(&s) }.unwrap();
        let mut got = ArrayVec::<Completion, 4>::new();
        e.cq.poll_until(&mut got, 2, Duration::from_secs(10))
            .unwrap();
        assert!(got.iter().all(|c| c.is_ok()), "{got:?}");
        let text = e.inbox.as_slice()[..13].to_vec();
        // The typestate works for the shared form too; a dynamic QP as well.
        let qp = e.qp.reset().unwrap().into_dyn();
        assert_eq!(qp.state(), QpStateKind::Reset);
        text
    });
    assert_eq!(worker.join().unwrap(), b"engine thread");
}

/// A `#[repr(C)]` record of plain data.
#[derive(Clone, Copy, Debug, PartialEq, FromBytes, IntoBytes, Immutable)]
#[repr(C)]
struct Sample {
    t: u64,
    value: f32,
    channel: u16,
    flags: u16,
}

#[test]
fn typed_buffers_move_f32_f16_bits_and_records() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A);
    let to_a = pd.connect(&a.endpoint()).unwrap();

    // f32: a send of elements 1..3 arrives in a Vec<f32> receive buffer.
    let floats = pd
        .register(vec![0.5f32, 1.5, 2.5, 3.5], AccessFlags::empty())
        .unwrap();
    assert_eq!((floats.elems(), floats.len()), (4, 16));
    let mut got = pd
        .register(vec![0f32; 4], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let mut r = RecvBatch::<1>::new(&a);
    r.push(1, got.sge_elems(0, 4).unwrap()).unwrap();
    // SAFETY: `got` is read only after the receive's completion.
    unsafe { a.post_recv(&r) }.unwrap();
    let mut s = SendBatch::<1>::new(&a);
    s.send(2, &to_a, floats.sge_elems(1, 2).unwrap()).unwrap();
    // SAFETY: `floats` is not written after the post.
    unsafe { a.post_send(&s) }.unwrap();
    let done = expect_n(&cq, 2);
    assert!(done.iter().all(|c| c.is_ok()), "{done:?}");
    assert_eq!(&got.as_slice()[..2], &[1.5, 2.5]);
    assert_eq!(got.as_mut_bytes().len(), 16);
    assert_eq!(
        floats.sge_elems(3, 2).unwrap_err(),
        Error::Invalid(InvalidInput::SgeOutOfBounds { offset: 12, len: 8 })
    );

    // f16 as u16 bits, in a boxed slice, RDMA-written into a peer-writable u16 buffer.
    let halves: Box<[u16]> = vec![0x3c00u16, 0x4000, 0x4200].into_boxed_slice(); // 1.0, 2.0, 3.0
    let halves = pd.register(halves, AccessFlags::empty()).unwrap();
    let target = pd
        .register_remote_write(vec![0u16; 8], AccessFlags::empty())
        .unwrap();
    let mut s = SendBatch::<1>::new(&a);
    s.write(
        3,
        &to_a,
        halves.sge_all().unwrap(),
        target.remote_elems(4, 3).unwrap(),
    )
    .unwrap();
    // SAFETY: `halves` is not written after the post.
    unsafe { a.post_send(&s) }.unwrap();
    expect_n(&cq, 1)[0].result().unwrap();
    assert_eq!(target.to_vec(), vec![0, 0, 0, 0, 0x3c00, 0x4000, 0x4200, 0]);
    assert_eq!(target.read(5).unwrap(), 0x4000);

    // Records: a borrowed slice of them, sent whole.
    let mut records = [
        Sample {
            t: 1,
            value: 0.25,
            channel: 7,
            flags: 0,
        },
        Sample {
            t: 2,
            value: -4.0,
            channel: 9,
            flags: 1,
        },
    ];
    let records = pd.register(&mut records[..], AccessFlags::empty()).unwrap();
    let inbox = pd
        .register(
            vec![
                Sample {
                    t: 0,
                    value: 0.0,
                    channel: 0,
                    flags: 0
                };
                2
            ],
            AccessFlags::LOCAL_WRITE,
        )
        .unwrap();
    let mut r = RecvBatch::<1>::new(&a);
    r.push(4, inbox.sge_all().unwrap()).unwrap();
    // SAFETY: `inbox` is read only after the receive's completion.
    unsafe { a.post_recv(&r) }.unwrap();
    let mut s = SendBatch::<1>::new(&a);
    s.send(5, &to_a, records.sge_all().unwrap()).unwrap();
    // SAFETY: `records` is not written after the post.
    unsafe { a.post_send(&s) }.unwrap();
    let done = expect_n(&cq, 2);
    assert!(done.iter().all(|c| c.is_ok()), "{done:?}");
    assert_eq!(inbox.as_slice(), records.as_slice());
    assert_eq!(inbox.as_slice()[1].value, -4.0);
}

#[test]
fn closing_a_cq_lets_go_of_its_channel_and_context() {
    let ctx = Arc::new(open(0));
    let channel = Arc::new(CompChannel::new(Arc::clone(&ctx)).unwrap());
    let cq = Cq::with_channel(Arc::clone(&ctx), Arc::clone(&channel), CqOptions::new(64)).unwrap();
    let ext =
        ExtCq::with_channel(Arc::clone(&ctx), Arc::clone(&channel), CqOptions::new(64)).unwrap();
    assert_eq!(Arc::strong_count(&channel), 3, "each CQ holds the channel");
    cq.close().map_err(|(_, e)| e).unwrap();
    ext.close().map_err(|(_, e)| e).unwrap();
    assert_eq!(Arc::strong_count(&channel), 1, "closed CQs hold nothing");
    let channel = Arc::try_unwrap(channel).ok().unwrap();
    channel.close().map_err(|(_, e)| e).unwrap();
    let Ok(ctx) = Arc::try_unwrap(ctx) else {
        panic!("the context is still held after its CQs and channel closed");
    };
    ctx.close().unwrap();
}
