//! `Qp::post_run`: a run of RDMA operations sharing their registration, destination,
//! remote buffer and operation, posted from arrays (the shared parts checked once, each
//! entry for its ranges), all or nothing, on both backends.

#[macro_use]
mod common;
use std::time::Duration;

use common::*;
use efa_typestate::*;

const NOTHING: Duration = Duration::from_millis(200);

fn sorted_ids(cs: &[Completion]) -> Vec<u64> {
    let mut ids: Vec<u64> = cs
        .iter()
        .map(|c| {
            c.result().unwrap();
            c.wr_id()
        })
        .collect();
    ids.sort();
    ids
}

/// Writes, reads, immediates and splitting on a pair whose QPs use `cfg`.
fn runs_move_bytes(cfg: QpConfig) {
    pair!(ctx, pd, cqa, cqb, a, b, to_b, _to_a, cfg, cfg);
    let mut a = a;
    let src = pd
        .register(
            (0..4096u32).map(|i| (i * 7) as u8).collect::<Vec<u8>>(),
            AccessFlags::LOCAL_WRITE,
        )
        .unwrap();
    // Peers may write it and read it.
    let target = pd
        .register_remote_write(vec![0u8; 8192], AccessFlags::REMOTE_READ)
        .unwrap();
    // Four entries, block i of src to block 3 - i of the target, wr_ids by index.
    let lo = [0u64, 1024, 2048, 3072];
    let ro = [3072u64, 2048, 1024, 0];
    let ln = [1024u32; 4];
    let run = RdmaRun::new(RunOp::Write, &src, &to_b, target.remote()).unwrap();
    let entries = RunEntries::new(&lo, &ro, &ln).unwrap();
    assert_eq!(run.work_requests(a.limits(), &entries), 4);
    // SAFETY: `src` is not written until the completions are polled.
    assert_eq!(unsafe { a.post_run(&run, &entries) }, Ok(4));
    assert_eq!(sorted_ids(&expect_n(&cqa, 4)), [0, 1, 2, 3]);
    let got = target.to_vec();
    for i in 0..4 {
        assert_eq!(
            &got[(3 - i) * 1024..(4 - i) * 1024],
            &src.as_slice()[i * 1024..(i + 1) * 1024]
        );
    }
    // Split at 300 bytes: 1000 bytes are 4 work requests, each with the entry's wr_id.
    let run = run.max_chunk(300).unwrap();
    let entries = RunEntries::new(&[100], &[5000], &[1000])
        .unwrap()
        .wr_ids(&[42])
        .unwrap();
    assert_eq!(run.work_requests(a.limits(), &entries), 4);
    // SAFETY: as above.
    assert_eq!(unsafe { a.post_run(&run, &entries) }, Ok(4));
    assert_eq!(sorted_ids(&expect_n(&cqa, 4)), [42; 4]);
    assert_eq!(&target.to_vec()[5000..6000], &src.as_slice()[100..1100]);
    // A read: the target's bytes land in a local registration.
    let back = pd
        .register(vec![0u8; 256], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let run = RdmaRun::new(RunOp::Read, &back, &to_b, target.remote()).unwrap();
    let entries = RunEntries::new(&[16], &[5000], &[128]).unwrap();
    // SAFETY: `back` is not read until the completion is polled.
    assert_eq!(unsafe { a.post_run(&run, &entries) }, Ok(1));
    assert_eq!(sorted_ids(&expect_n(&cqa, 1)), [0]);
    assert_eq!(&back.as_slice()[16..144], &src.as_slice()[100..228]);
    // Writes with immediate: one receive consumed at the target per request.
    let inbox = pd.register(vec![0u8; 8], AccessFlags::LOCAL_WRITE).unwrap();
    recv_one(&b, 100, inbox.sge(0, 0).unwrap());
    recv_one(&b, 101, inbox.sge(0, 0).unwrap());
    let run = RdmaRun::new(RunOp::WriteImm, &src, &to_b, target.remote()).unwrap();
    let entries = RunEntries::new(&[0, 64], &[6000, 6064], &[64, 64])
        .unwrap()
        .imm(&[0xAB, 0xCD])
        .unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { a.post_run(&run, &entries) }, Ok(2));
    assert_eq!(sorted_ids(&expect_n(&cqa, 2)), [0, 1]);
    let mut imms: Vec<u32> = expect_n(&cqb, 2).iter().map(|c| c.imm().unwrap()).collect();
    imms.sort();
    assert_eq!(imms, [0xAB, 0xCD]);
    assert_eq!(&target.to_vec()[6000..6128], &src.as_slice()[..128]);
    let _ = &ctx;
}

