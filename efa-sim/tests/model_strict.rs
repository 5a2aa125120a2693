//! Strict mode (`EFA_SIM_PROFILE=strict`): the orders SRD does not give are broken in
//! every run. A program that announces an RDMA write with a write-with-immediate
//! posted in the same doorbell reads a stale body at the target in every single run
//! (one round per seed; a 256 KiB body: bulk RDMA), on the same-process direct path
//! and on the datagram path; the corrected program (announce only after the body's own
//! completion) passes every seed. SENDs of one doorbell, and of doorbells posted back
//! to back, arrive, and complete at the initiator, newest first. The `reorder` fault
//! knob alone stays a seeded random explorer. Devices with unique indices, each seed
//! restarted with `Device::reseed_strict`.

#[path = "model_helpers.rs"]
mod helpers;
use efa_sim::config::Config;
use efa_sim::model::*;
use helpers::*;
use std::sync::Arc;

/// Size of the announced body.
const BODY: usize = 256 << 10;
/// Rounds per seeded run in strict mode: one, as a user's test runs its program once.
const ROUNDS: u32 = 1;
/// Seeds 1..=SEEDS.
const SEEDS: u64 = 100;

/// Two strict devices `ia`, `ib` with the same-process path on or off, and a side on
/// each.
fn strict_pair(ia: u32, ib: u32, direct: bool) -> (Side, Side) {
    let config = Arc::new(Config {
        direct,
        faults: Default::default(),
        ..(**Sim::get().config()).clone()
    });
    assert_eq!(config.direct_path(), direct);
    let profile = Profile {
        strict: true,
        ..Profile::default()
    };
    let a = Device::standalone_in(ia, profile.clone(), config.clone()).unwrap();
    let b = Device::standalone_in(ib, profile, config).unwrap();
    (Side::new(&a, 0), Side::new(&b, 0))
}

