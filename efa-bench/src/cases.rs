//! The cases, and one runner both the criterion bench and the callgrind counter use:
//! untimed set-up, the timed call of one side's function, untimed clean-up.

use std::hint::black_box;
use std::time::{Duration, Instant};

use efa::*;

use crate::ffi::{self, VsComp, VsStaged};
use crate::ours;
use crate::rig::{drain, Rig, BATCH, MSG, ROUND_TRIP, SLOTS};

/// Which side of a case runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The safe API (src/ours.rs) through libefa's post and poll functions
    /// ([`Backend::Provider`]).
    Ours,
    /// The same safe-API code on the direct data path ([`Backend::Direct`]): WQEs written
    /// into the rings by efa-typestate itself (issue 26).
    Direct,
    /// The C baseline (csrc/vs_c.c), through libefa's `ibv_wr_*` helpers.
    C,
}

impl Side {
    /// Every side, in table order.
    pub const ALL: [Side; 3] = [Side::Ours, Side::Direct, Side::C];
    /// `"ours"`, `"direct"` or `"c"` (criterion's function id, the counter's argument).
    pub fn name(self) -> &'static str {
        match self {
            Side::Ours => "ours",
            Side::Direct => "direct",
            Side::C => "c",
        }
    }
    /// The side called `name`.
    pub fn from_name(name: &str) -> Option<Side> {
        Side::ALL.into_iter().find(|s| s.name() == name)
    }
    /// The backend of the rig this side runs on (the C side posts through libefa, so
    /// its rig's QPs and CQs must be the provider's).
    pub fn backend(self) -> Backend {
        match self {
            Side::Direct => Backend::Direct,
            Side::Ours | Side::C => Backend::Provider,
        }
    }
}

/// One data-path operation measured on every side. A *unit* is what one timed call
/// does once: one post for the single-WR cases, one doorbell of 32 for the batch, one
/// poll for the empty polls, 32 completions for the drains, one 32-WR build, one
/// encode + decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    /// One SEND of 64 bytes, one SGE, one doorbell.
    Send,
    /// One RDMA write of 64 bytes, one doorbell.
    Write,
    /// One inline SEND of 16 bytes, one doorbell.
    SendInline,
    /// One SEND of two 32-byte SGEs, one doorbell.
    Send2Sge,
    /// 32 RDMA writes of 64 bytes in one doorbell.
    WriteBatch,
    /// 16 receives posted, 16 SENDs in one doorbell, 32 completions drained.
    RoundTrip,
    /// Polling an empty extended CQ.
    PollEmptyExt,
    /// Polling an empty classic CQ.
    PollEmptyClassic,
    /// Draining 32 receive completions from an extended CQ.
    DrainExt,
    /// Draining 32 receive completions from a classic CQ.
    DrainClassic,
    /// Building a batch of 32 RDMA writes (with every check) without posting it.
    BuildBatch,
    /// `EndpointInfo` encode to 24 bytes and decode (with its checks).
    Endpoint,
}

impl Case {
    /// Every case, in table order.
    pub const ALL: [Case; 12] = [
        Case::Send,
        Case::Write,
        Case::SendInline,
        Case::Send2Sge,
        Case::WriteBatch,
        Case::RoundTrip,
        Case::PollEmptyExt,
        Case::PollEmptyClassic,
        Case::DrainExt,
        Case::DrainClassic,
        Case::BuildBatch,
        Case::Endpoint,
    ];