#[test]
fn a_run_moves_its_entries_on_the_default_backend() {
    runs_move_bytes(QpConfig::srd());
}

#[test]
fn a_run_moves_its_entries_on_the_direct_backend() {
    runs_move_bytes(QpConfig::srd().backend(Backend::Direct));
}

#[test]
fn a_bad_entry_anywhere_posts_nothing_and_is_named() {
    pair!(ctx, pd, cqa, _cqb, a, _b, to_b, _to_a);
    let mut a = a;
    let src = pd.register(vec![9u8; 4096], AccessFlags::empty()).unwrap();
    let target = write_target(&pd, 4096);
    let run = RdmaRun::new(RunOp::Write, &src, &to_b, target.remote()).unwrap();
    let good_lo: Vec<u64> = (0..64).map(|i| i * 64).collect();
    let ln = [64u32; 64];
    let e = |i: usize, error: InvalidInput| {
        Err(RunError {
            entry: Some(i),
            error: Error::Invalid(error),
        })
    };
    let mut post = |lo: &[u64], ro: &[u64], ln: &[u32], ids: Option<&[u64]>| {
        let mut entries = RunEntries::new(lo, ro, ln).unwrap();
        if let Some(ids) = ids {
            entries = entries.wr_ids(ids).unwrap();
        }
        // SAFETY: nothing is posted (every call below fails).
        unsafe { a.post_run(&run, &entries) }
    };
    // Local range past the registration at entry 40 of 64.
    let mut lo = good_lo.clone();
    lo[40] = 4096 - 32;
    assert_eq!(
        post(&lo, &good_lo, &ln, None),
        e(
            40,
            InvalidInput::SgeOutOfBounds {
                offset: 4064,
                len: 64
            }
        )
    );
    // An offset whose end wraps 64 bits.
    lo[40] = u64::MAX - 8;
    assert_eq!(
        post(&lo, &good_lo, &ln, None),
        e(
            40,
            InvalidInput::SgeOutOfBounds {
                offset: u64::MAX - 8,
                len: 64
            }
        )
    );
    // Remote range past the remote buffer at entry 63 (the last).
    let mut ro = good_lo.clone();
    ro[63] = 4090;
    assert_eq!(
        post(&good_lo, &ro, &ln, None),
        e(
            63,
            InvalidInput::RemoteOutOfBounds {
                offset: 4090,
                len: 64
            }
        )
    );
    ro[63] = u64::MAX;
    assert!(matches!(
        post(&good_lo, &ro, &ln, None),
        Err(RunError {
            entry: Some(63),
            error: Error::Invalid(InvalidInput::RemoteOutOfBounds { .. })
        })
    ));
    // An empty entry.
    let mut l0 = ln;
    l0[1] = 0;
    assert_eq!(
        post(&good_lo, &good_lo, &l0, None),
        e(1, InvalidInput::EmptyEntry)
    );
    let mut first_empty = ln;
    first_empty[0] = 0;
    assert_eq!(
        post(&good_lo, &good_lo, &first_empty, None),
        e(0, InvalidInput::EmptyEntry)
    );
    // A wr_id with the lease bit.
    let mut ids: Vec<u64> = (0..64).collect();
    ids[33] |= 1 << 63;
    assert_eq!(
        post(&good_lo, &good_lo, &ln, Some(&ids)),
        e(33, InvalidInput::ReservedWrId(33 | 1 << 63))
    );
    // None of the entries before the bad ones reached the device.
    expect_none(&cqa, NOTHING);
    assert!(target.to_vec().iter().all(|&x| x == 0));
    let _ = &ctx;
}