/// The u64 word `i` of body pattern `p` (0 or 1).
fn word(p: u32, i: usize) -> u64 {
    (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ [0xaaaa_0000_aaaa_0000, 0x5555][p as usize]
}

/// Whether `r`'s first `BODY` bytes hold pattern `p` (volatile reads: the device writes
/// from other threads).
fn holds(r: &Region, p: u32) -> bool {
    let base = r.addr() as *const u64;
    (0..BODY / 8).all(|i| {
        // SAFETY: in bounds of the region's BODY bytes, 8-byte aligned (a boxed slice
        // of this size comes from the allocator page aligned).
        unsafe { std::ptr::read_volatile(base.add(i)) == word(p, i) }
    })
}

fn fill(r: &Region, p: u32) {
    assert_eq!(r.addr() % 8, 0);
    let base = r.addr() as *mut u64;
    for i in 0..BODY / 8 {
        // SAFETY: in bounds, aligned (above); no WR uses the region yet.
        unsafe { std::ptr::write_volatile(base.add(i), word(p, i)) };
    }
}

/// The user's program, one seeded run: per round, a 256 KiB RDMA write of pattern
/// `round % 2` and the write-with-immediate announcing it, in one doorbell (`fixed`:
/// the announcement only after the body's own completion was polled). The target checks
/// the body as soon as it polls the announcement. Returns the rounds that saw a stale
/// body, and those whose initiator completions came out of posting order.
fn run(a: &Side, b: &Side, (seed, rounds): (u64, u32), fixed: bool, bufs: &Bufs) -> (u32, u32) {
    a.dev.reseed_strict(seed).unwrap();
    b.dev.reseed_strict(seed).unwrap();
    let ah = a.ah_to(b);
    let (mut stale, mut swapped) = (0, 0);
    for round in 0..rounds {
        let p = round % 2;
        // No body of an earlier run may pass for this one's.
        bufs.dst.fill(0, &vec![0; BODY]);
        b.qp.post_recv(&recv(u64::from(round), &[])).unwrap();
        let mut body = wr(
            &ah,
            b.qp.qpn(),
            1,
            SendOp::RdmaWrite,
            &[bufs.src[p as usize].sge(0, BODY as u32)],
        );
        body.remote = Some((bufs.dst.addr(), bufs.dst.mr.rkey()));
        let mut announce = wr(
            &ah,
            b.qp.qpn(),
            2,
            SendOp::RdmaWriteImm,
            &[bufs.flag.sge(0, 8)],
        );
        announce.remote = Some((bufs.flag_dst.addr(), bufs.flag_dst.mr.rkey()));
        announce.imm_be = round;
        let mut order = Vec::new();
        if fixed {
            a.qp.post_send_batch(&[body]).unwrap();
            order.push(next(&a.cq, 10));
            a.qp.post_send_batch(&[announce]).unwrap();
        } else {
            a.qp.post_send_batch(&[body, announce]).unwrap();
        }
        let r = next(&b.cq, 10);
        let fresh = holds(&bufs.dst, p);
        assert_eq!(
            (r.status, r.imm_be, r.wr_id),
            (0, Some(round), u64::from(round))
        );
        stale += u32::from(!fresh);
        while order.len() < 2 {
            order.push(next(&a.cq, 10));
        }
        assert!(order.iter().all(|c| c.status == 0), "{order:?}");
        swapped += u32::from(order[0].wr_id != 1);
        // Both completions polled: SRD's own guarantee, the body has landed.
        assert!(
            holds(&bufs.dst, p),
            "body of round {round} missing after its completion"
        );
    }
    (stale, swapped)
}

struct Bufs {
    src: [Region; 2],
    flag: Region,
    dst: Region,
    flag_dst: Region,
}

fn bufs(a: &Side, b: &Side) -> Bufs {
    let src = [0, 1].map(|p| {
        let r = Region::new(&a.pd, BODY, ALL_ACCESS);
        fill(&r, p);
        r
    });
    Bufs {
        src,
        flag: Region::new(&a.pd, 8, ALL_ACCESS),
        dst: Region::new(&b.pd, BODY, ALL_ACCESS),
        flag_dst: Region::new(&b.pd, 8, ALL_ACCESS),
    }
}

/// Runs seeds 1..=SEEDS of the buggy and the fixed program; returns (runs that caught
/// the stale body, fixed runs that saw one, runs with swapped initiator completions).
fn hundred_seeds(a: &Side, b: &Side, rounds: u32) -> (u32, u32, u32) {
    let _known = b.ah_to(a);
    let bufs = bufs(a, b);
    let (mut caught, mut fixed_stale, mut swapped) = (0, 0, 0);
    for seed in 1..=SEEDS {
        let (stale, sw) = run(a, b, (seed, rounds), false, &bufs);
        caught += u32::from(stale > 0);
        swapped += u32::from(sw > 0);
        let (stale, _) = run(a, b, (seed, rounds), true, &bufs);
        fixed_stale += u32::from(stale > 0);
    }
    (caught, fixed_stale, swapped)
}

#[test]
fn announce_in_the_same_doorbell_reads_a_stale_body_on_the_direct_path() {
    let (a, b) = strict_pair(40, 41, true);
    let (caught, fixed_stale, swapped) = hundred_seeds(&a, &b, ROUNDS);
    eprintln!("direct path: buggy program caught in {caught}/{SEEDS} runs, fixed program stale in {fixed_stale}, initiator completions swapped in {swapped}");
    assert_eq!(
        caught, SEEDS as u32,
        "the bug showed in only {caught} of {SEEDS} runs"
    );
    assert_eq!(fixed_stale, 0);
    assert_eq!(swapped, SEEDS as u32, "the announcement completes first");
    assert!(a.dev.stats().direct > 0, "the direct path was used");
}

#[test]
fn announce_in_the_same_doorbell_reads_a_stale_body_over_datagrams() {
    let (a, b) = strict_pair(42, 43, false);
    let (caught, fixed_stale, swapped) = hundred_seeds(&a, &b, ROUNDS);
    eprintln!("datagram path: buggy program caught in {caught}/{SEEDS} runs, fixed program stale in {fixed_stale}, initiator completions swapped in {swapped}");
    assert_eq!(
        caught, SEEDS as u32,
        "the bug showed in only {caught} of {SEEDS} runs"
    );
    assert_eq!(fixed_stale, 0);
    // The initiator's completions wait for the target's answers, which the datagram
    // delays and a loaded machine's scheduling still move (99 of 100 seen).
    assert!(
        swapped >= 90,
        "the announcement completed first in only {swapped}"
    );
    assert_eq!(a.dev.stats().direct, 0);
}

/// Without strict mode, `EFA_SIM_FAULTS=reorder=p` alone permutes a fraction `p` of the
/// doorbells (and delays datagrams): the user's program of the issue, which passed 20
/// rounds of 20 under `reorder=0.3`, is caught now; its fix still passes every run.
#[test]
fn announce_in_the_same_doorbell_is_caught_by_the_reorder_fault_alone() {
    let config = Arc::new(Config {
        faults: efa_sim::transport::FaultSpec::parse("seed=1,reorder=0.3").unwrap(),
        ..(**Sim::get().config()).clone()
    });
    let a = Device::standalone_in(48, Profile::default(), config.clone()).unwrap();
    let b = Device::standalone_in(49, Profile::default(), config).unwrap();
    let (a, b) = (Side::new(&a, 0), Side::new(&b, 0));
    // reorder=0.3 inverts a two-WQE doorbell with probability 0.15 per round: 20 rounds
    // miss it with probability 0.85^20 < 4%.
    let (caught, fixed_stale, _) = hundred_seeds(&a, &b, 20);
    eprintln!("reorder=0.3: buggy program caught in {caught}/{SEEDS} runs, fixed program stale in {fixed_stale}");
    assert!(
        caught >= 85,
        "the bug showed in only {caught} of {SEEDS} runs"
    );
    assert_eq!(fixed_stale, 0);
}

/// Eight SENDs in one doorbell: every one arrives with its bytes, newest first (into
/// the first posted receive: receives are consumed in ring order), and completes at the
/// initiator newest first, in every run.
#[test]
fn sends_of_one_doorbell_arrive_and_complete_newest_first() {
    let (a, b) = strict_pair(44, 45, true);
    let ah = a.ah_to(&b);
    let src = Region::new(&a.pd, 8 * 64, ALL_ACCESS);
    let dst = Region::new(&b.pd, 8 * 64, ALL_ACCESS);
    for i in 0..8u8 {
        src.fill(usize::from(i) * 64, &[i + 1; 64]);
    }
    let (mut arrived_swapped, mut completed_swapped) = (0, 0);
    for seed in 1..=20 {
        a.dev.reseed_strict(seed).unwrap();
        for i in 0..8u64 {
            b.qp.post_recv(&recv(i, &[dst.sge(i as usize * 64, 64)]))
                .unwrap();
        }
        let wrs: Vec<SendWr> = (0..8u64)
            .map(|i| {
                wr(
                    &ah,
                    b.qp.qpn(),
                    i,
                    SendOp::Send,
                    &[src.sge(i as usize * 64, 64)],
                )
            })
            .collect();
        a.qp.post_send_batch(&wrs).unwrap();
        let mut got = Vec::new();
        for _ in 0..8 {
            let r = next(&b.cq, 10);
            assert_eq!((r.status, r.byte_len), (0, 64));
            // Receives are consumed in posting order (as on SRD): receive k holds
            // whichever message came k-th.
            got.push(dst.bytes(r.wr_id as usize * 64, 64)[0]);
            assert!(dst
                .bytes(r.wr_id as usize * 64, 64)
                .iter()
                .all(|&x| x == got[got.len() - 1]));
        }
        assert_eq!(got, (1..=8).rev().collect::<Vec<u8>>(), "seed {seed}");
        arrived_swapped += 1;
        let done: Vec<u64> = (0..8).map(|_| next(&a.cq, 10).wr_id).collect();
        assert_eq!(done, (0..8).rev().collect::<Vec<u64>>(), "seed {seed}");
        completed_swapped += 1;
    }
    assert_eq!((arrived_swapped, completed_swapped), (20, 20));
}

/// Eight SENDs, each its own doorbell, posted back to back: strict mode holds each
/// doorbell's WQEs, and a later doorbell overtakes the held ones, so they arrive out of
/// posting order (newest first) in every run.
#[test]
fn sends_of_separate_doorbells_arrive_out_of_posting_order() {
    let (a, b) = strict_pair(50, 51, true);
    let ah = a.ah_to(&b);
    let src = Region::new(&a.pd, 8 * 64, ALL_ACCESS);
    let dst = Region::new(&b.pd, 8 * 64, ALL_ACCESS);
    for i in 0..8u8 {
        src.fill(usize::from(i) * 64, &[i + 1; 64]);
    }
    let mut reordered = 0;
    for seed in 1..=20 {
        a.dev.reseed_strict(seed).unwrap();
        for i in 0..8u64 {
            b.qp.post_recv(&recv(i, &[dst.sge(i as usize * 64, 64)]))
                .unwrap();
        }
        for i in 0..8u64 {
            let w = wr(
                &ah,
                b.qp.qpn(),
                i,
                SendOp::Send,
                &[src.sge(i as usize * 64, 64)],
            );
            a.qp.post_send_batch(&[w]).unwrap();
        }
        let got: Vec<u8> = (0..8)
            .map(|_| {
                let r = next(&b.cq, 10);
                assert_eq!((r.status, r.byte_len), (0, 64));
                dst.bytes(r.wr_id as usize * 64, 64)[0]
            })
            .collect();
        let mut sorted = got.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (1..=8).collect::<Vec<u8>>());
        // Newest first, unless the poster was descheduled between two posts for longer
        // than a lead's hold: then that doorbell runs before the next comes.
        reordered += u32::from(got != sorted);
        for _ in 0..8 {
            assert_eq!(next(&a.cq, 10).status, 0);
        }
    }
    assert_eq!(reordered, 20);
}