    /// Short name: criterion's group, the counter's argument, the table's first column.
    pub fn name(self) -> &'static str {
        match self {
            Case::Send => "send_sge",
            Case::Write => "write",
            Case::SendInline => "send_inline",
            Case::Send2Sge => "send_2sge",
            Case::WriteBatch => "write_batch32",
            Case::RoundTrip => "round_trip16",
            Case::PollEmptyExt => "poll_empty_ext",
            Case::PollEmptyClassic => "poll_empty_classic",
            Case::DrainExt => "drain32_ext",
            Case::DrainClassic => "drain32_classic",
            Case::BuildBatch => "build_batch32",
            Case::Endpoint => "endpoint_codec",
        }
    }

    /// The case called `name`.
    pub fn from_name(name: &str) -> Option<Case> {
        Case::ALL.into_iter().find(|c| c.name() == name)
    }

    /// What one unit is.
    pub fn describe(self) -> &'static str {
        match self {
            Case::Send => "SEND 64 B, 1 SGE, 1 doorbell",
            Case::Write => "RDMA write 64 B, 1 doorbell",
            Case::SendInline => "inline SEND 16 B, 1 doorbell",
            Case::Send2Sge => "SEND 2 x 32 B SGEs, 1 doorbell",
            Case::WriteBatch => "32 RDMA writes, 1 doorbell",
            Case::RoundTrip => "16 recv + 16 SEND + drain 32",
            Case::PollEmptyExt => "poll empty extended CQ",
            Case::PollEmptyClassic => "poll empty classic CQ",
            Case::DrainExt => "drain 32 recv, extended CQ",
            Case::DrainClassic => "drain 32 recv, classic CQ",
            Case::BuildBatch => "build 32-write batch, no post",
            Case::Endpoint => "EndpointInfo encode + decode",
        }
    }

    /// The function callgrind counts for `side` (its unmangled symbol).
    pub fn symbol(self, side: Side) -> &'static str {
        let (ours, c) = match self {
            Case::Send => ("vs_ours_send", "vs_c_send"),
            Case::Write => ("vs_ours_write", "vs_c_write"),
            Case::SendInline => ("vs_ours_send_inline", "vs_c_send_inline"),
            Case::Send2Sge => ("vs_ours_send_2sge", "vs_c_send_2sge"),
            Case::WriteBatch => ("vs_ours_write_batch", "vs_c_write_batch"),
            Case::RoundTrip => ("vs_ours_round_trip", "vs_c_round_trip"),
            Case::PollEmptyExt => ("vs_ours_poll_empty_ex", "vs_c_poll_empty_ex"),
            Case::PollEmptyClassic => ("vs_ours_poll_empty", "vs_c_poll_empty"),
            Case::DrainExt => ("vs_ours_drain_ex", "vs_c_drain_ex"),
            Case::DrainClassic => ("vs_ours_drain", "vs_c_drain"),
            Case::BuildBatch => ("vs_ours_build_writes", "vs_c_build_writes"),
            Case::Endpoint => ("vs_ours_endpoint", "vs_c_endpoint"),
        };
        match side {
            Side::Ours | Side::Direct => ours,
            Side::C => c,
        }
    }

    /// Units per timed section: as many as the queues hold between clean-ups.
    pub fn group(self) -> u64 {
        match self {
            Case::Send | Case::Write | Case::SendInline | Case::Send2Sge => SLOTS as u64,
            Case::WriteBatch | Case::RoundTrip | Case::DrainExt | Case::DrainClassic => 4,
            Case::PollEmptyExt | Case::PollEmptyClassic | Case::BuildBatch | Case::Endpoint => {
                1 << 12
            }
        }
    }
}

/// A C function's negative errno (or unexpected result) as an error.
fn c_result(rc: i64) -> Result<()> {
    if rc < 0 {
        return Err(Error::Verb {
            verb: Verb::PostSend,
            errno: Errno(-rc as i32),
        });
    }
    Ok(())
}

/// Runs `units` units of `case` on `side` and returns the time spent in that side's
/// functions only (set-up and clean-up are untimed). Fails on any error of either side,
/// or when a completion carries an unexpected status.
///
/// # Panics
/// When `rig` is not of the side's backend ([`Side::backend`]): a harness bug.
pub fn run(rig: &mut Rig, case: Case, side: Side, units: u64) -> Result<Duration> {
    assert_eq!(
        rig.backend(),
        side.backend(),
        "{} on the wrong rig",
        side.name()
    );
    let mut total = Duration::ZERO;
    let mut done = 0u64;
    while done < units {
        let k = case.group().min(units - done);
        total += section(rig, case, side, k as u32, done)?;
        done += k;
    }
    Ok(total)
}