#[test]
fn the_shared_parts_must_belong_to_the_qp() {
    pair!(ctx, pd, cqa, _cqb, a, b, to_b, _to_a);
    let mut a = a;
    let target = write_target(&pd, 4096);
    let entries = RunEntries::new(&[0], &[0], &[64]).unwrap();
    let shared = |error| {
        Err(RunError {
            entry: None,
            error: Error::Invalid(error),
        })
    };
    // A registration of another PD (of the same context, and of another context).
    let pd2 = ctx.alloc_pd().unwrap();
    let other_pd_src = pd2.register(vec![1u8; 64], AccessFlags::empty()).unwrap();
    let run = RdmaRun::new(RunOp::Write, &other_pd_src, &to_b, target.remote()).unwrap();
    assert_eq!(
        // SAFETY: nothing is posted.
        unsafe { a.post_run(&run, &entries) },
        shared(InvalidInput::WrongPd(PdObject::Sge))
    );
    let ctx2 = open(1);
    let pd3 = ctx2.alloc_pd().unwrap();
    let other_ctx_src = pd3.register(vec![1u8; 64], AccessFlags::empty()).unwrap();
    let run = RdmaRun::new(RunOp::Write, &other_ctx_src, &to_b, target.remote()).unwrap();
    assert_eq!(
        // SAFETY: nothing is posted.
        unsafe { a.post_run(&run, &entries) },
        shared(InvalidInput::WrongPd(PdObject::Sge))
    );
    // A destination whose AH is of another PD.
    let src = pd.register(vec![1u8; 64], AccessFlags::empty()).unwrap();
    let foreign_peer = pd2.connect(&b.endpoint()).unwrap();
    let run = RdmaRun::new(RunOp::Write, &src, &foreign_peer, target.remote()).unwrap();
    assert_eq!(
        // SAFETY: nothing is posted.
        unsafe { a.post_run(&run, &entries) },
        shared(InvalidInput::WrongPd(PdObject::Peer))
    );
    // Immediates exactly for writes with immediate.
    let run = RdmaRun::new(RunOp::WriteImm, &src, &to_b, target.remote()).unwrap();
    assert_eq!(
        // SAFETY: nothing is posted.
        unsafe { a.post_run(&run, &entries) },
        shared(InvalidInput::RunImmediates { op_has_imm: true })
    );
    let run = RdmaRun::new(RunOp::Write, &src, &to_b, target.remote()).unwrap();
    let with_imm = entries.imm(&[5]).unwrap();
    assert_eq!(
        // SAFETY: nothing is posted.
        unsafe { a.post_run(&run, &with_imm) },
        shared(InvalidInput::RunImmediates { op_has_imm: false })
    );
    // Arrays of other lengths, a zero chunk, a remote buffer that wraps, a QPN too large.
    assert_eq!(
        RunEntries::new(&[0, 1], &[0], &[1, 1]).unwrap_err(),
        Error::Invalid(InvalidInput::RunArrayLength {
            array: RunArray::RemoteOffsets,
            len: 1,
            entries: 2
        })
    );
    assert_eq!(
        entries.wr_ids(&[1, 2]).unwrap_err(),
        Error::Invalid(InvalidInput::RunArrayLength {
            array: RunArray::WrIds,
            len: 2,
            entries: 1
        })
    );
    assert_eq!(
        run.max_chunk(0).unwrap_err(),
        Error::Invalid(InvalidInput::ZeroChunkSize)
    );
    assert!(matches!(
        RdmaRun::new(
            RunOp::Write,
            &src,
            &to_b,
            RemoteBuffer::new(u64::MAX - 8, 64, 1)
        ),
        Err(Error::Invalid(InvalidInput::AddressWraps { .. }))
    ));
    assert_eq!(
        RdmaRun::to_ah(RunOp::Write, &src, to_b.ah(), 1 << 24, 1, target.remote()).unwrap_err(),
        Error::Invalid(InvalidInput::QpnOutOfRange(1 << 24))
    );
    expect_none(&cqa, NOTHING);
    assert!(target.to_vec().iter().all(|&x| x == 0));
}