/// Sixteen RDMA writes in one doorbell, then ERR: every WR completes (OK or FLUSHED,
/// held ones included). Then a reset right after such a doorbell: no byte of the
/// target changes once the reset returned (held WQEs are dropped, not run later).
#[test]
fn held_wqes_are_flushed_by_err_and_dropped_by_reset() {
    let (a, b) = strict_pair(46, 47, true);
    let _known = b.ah_to(&a);
    let ah = a.ah_to(&b);
    let src = Region::new(&a.pd, 16 * 64, ALL_ACCESS);
    let dst = Region::new(&b.pd, 16 * 64, ALL_ACCESS);
    src.fill(0, &[0xee; 16 * 64]);
    let writes = |base: u64| -> Vec<SendWr> {
        (0..16u64)
            .map(|i| {
                let mut w = wr(
                    &ah,
                    b.qp.qpn(),
                    base + i,
                    SendOp::RdmaWrite,
                    &[src.sge(i as usize * 64, 64)],
                );
                w.remote = Some((dst.addr() + i * 64, dst.mr.rkey()));
                w
            })
            .collect()
    };
    a.dev.reseed_strict(3).unwrap();
    a.qp.post_send_batch(&writes(0)).unwrap();
    modify(&a.qp, 1, QpState::Err).unwrap();
    let mut ids: Vec<u64> = (0..16)
        .map(|_| {
            let c = next(&a.cq, 10);
            assert!(c.status == 0 || c.status == 1, "{c:?}"); // OK or FLUSHED
            c.wr_id
        })
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..16).collect::<Vec<_>>());
    none_within(&a.cq, 5);

    // RESET and back to RTS, then a doorbell followed at once by a reset.
    modify(&a.qp, 1, QpState::Reset).unwrap();
    to_rts(&a.qp);
    let mut held_any = false;
    for seed in 1..=20 {
        dst.fill(0, &[0; 16 * 64]);
        a.dev.reseed_strict(seed).unwrap();
        a.qp.post_send_batch(&writes(100)).unwrap();
        modify(&a.qp, 1, QpState::Reset).unwrap();
        let snapshot = dst.bytes(0, 16 * 64);
        held_any |= snapshot.contains(&0);
        std::thread::sleep(std::time::Duration::from_millis(3));
        assert_eq!(
            dst.bytes(0, 16 * 64),
            snapshot,
            "seed {seed}: a held WQE ran after the reset"
        );
        to_rts(&a.qp);
    }
    assert!(held_any, "some WQEs were held when the reset came");
    none_within(&a.cq, 5);
}