/// One timed section of `k` units, with its set-up and clean-up.
fn section(rig: &mut Rig, case: Case, side: Side, k: u32, base: u64) -> Result<Duration> {
    let r = &rig.raw;
    let timed = |f: &mut dyn FnMut() -> Result<()>| -> Result<Duration> {
        let t = Instant::now();
        f()?;
        Ok(t.elapsed())
    };
    match case {
        Case::Send | Case::SendInline | Case::Send2Sge => {
            rig.post_recvs(&rig.b, &rig.inbox_b, k)?;
            let t = timed(&mut || match side {
                Side::Ours | Side::Direct => match case {
                    Case::Send => ours::vs_ours_send(rig, MSG, base, k),
                    Case::SendInline => ours::vs_ours_send_inline(rig, base, k),
                    _ => ours::vs_ours_send_2sge(rig, MSG / 2, base, k),
                },
                Side::C => {
                    let (bytes, len) = (rig.inline.as_ptr(), rig.inline.len() as u32);
                    let mask = SLOTS - 1;
                    // SAFETY: the raw views of live rig objects; `src` holds SLOTS slots
                    // of 2 x MSG bytes; the inline buffer is `len` bytes long.
                    let rc = unsafe {
                        match case {
                            Case::Send => {
                                ffi::vs_c_send(r.qpx_a, &r.to_b, &r.src, MSG, mask, base, k)
                            }
                            Case::SendInline => {
                                ffi::vs_c_send_inline(r.qpx_a, &r.to_b, bytes, len, base, k)
                            }
                            _ => ffi::vs_c_send_2sge(
                                r.qpx_a,
                                &r.to_b,
                                &r.src,
                                MSG / 2,
                                mask,
                                base,
                                k,
                            ),
                        }
                    };
                    c_result(rc as i64)
                }
            })?;
            drain(&*rig.cq_a, k)?;
            drain(&*rig.cq_b, k)?;
            Ok(t)
        }
        Case::Write => {
            let t = timed(&mut || match side {
                Side::Ours | Side::Direct => ours::vs_ours_write(rig, MSG, base, k),
                // SAFETY: raw views of live rig objects; src and target hold SLOTS x MSG.
                Side::C => c_result(unsafe {
                    ffi::vs_c_write(r.qpx_a, &r.to_b, &r.src, &r.target, MSG, SLOTS - 1, base, k)
                } as i64),
            })?;
            drain(&*rig.cq_a, k)?;
            Ok(t)
        }
        Case::WriteBatch => {
            let t = timed(&mut || {
                for j in 0..k as u64 {
                    let id = (base + j) * BATCH as u64;
                    match side {
                        Side::Ours | Side::Direct => ours::vs_ours_write_batch(
                            &mut rig.a,
                            &rig.to_b,
                            &rig.src,
                            rig.remote,
                            (MSG, BATCH, id),
                        )?,
                        // SAFETY: raw views of live rig objects; src and target hold
                        // BATCH x MSG bytes.
                        Side::C => c_result(unsafe {
                            ffi::vs_c_write_batch(
                                r.qpx_a, &r.to_b, &r.src, &r.target, MSG, BATCH, id,
                            )
                        } as i64)?,
                    }
                }
                Ok(())
            })?;
            drain(&*rig.cq_a, k * BATCH)?;
            Ok(t)
        }
        Case::RoundTrip => {
            // Each side's completions go to a buffer made before the timed part (as
            // long-lived buffers are in real code): none is zeroed or placed on the
            // stack inside it (see `Outputs`).
            let mut o = Outputs::new();
            timed(&mut || {
                for j in 0..k as u64 {
                    let id = (base + j) * ROUND_TRIP as u64;
                    match side {
                        Side::Ours | Side::Direct => {
                            let out = &mut *o.ours;
                            out.clear();
                            let parts = ours::RoundTripRig {
                                receiver: &rig.e,
                                inbox: &rig.inbox_e,
                                to: &rig.to_e,
                                src: &rig.src,
                                cq: &rig.cq_a,
                            };
                            let args = (MSG, ROUND_TRIP, id);
                            ours::vs_ours_round_trip(&mut rig.a, parts, args, out)?;
                            check_ours(out, 2 * ROUND_TRIP)?;
                        }
                        Side::C => {
                            let out = &mut *o.c;
                            // SAFETY: raw views of live rig objects; `out` has room for 2n.
                            let n = unsafe {
                                ffi::vs_c_round_trip(
                                    r.qpx_a,
                                    r.qp_e,
                                    r.cqx_a,
                                    &r.to_e,
                                    &r.src,
                                    &r.inbox_e,
                                    MSG,
                                    ROUND_TRIP,
                                    id,
                                    out.as_mut_ptr(),
                                )
                            };
                            c_result(n as i64)?;
                            check_c(&out[..n as usize], 2 * ROUND_TRIP)?;
                        }
                    }
                }
                Ok(())
            })
        }
        Case::PollEmptyExt | Case::PollEmptyClassic => {
            let ext = case == Case::PollEmptyExt;
            timed(&mut || match side {
                Side::Ours | Side::Direct => {
                    let found = if ext {
                        ours::vs_ours_poll_empty_ex(rig, k)?
                    } else {
                        ours::vs_ours_poll_empty(rig, k)?
                    };
                    c_result(if found == 0 { 0 } else { -11 })
                }
                // SAFETY: live CQs no QP uses.
                Side::C => c_result(unsafe {
                    if ext {
                        ffi::vs_c_poll_empty_ex(r.cqx_idle, k)
                    } else {
                        ffi::vs_c_poll_empty(r.cq_idle_classic, k)
                    }
                } as i64),
            })
        }
        Case::DrainExt | Case::DrainClassic => drain_section(rig, case, side, k, base),
        Case::BuildBatch => timed(&mut || {
            for j in 0..k as u64 {
                let id = j * BATCH as u64;
                match side {
                    Side::Ours | Side::Direct => {
                        black_box(ours::vs_ours_build_writes(rig, MSG, BATCH, id)?);
                    }
                    Side::C => {
                        let mut out =
                            core::mem::MaybeUninit::<[VsStaged; BATCH as usize]>::uninit();
                        // SAFETY: `out` has room for BATCH staged WRs (the C side writes,
                        // never reads them); the descriptors are the rig's.
                        let n = unsafe {
                            ffi::vs_c_build_writes(
                                out.as_mut_ptr().cast(),
                                BATCH,
                                &r.limits,
                                &r.to_b,
                                &r.src,
                                &r.target,
                                MSG,
                                BATCH,
                                id,
                            )
                        };
                        c_result(n as i64)?;
                        black_box(&out);
                    }
                }
            }
            Ok(())
        }),
        Case::Endpoint => {
            let ep = rig.a.endpoint();
            let (gid, qpn, qkey) = (ep.gid(), ep.qpn(), ep.qkey());
            timed(&mut || {
                let sum = match side {
                    Side::Ours | Side::Direct => ours::vs_ours_endpoint(&gid, qpn, qkey, k)?,
                    // SAFETY: `gid` is 16 readable bytes.
                    Side::C => unsafe { ffi::vs_c_endpoint(gid.as_bytes().as_ptr(), qpn, qkey, k) },
                };
                c_result(black_box(sum))
            })
        }
    }
}

