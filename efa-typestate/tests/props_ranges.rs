//! Property tests of the range arithmetic (issue 24, item 5): the RDMA chunker
//! ([`RdmaChunks`], [`SendBatch::fill_writes`]/[`fill_reads`](SendBatch::fill_reads)),
//! SGEs and the element-indexed ranges of [`Mr`], on registrations at a normal address
//! and at the very top of the address space. Each property states exactly which inputs
//! succeed and which error every other input gives. The registrations are made once per
//! property (a device call on efa-sim), outside the cases. Wire formats: `props_wire.rs`.

mod common;
use std::cell::RefCell;

use common::props::*;
use common::*;
use efa_typestate::*;
use proptest::prelude::*;
use proptest::test_runner::TestCaseResult;

// ---------------------------------------------------------------------------------------
// Registrations on efa-sim.

/// Bytes of each byte registration.
const MR_BYTES: usize = 4096;
/// The iova of the registration at the top of the address space (its end is 2^64 - 1,
/// the largest that fits).
const HIGH_IOVA: u64 = u64::MAX - MR_BYTES as u64;

/// A value that fits the registrations with room to spare, or an edge.
fn near_mr() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0..=(MR_BYTES as u64 + 64),
        1 => (MR_BYTES as u64 - 4)..=(MR_BYTES as u64 + 4),
        2 => edge_u64(),
    ]
}

/// `MemoryRegion::sge(offset, len)`: `LengthTooLarge(len)` beyond 32 bits, else Ok iff
/// `offset + len` fits and is at most the region's length (else `SgeOutOfBounds
/// { offset, len }`); the SGE is `len` bytes at `iova + offset` with the region's lkey.
/// Checked on a region at an ordinary address and one that ends at `2^64 - 1`.
#[test]
fn mr_sge_ranges() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let low = pd
        .register(vec![0u8; MR_BYTES], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let high = pd
        .register_with_iova(vec![0u8; MR_BYTES], HIGH_IOVA, AccessFlags::LOCAL_WRITE)
        .unwrap();
    assert_eq!(high.iova() + high.len(), u64::MAX);
    let len_strategy = prop_oneof![
        3 => near_mr(),
        1 => (u32::MAX as u64 - 2)..=(u32::MAX as u64 + 2),
    ];
    check(
        "mr_sge_ranges",
        (any::<bool>(), near_mr(), len_strategy),
        |(on_high, off, len)| {
            let mr: &dyn MemoryRegion = if on_high { &high } else { &low };
            let got = mr.sge(off, len);
            if len > u64::from(u32::MAX) {
                prop_assert_eq!(
                    got.unwrap_err(),
                    Error::Invalid(InvalidInput::LengthTooLarge(len))
                );
                return Ok(());
            }
            if !matches!(off.checked_add(len), Some(end) if end <= MR_BYTES as u64) {
                prop_assert_eq!(
                    got.unwrap_err(),
                    Error::Invalid(InvalidInput::SgeOutOfBounds {
                        offset: off,
                        len: len as u32
                    })
                );
                return Ok(());
            }
            let s = got.unwrap();
            prop_assert_eq!(
                (s.addr(), u64::from(s.len()), s.lkey()),
                (mr.iova() + off, len, mr.lkey())
            );
            prop_assert_eq!(s.is_empty(), len == 0);
            let all = mr.sge_all().unwrap();
            prop_assert_eq!((all.addr(), all.len()), (mr.iova(), MR_BYTES as u32));
            Ok(())
        },
    );
}

fn u32_edge() -> impl Strategy<Value = u32> {
    prop_oneof![
        3 => 0u32..=(MR_BYTES as u32 + 8),
        1 => (u32::MAX - 8)..=u32::MAX,
        1 => any::<u32>(),
    ]
}