#[test]
fn a_run_needs_an_srd_qp_with_its_operation() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(2048)).unwrap();
    let target = write_target(&pd, 64);
    let src = pd.register(vec![1u8; 64], AccessFlags::empty()).unwrap();
    let entries = RunEntries::new(&[0], &[0], &[64]).unwrap();
    let peer_qp = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_B);
    let to_peer = pd.connect(&peer_qp.endpoint()).unwrap();
    let run = RdmaRun::new(RunOp::Read, &src, &to_peer, target.remote()).unwrap();
    let mut ud = rts_qp(&pd, &cq, &QpConfig::ud(), QKEY_A);
    assert_eq!(
        // SAFETY: nothing is posted.
        unsafe { ud.post_run(&run, &entries) }.map_err(|e| e.error),
        Err(Error::Invalid(InvalidInput::RdmaOnUd))
    );
    let writes_only = QpConfig::srd().send_ops(SendOps::RDMA_WRITE | SendOps::SEND);
    let mut w = rts_qp(&pd, &cq, &writes_only, QKEY_A);
    assert!(matches!(
        // SAFETY: nothing is posted.
        unsafe { w.post_run(&run, &entries) }.map_err(|e| e.error),
        Err(Error::Invalid(InvalidInput::SendOpNotEnabled { .. }))
    ));
    // A DynQp posts only in RTS.
    let mut d = pd.create_qp(&cq, &cq, &QpConfig::srd()).unwrap().into_dyn();
    assert!(matches!(
        // SAFETY: nothing is posted.
        unsafe { d.post_run(&run, &entries) }.map_err(|e| e.error),
        Err(Error::Invalid(InvalidInput::WrongQpState { .. }))
    ));
    expect_none(&cq, NOTHING);
}

#[test]
fn a_run_longer_than_the_queue_or_refused_by_admit_posts_nothing() {
    let cfg = QpConfig::srd().depth(16, 16);
    pair!(ctx, pd, cqa, _cqb, a, _b, to_b, _to_a, cfg, cfg);
    let mut a = a;
    let depth = a.limits().max_send_wr() as usize;
    let src = pd.register(vec![3u8; 8192], AccessFlags::empty()).unwrap();
    let target = write_target(&pd, 8192);
    let run = RdmaRun::new(RunOp::Write, &src, &to_b, target.remote()).unwrap();
    let lo: Vec<u64> = (0..depth as u64 + 1).map(|i| i * 8).collect();
    let ln = vec![8u32; depth + 1];
    let entries = RunEntries::new(&lo, &lo, &ln).unwrap();
    assert_eq!(
        // SAFETY: nothing is posted.
        unsafe { a.post_run(&run, &entries) },
        Err(RunError {
            entry: Some(depth),
            error: Error::Invalid(InvalidInput::BatchLargerThanQueue {
                depth: depth as u32
            })
        })
    );
    // The same with the last entry split: the queue is full within it.
    let entries = RunEntries::new(&lo[..depth], &lo[..depth], &ln[..depth]).unwrap();
    let split = run.max_chunk(4).unwrap();
    assert!(matches!(
        // SAFETY: nothing is posted.
        unsafe { a.post_run(&split, &entries) },
        Err(RunError {
            entry: Some(i),
            error: Error::Invalid(InvalidInput::BatchLargerThanQueue { .. })
        }) if i == depth / 2
    ));
    // Refused by `admit`: its error, nothing posted; accepted: it sees the count.
    // SAFETY: nothing is posted.
    let refused = unsafe { a.post_run_admit(&run, &entries, |_| Err(Error::SendQueueFull)) };
    assert_eq!(refused, Err(RunError::from(Error::SendQueueFull)));
    expect_none(&cqa, NOTHING);
    assert!(target.to_vec().iter().all(|&x| x == 0));
    let mut seen = 0;
    // SAFETY: `src` is never written.
    let posted = unsafe {
        a.post_run_admit(&run, &entries, |n| {
            seen = n;
            Ok(())
        })
    };
    assert_eq!((posted, seen), (Ok(depth), depth));
    assert_eq!(expect_n(&cqa, depth).len(), depth);
    let _ = &ctx;
}