/// `k` drains of 32 receive completions, each prepared (untimed) by 32 receives and a
/// doorbell of 32 SENDs whose own completions are polled first.
fn drain_section(rig: &Rig, case: Case, side: Side, k: u32, base: u64) -> Result<Duration> {
    let ext = case == Case::DrainExt;
    let (qp, inbox, to) = if ext {
        (&rig.b, &rig.inbox_b, &rig.to_b)
    } else {
        (&rig.c, &rig.inbox_c, &rig.to_c)
    };
    rig.post_recvs(qp, inbox, k * BATCH)?;
    for j in 0..k as u64 {
        let mut s = SendBatch::<{ BATCH as usize }>::new(&rig.a);
        for i in 0..BATCH as u64 {
            s.send(
                (base + j) * BATCH as u64 + i,
                to,
                rig.src.sge(i * 64, MSG as u64)?,
            )?;
        }
        // SAFETY: `src` is never written while registered.
        unsafe { rig.a.post_send(&s)? };
    }
    // Every SEND completed: their receives completed first (SRD acknowledges delivery).
    drain(&*rig.cq_a, k * BATCH)?;
    let r = &rig.raw;
    let mut total = Duration::ZERO;
    let mut o = Outputs::new();
    for _ in 0..k {
        let t = Instant::now();
        match side {
            Side::Ours | Side::Direct if ext => {
                let out = &mut *o.ours_half;
                out.clear();
                let res = ours::vs_ours_drain_ex(rig, out);
                total += t.elapsed();
                res?;
                check_ours(out, BATCH)?;
            }
            Side::Ours | Side::Direct => {
                let out = &mut *o.ours_wc;
                out.clear();
                let res = ours::vs_ours_drain(rig, out);
                total += t.elapsed();
                res?;
                if out.len() != BATCH as usize {
                    return c_result(-5).map(|()| total);
                }
                out.iter().try_for_each(|c| c.result().map(drop))?;
            }
            Side::C if ext => {
                let out = &mut o.c[..BATCH as usize];
                // SAFETY: the live CQ of `b`; `out` has room for BATCH completions.
                let n = unsafe { ffi::vs_c_drain_ex(r.cqx_b, out.as_mut_ptr(), BATCH) };
                total += t.elapsed();
                c_result(n as i64)?;
                check_c(&out[..n as usize], BATCH)?;
            }
            Side::C => {
                let out = &mut *o.c_wc;
                // SAFETY: the live classic CQ of `c`; `out` has room for BATCH completions.
                let n = unsafe { ffi::vs_c_drain(r.cq_c, out.as_mut_ptr(), BATCH) };
                total += t.elapsed();
                c_result(n as i64)?;
                if n as u32 != BATCH || out.iter().any(|w| w.status != 0) {
                    return c_result(-5).map(|()| total);
                }
            }
        }
    }
    Ok(total)
}