/// `Sge::slice(offset, len)` of any SGE of a region: Ok iff `offset + len` (no 32-bit
/// wrap) is at most the SGE's length, else `SgeOutOfBounds { offset, len }`; the slice is
/// `len` bytes at `addr + offset`, lies inside the SGE and the region, and keeps the lkey.
#[test]
fn sge_slice_stays_inside() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let low = pd
        .register(vec![0u8; MR_BYTES], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let high = pd
        .register_with_iova(vec![0u8; MR_BYTES], HIGH_IOVA, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let strategy = (any::<bool>(), local_fits()).prop_flat_map(|(on_high, (bo, bl))| {
        let bl32 = bl as u32;
        let inside = (0..=bl32).prop_flat_map(move |o| (Just(o), 0..=bl32 - o));
        (
            Just((on_high, bo, bl)),
            prop_oneof![(u32_edge(), u32_edge()), inside],
        )
    });
    check(
        "sge_slice_stays_inside",
        strategy,
        |((on_high, bo, bl), (off, len))| {
            let mr: &dyn MemoryRegion = if on_high { &high } else { &low };
            let base = mr.sge(bo, bl).unwrap();
            let got = base.slice(off, len);
            if u64::from(off) + u64::from(len) > bl {
                prop_assert_eq!(
                    got.unwrap_err(),
                    Error::Invalid(InvalidInput::SgeOutOfBounds {
                        offset: u64::from(off),
                        len
                    })
                );
                return Ok(());
            }
            let s = got.unwrap();
            prop_assert_eq!(
                (s.addr(), s.len(), s.lkey()),
                (base.addr() + u64::from(off), len, mr.lkey())
            );
            prop_assert!(s.addr() >= base.addr() && s.addr() >= mr.iova());
            prop_assert!(s.addr() + u64::from(s.len()) <= base.addr() + u64::from(base.len()));
            prop_assert!(s.addr() + u64::from(s.len()) <= mr.iova() + mr.len());
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------
// Element ranges of Mr.

/// Elements of each element-typed registration.
const ELEMS: usize = 64;

/// The byte range of `count` elements of `size` bytes from element `start` in a region
/// of `elems` elements, or the error the docs give: `SgeOutOfBounds` naming the byte
/// offset and byte length (saturated where the product does not fit 64 bits).
fn elem_range(size: usize, elems: usize, start: usize, count: usize) -> Result<(u64, u64)> {
    let size = size as u64;
    let (Some(off), Some(len)) = (
        (start as u64).checked_mul(size),
        (count as u64).checked_mul(size),
    ) else {
        return invalid(InvalidInput::SgeOutOfBounds {
            offset: (start as u64).saturating_mul(size),
            len: sat((count as u64).saturating_mul(size)),
        });
    };
    match off.checked_add(len) {
        Some(end) if end <= elems as u64 * size => Ok((off, len)),
        _ => invalid(InvalidInput::SgeOutOfBounds {
            offset: off,
            len: sat(len),
        }),
    }
}

/// The contents an element registration starts with.
fn pattern<T: TryFrom<usize>>() -> Vec<T>
where
    T::Error: core::fmt::Debug,
{
    (0..ELEMS)
        .map(|i| T::try_from(i * 37 + 1).unwrap())
        .collect()
}

/// `sge_elems`, `remote_elems`, `read` and `copy_to_slice` of one region against the
/// model, for `start` and `count` anywhere in `usize`.
fn elem_reads<P, T>(mr: &Mr<P, Vec<T>>, start: usize, count: usize) -> TestCaseResult
where
    T: Plain + PartialEq + core::fmt::Debug + Copy + Default,
    Vec<T>: RegionMemory<Elem = T>,
{
    let size = core::mem::size_of::<T>();
    let want = elem_range(size, ELEMS, start, count);
    let contents = mr.to_vec();
    prop_assert_eq!(
        mr.sge_elems(start, count)
            .map(|s| (s.addr(), u64::from(s.len()), s.lkey())),
        want.map(|(off, len)| (mr.iova() + off, len, mr.lkey()))
    );
    prop_assert_eq!(
        mr.remote_elems(start, count),
        want.map(|(off, len)| RemoteBuffer::new(mr.iova() + off, len, mr.rkey()))
    );
    prop_assert_eq!(
        mr.read(start),
        elem_range(size, ELEMS, start, 1).map(|_| contents[start])
    );
    // A destination of a size that can be allocated, at the same (possibly huge) start.
    let n = count % (ELEMS + 8);
    let mut dst = vec![T::default(); n];
    let got = mr.copy_to_slice(start, &mut dst);
    match elem_range(size, ELEMS, start, n) {
        Ok(_) => {
            prop_assert_eq!(got, Ok(()));
            prop_assert_eq!(&dst[..], &contents[start..start + n]);
        }
        Err(e) => {
            prop_assert_eq!(got, Err(e));
            prop_assert!(
                dst.iter().all(|v| *v == T::default()),
                "dst written on error"
            );
        }
    }
    Ok(())
}

/// The element-indexed reads of `Mr<_, Vec<u16>>` and `Mr<_, Vec<u64>>` (the latter
/// ending at `2^64 - 1`) with arbitrary, including huge, indexes: Ok iff
/// `(start + count) * size` fits the region, the SGE or remote buffer is
/// `count * size` bytes at `iova + start * size`, the values are those stored, and every
/// other input gives `SgeOutOfBounds` (never a panic or a wrapped range).
#[test]
fn mr_element_reads() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let halves = pd
        .register(pattern::<u16>(), AccessFlags::LOCAL_WRITE)
        .unwrap();
    let words = pd
        .register_with_iova(
            pattern::<u64>(),
            u64::MAX - (ELEMS * 8) as u64,
            AccessFlags::LOCAL_WRITE,
        )
        .unwrap();
    let inside = (0..=ELEMS).prop_flat_map(|s| (Just(s), 0..=ELEMS - s));
    check(
        "mr_element_reads",
        prop_oneof![(edge_usize(), edge_usize()), inside],
        |(start, count)| {
            elem_reads(&halves, start, count)?;
            elem_reads(&words, start, count)
        },
    );
}

/// `write` and `copy_from_slice` with arbitrary starts: Ok iff the elements fit, then
/// exactly those elements change; on error (`SgeOutOfBounds` as for reads) nothing does.
fn elem_writes<P, T>(mr: &mut Mr<P, Vec<T>>, start: usize, src: &[T]) -> TestCaseResult
where
    T: Plain + PartialEq + core::fmt::Debug + Copy,
    Vec<T>: RegionMemory<Elem = T>,
{
    let size = core::mem::size_of::<T>();
    let before = mr.to_vec();
    let value = src.first().copied().unwrap_or(before[0]);
    let mut want = before.clone();
    match elem_range(size, ELEMS, start, 1) {
        Ok(_) => {
            prop_assert_eq!(mr.write(start, value), Ok(()));
            want[start] = value;
        }
        Err(e) => prop_assert_eq!(mr.write(start, value), Err(e)),
    }
    prop_assert_eq!(&mr.to_vec(), &want);
    match elem_range(size, ELEMS, start, src.len()) {
        Ok(_) => {
            prop_assert_eq!(mr.copy_from_slice(start, src), Ok(()));
            want[start..start + src.len()].copy_from_slice(src);
        }
        Err(e) => prop_assert_eq!(mr.copy_from_slice(start, src), Err(e)),
    }
    prop_assert_eq!(&mr.to_vec(), &want);
    Ok(())
}

/// Element writes on both registrations, with the state carried from case to case.
#[test]
fn mr_element_writes() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let halves = RefCell::new(
        pd.register(pattern::<u16>(), AccessFlags::LOCAL_WRITE)
            .unwrap(),
    );
    let words = RefCell::new(
        pd.register_with_iova(
            pattern::<u64>(),
            u64::MAX - (ELEMS * 8) as u64,
            AccessFlags::LOCAL_WRITE,
        )
        .unwrap(),
    );
    let start = prop_oneof![3 => 0..=ELEMS + 8, 1 => edge_usize()];
    check(
        "mr_element_writes",
        (
            start,
            prop::collection::vec(any::<u16>(), 0..ELEMS + 8),
            prop::collection::vec(any::<u64>(), 0..ELEMS + 8),
        ),
        |(start, h, w)| {
            elem_writes(&mut halves.borrow_mut(), start, &h)?;
            elem_writes(&mut words.borrow_mut(), start, &w)
        },
    );
}

// ---------------------------------------------------------------------------------------
// RdmaChunks.

/// An offset and a length that fit a byte registration.
fn local_fits() -> impl Strategy<Value = (u64, u64)> {
    (0..=MR_BYTES as u64).prop_flat_map(|o| (Just(o), 0..=MR_BYTES as u64 - o))
}

fn max_chunk() -> impl Strategy<Value = u32> {
    prop_oneof![
        1 => Just(0u32),
        3 => 1u32..=64,
        3 => 1u32..=(MR_BYTES as u32 + 16),
        1 => any::<u32>(),
    ]
}

/// `RdmaChunks::new(mr, local_offset, remote, max_chunk)` with arbitrary arguments: Ok
/// iff `max_chunk > 0`, the local range fits the region and the remote range does not
/// wrap; the errors, in that order, are `ZeroChunkSize`, `SgeOutOfBounds { local_offset,
/// remote len }` and `AddressWraps { remote addr, remote len }`. The chunks then cover
/// the remote range in order, contiguous, each at most `max_chunk` and all but the last
/// full, with the local and remote addresses advancing together, as many as `total()`.
#[test]
fn rdma_chunks_cover_the_range() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let low = pd
        .register(vec![0u8; MR_BYTES], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let high = pd
        .register_with_iova(vec![0u8; MR_BYTES], HIGH_IOVA, AccessFlags::LOCAL_WRITE)
        .unwrap();
    check(
        "rdma_chunks_cover_the_range",
        (
            any::<bool>(),
            prop_oneof![(near_mr(), near_mr()), local_fits()],
            edge_u64(),
            any::<u32>(),
            max_chunk(),
        ),
        |(on_high, (local_offset, rlen), raddr, rkey, max)| {
            let mr = if on_high { &high } else { &low };
            let remote = RemoteBuffer::new(raddr, rlen, rkey);
            let got = RdmaChunks::new(mr, local_offset, remote, max);
            if max == 0 {
                prop_assert_eq!(
                    got.unwrap_err(),
                    Error::Invalid(InvalidInput::ZeroChunkSize)
                );
                return Ok(());
            }
            if !matches!(local_offset.checked_add(rlen), Some(end) if end <= MR_BYTES as u64) {
                prop_assert_eq!(
                    got.unwrap_err(),
                    Error::Invalid(InvalidInput::SgeOutOfBounds {
                        offset: local_offset,
                        len: sat(rlen)
                    })
                );
                return Ok(());
            }
            if raddr.checked_add(rlen).is_none() {
                prop_assert_eq!(
                    got.unwrap_err(),
                    Error::Invalid(InvalidInput::AddressWraps {
                        addr: raddr,
                        len: sat(rlen)
                    })
                );
                return Ok(());
            }
            let mut chunks = got.unwrap();
            let max = u64::from(max);
            let total = rlen.div_ceil(max);
            prop_assert_eq!(
                (chunks.index(), chunks.remaining(), chunks.total()),
                (0, total, total)
            );
            let mut done = 0u64;
            let mut i = 0u64;
            loop {
                prop_assert_eq!(chunks.index(), i);
                prop_assert_eq!(
                    chunks.size_hint(),
                    ((total - i) as usize, Some((total - i) as usize))
                );
                let Some((sge, r)) = chunks.next() else { break };
                let want = max.min(rlen - done);
                prop_assert!(want > 0, "chunk {} after the whole range", i);
                prop_assert_eq!(
                    (sge.addr(), u64::from(sge.len()), sge.lkey()),
                    (mr.iova() + local_offset + done, want, mr.lkey())
                );
                prop_assert_eq!((r.addr(), r.len(), r.rkey()), (raddr + done, want, rkey));
                prop_assert_eq!(chunks.total(), total);
                done += want;
                i += 1;
            }
            prop_assert_eq!((i, done), (total, rlen));
            prop_assert_eq!((chunks.index(), chunks.remaining()), (total, 0));
            prop_assert!(chunks.next().is_none());
            Ok(())
        },
    );
}

/// `SendBatch::fill_writes` / `fill_reads` (batches of 8, never posted) stage the
/// chunks in order: chunk `i` as an RDMA write or read with `wr_id` `base + i`, its
/// local SGE and its remote address; a batch takes `min(8, left)` chunks. A `wr_id` with
/// bit 63 set stops the fill with `ReservedWrId(id)`, keeping the chunks staged before it
/// and leaving that chunk next.
#[test]
fn fill_stages_the_chunks_in_order() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A);
    let b = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let local = pd
        .register(vec![0u8; MR_BYTES], AccessFlags::LOCAL_WRITE)
        .unwrap();
    assert!(SendBatch::<8>::new(&a).limits().max_send_wr() >= 8);
    let lease_bit = 1u64 << 63;
    let strategy = (
        local_fits(),
        fitting_range().prop_map(|(addr, _)| addr),
        any::<u32>(),
        prop_oneof![2 => 1u32..=256, 1 => 1u32..=(MR_BYTES as u32 + 16), 1 => 1u32..=u32::MAX],
        prop_oneof![
            2 => 0u64..1000,
            2 => (lease_bit - 600)..lease_bit,
            1 => (u64::MAX - 600)..=u64::MAX,
            1 => any::<u64>(),
        ],
        any::<bool>(),
    );
    check(
        "fill_stages_the_chunks_in_order",
        strategy,
        |((local_offset, rlen), raddr, rkey, max, base, reads)| {
            let raddr = raddr.min(u64::MAX - rlen);
            let remote = RemoteBuffer::new(raddr, rlen, rkey);
            let mut chunks = RdmaChunks::new(&local, local_offset, remote, max).unwrap();
            let max = u64::from(max);
            let op = if reads {
                SendOps::RDMA_READ
            } else {
                SendOps::RDMA_WRITE
            };
            let mut batch = SendBatch::<8>::new(&a);
            while chunks.remaining() > 0 {
                batch.clear();
                let first = chunks.index();
                let got = if reads {
                    batch.fill_reads(base, &to_b, &mut chunks)
                } else {
                    batch.fill_writes(base, &to_b, &mut chunks)
                };
                let fit = chunks_left_before(first, rlen, max).min(8);
                let bad = (0..fit).find(|j| base.wrapping_add(first + j) & lease_bit != 0);
                match bad {
                    Some(j) => prop_assert_eq!(
                        got,
                        invalid(InvalidInput::ReservedWrId(base.wrapping_add(first + j)))
                    ),
                    None => prop_assert_eq!(got, Ok(fit as usize)),
                }
                let staged = bad.unwrap_or(fit);
                prop_assert_eq!(batch.len() as u64, staged);
                prop_assert_eq!(chunks.index(), first + staged);
                for (j, wr) in batch.iter().enumerate() {
                    let i = first + j as u64;
                    let done = i * max;
                    prop_assert_eq!(wr.wr_id(), base.wrapping_add(i));
                    prop_assert_eq!(wr.op(), op);
                    prop_assert_eq!(wr.remote_addr(), Some(raddr + done));
                    prop_assert_eq!(wr.sge_addr(), Some(local.iova() + local_offset + done));
                    prop_assert_eq!(wr.sge_len(), Some(max.min(rlen - done) as u32));
                }
                if bad.is_some() {
                    break;
                }
            }
            Ok(())
        },
    );
}

/// Chunks of `max` bytes left in a transfer of `len` bytes once `index` were taken.
fn chunks_left_before(index: u64, len: u64, max: u64) -> u64 {
    len.div_ceil(max) - index
}