#[test]
fn entries_of_other_lengths_are_checked_exactly() {
    pair!(ctx, pd, cqa, _cqb, a, _b, to_b, _to_a);
    let mut a = a;
    let src = pd
        .register(
            (0..4096u32).map(|i| (i * 13) as u8).collect::<Vec<u8>>(),
            AccessFlags::empty(),
        )
        .unwrap();
    let target = write_target(&pd, 4096);
    let run = RdmaRun::new(RunOp::Write, &src, &to_b, target.remote()).unwrap();
    // The first entry is short; later, longer ones end exactly at the end of either
    // buffer, or run past it by a byte.
    let lo = [0u64, 3996, 4000];
    let ro = [0u64, 100, 3999];
    let bad = RunEntries::new(&lo, &ro, &[8, 100, 97]).unwrap();
    // SAFETY: nothing is posted.
    let r = unsafe { a.post_run(&run, &bad) };
    assert_eq!(
        r,
        Err(RunError {
            entry: Some(2),
            error: Error::Invalid(InvalidInput::SgeOutOfBounds {
                offset: 4000,
                len: 97
            })
        })
    );
    let bad = RunEntries::new(&lo, &[0, 100, 4001], &[8, 100, 96]).unwrap();
    // SAFETY: nothing is posted.
    let r = unsafe { a.post_run(&run, &bad) };
    assert_eq!(
        r,
        Err(RunError {
            entry: Some(2),
            error: Error::Invalid(InvalidInput::RemoteOutOfBounds {
                offset: 4001,
                len: 96
            })
        })
    );
    // An entry longer than the whole registration (the remote buffer is longer).
    let small = pd.register(vec![1u8; 64], AccessFlags::empty()).unwrap();
    let run_small = RdmaRun::new(RunOp::Write, &small, &to_b, target.remote()).unwrap();
    let longer = RunEntries::new(&[0, 0], &[0, 0], &[8, 100]).unwrap();
    // SAFETY: nothing is posted.
    let r = unsafe { a.post_run(&run_small, &longer) };
    assert_eq!(
        r,
        Err(RunError {
            entry: Some(1),
            error: Error::Invalid(InvalidInput::SgeOutOfBounds {
                offset: 0,
                len: 100
            })
        })
    );
    expect_none(&cqa, NOTHING);
    let good = RunEntries::new(&lo, &[0, 100, 3999], &[8, 100, 96]).unwrap();
    // SAFETY: `src` is never written.
    assert_eq!(unsafe { a.post_run(&run, &good) }, Ok(3));
    assert_eq!(sorted_ids(&expect_n(&cqa, 3)), [0, 1, 2]);
    let got = target.to_vec();
    assert_eq!(&got[..8], &src.as_slice()[..8]);
    assert_eq!(&got[100..200], &src.as_slice()[3996..4096]);
    assert_eq!(&got[3999..4095], &src.as_slice()[4000..4096]);
    let _ = &ctx;
}