fn check_ours(out: &[Completion], n: u32) -> Result<()> {
    if out.len() != n as usize {
        return c_result(-5);
    }
    out.iter().try_for_each(|c| c.result().map(drop))
}

fn check_c(out: &[VsComp], n: u32) -> Result<()> {
    if out.len() != n as usize || out.iter().any(|c| c.status != 0) {
        return c_result(-5);
    }
    Ok(())
}

/// The completion buffers of one section, made before its timed part for both sides
/// alike: on the heap, and never zeroed or placed on the stack inside it. (They were
/// stack arrays made inside it: the C side zeroed its own there, and moving only ours
/// from the stack to the heap changed its `round_trip16` time by 8% with the same
/// instructions.)
struct Outputs {
    ours: Box<ArrayVec<Completion, { 2 * ROUND_TRIP as usize }>>,
    ours_half: Box<ArrayVec<Completion, { BATCH as usize }>>,
    ours_wc: Box<ArrayVec<WorkCompletion, { BATCH as usize }>>,
    c: Box<[VsComp; 2 * ROUND_TRIP as usize]>,
    c_wc: Box<[ffi::ibv_wc; BATCH as usize]>,
}

impl Outputs {
    fn new() -> Outputs {
        Outputs {
            ours: Box::default(),
            ours_half: Box::default(),
            ours_wc: Box::default(),
            c: Box::new([VsComp::default(); 2 * ROUND_TRIP as usize]),
            // SAFETY: all-zero is a valid ibv_wc (integers and a union of integers).
            c_wc: Box::new(unsafe { core::mem::zeroed() }),
        }
    }
}
