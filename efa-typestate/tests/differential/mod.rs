//! The differential test's machinery: plans ([`plan`]), the requester that runs them
//! ([`run`]), the receiver ([`receiver`]) in this process or another ([`remote`]), and
//! what a run produced ([`Outcome`]).

mod plan;
mod receiver;
mod remote;

use efa_typestate::*;
pub use efa_typestate::{Backend, Context, CqOptions};
pub use plan::{Plan, KINDS};
pub use remote::{run_remote, serve_remote, CHILD_VAR};

use crate::common::direct::{sorted, Seen};
use crate::common::*;
use plan::*;
use receiver::Receiver;

/// What a run produced.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The requester's completions, sorted.
    pub sent: Vec<Seen>,
    /// The read sink's bytes.
    pub sink: Vec<u8>,
    /// What each queue-filling step saw: how many went in and the refusal.
    pub fills: Vec<String>,
    /// The receiver's side ([`Side::finish`]).
    pub received: String,
    pub backends: [Backend; 2],
}

impl Outcome {
    /// Fails unless `other` (the direct run) saw what `self` (the provider run) saw.
    pub fn assert_same(&self, other: &Outcome, seed: u64) {
        assert_eq!(self.backends, [Backend::Provider; 2], "seed {seed}");
        assert_eq!(other.backends, [Backend::Direct; 2], "seed {seed}");
        assert_eq!(self.fills, other.fills, "seed {seed}: queue fills");
        assert_eq!(self.sent, other.sent, "seed {seed}: requester completions");
        assert!(self.sink == other.sink, "seed {seed}: read bytes differ");
        assert_eq!(self.received, other.received, "seed {seed}: receiver side");
    }
}

/// The other side, wherever it runs.
pub trait Side {
    /// Its QP's endpoint and its write target and readable region.
    fn addresses(&self) -> (EndpointInfo, RemoteBuffer, RemoteBuffer);
    /// Learns the requester's endpoint (and makes its AH for it).
    fn meet(&mut self, requester: &EndpointInfo);
    /// Makes sure `k` receives are posted and not yet taken.
    fn ensure(&mut self, k: usize);
    /// Posts receives until the queue refuses one; what happened.
    fn fill(&mut self) -> String;
    /// Waits for `n` completions.
    fn expect(&mut self, n: usize);
    /// Everything it saw, as one line.
    fn finish(&mut self) -> String;
}

/// Runs `plan` with both sides in this process.
pub fn run_local(plan: &Plan, backend: Backend) -> Outcome {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx
        .create_ext_cq(CqOptions::new(256).backend(backend).sender_gid())
        .unwrap();
    let mut b = Receiver::new(&pd, &cq, plan, backend);
    let mut out = run(plan, backend, &ctx, &mut b);
    assert_eq!(b.backends(), out.backends, "the receiver's backend");
    out.backends = b.backends();
    out
}

/// The requester: runs `plan` against `peer` on a new QP of `ctx`.
pub fn run(plan: &Plan, backend: Backend, ctx: &Context, peer: &mut dyn Side) -> Outcome {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx
        .create_ext_cq(CqOptions::new(256).backend(backend))
        .unwrap();
    let cfg = QpConfig::srd()
        .depth(DEPTH, DEPTH)
        .sges(2, 2)
        .backend(backend);
    let a = rts_qp(&pd, &cq, &cfg, QKEY_A);
    let (b_ep, target, readable) = peer.addresses();
    peer.meet(&a.endpoint());
    let to_b = pd.connect(&b_ep).unwrap();
    let src = pd.register(plan.src.clone(), AccessFlags::empty()).unwrap();
    let sink = pd
        .register(
            vec![0u8; (plan.ops * SLOT) as usize],
            AccessFlags::LOCAL_WRITE,
        )
        .unwrap();
    let fill_src = pd.register(vec![0xf1u8; 16], AccessFlags::empty()).unwrap();
    let inline_max = (a.limits().max_inline_data()).min(32);
    let mut done = Vec::new();
    let mut fills = Vec::new();
    let mut slot = 0u32;
    let mut wr_id = 0u64;
    for step in &plan.steps {
        match step {
            Step::Batch(ops) => {
                peer.ensure(ops.iter().map(Op::receives).sum());
                // Two-SGE lists outlive the batch that borrows them.
                let lists: Vec<Option<SgeList<'_, 2>>> = ops
                    .iter()
                    .map(|op| match *op {
                        Op::Send {
                            at,
                            len,
                            split: Some(k),
                        } => {
                            let sge =
                                |at: u32, len: u32| src.sge(u64::from(at), u64::from(len)).unwrap();
                            Some(SgeList::new(&[sge(at, k), sge(at + k, len - k)]).unwrap())
                        }
                        _ => None,
                    })
                    .collect();
                let mut batch = SendBatch::<MAX_BATCH>::new(&a);
                let mut wrs = 0;
                let mut ones = 0;
                for (op, list) in ops.iter().zip(&lists) {
                    let off = slot * SLOT;
                    slot += 1;
                    let t = |len: u32| target.slice(u64::from(off), u64::from(len)).unwrap();
                    let s = |at: u32, len: u32| src.sge(u64::from(at), u64::from(len)).unwrap();
                    let id = wr_id;
                    wr_id += op.wrs() as u64;
                    wrs += op.wrs();
                    ones += op.receives();
                    match *op {
                        Op::Send {
                            at,
                            len,
                            split: None,
                        } => batch.send(id, &to_b, s(at, len)).unwrap(),
                        Op::Send { split: Some(_), .. } => {
                            batch.send(id, &to_b, list.as_ref().unwrap()).unwrap()
                        }
                        Op::Inline { at, len } => {
                            // A QP without inline room sends it as a plain SEND.
                            let len = len.min(inline_max.max(1));
                            let bytes = &src.as_slice()[at as usize..(at + len) as usize];
                            if inline_max == 0 {
                                batch.send(id, &to_b, s(at, len)).unwrap()
                            } else {
                                batch.send_inline(id, &to_b, bytes).unwrap()
                            }
                        }
                        Op::SendImm { at, len, imm } => {
                            batch.send_imm(id, &to_b, s(at, len), imm).unwrap()
                        }
                        Op::Write { at, len } => {
                            batch.write(id, &to_b, s(at, len), t(len)).unwrap()
                        }
                        Op::WriteImm { at, len, imm } => {
                            batch.write_imm(id, &to_b, s(at, len), t(len), imm).unwrap()
                        }
                        Op::Read { from, len } => batch
                            .read(
                                id,
                                &to_b,
                                sink.sge(u64::from(off), u64::from(len)).unwrap(),
                                readable.slice(u64::from(from), u64::from(len)).unwrap(),
                            )
                            .unwrap(),
                        Op::BadWrite { at, len } => {
                            let bad = RemoteBuffer::new(
                                target.addr() + u64::from(off),
                                u64::from(len),
                                target.rkey() ^ 0x55,
                            );
                            batch.write(id, &to_b, s(at, len), bad).unwrap()
                        }
                        Op::Chunked { at, len, chunk } => {
                            let mut chunks =
                                RdmaChunks::new(&src, u64::from(at), t(len), chunk).unwrap();
                            let n = batch.fill_writes(id, &to_b, &mut chunks).unwrap();
                            assert_eq!(n, op.wrs(), "{op:?}");
                        }
                    }
                }
                assert_eq!(batch.len(), wrs);
                // SAFETY: every buffer belongs to an Mr that lives to the end of the run;
                // the sink is read only after every completion was polled.
                unsafe { a.post_send(&batch) }.unwrap();
                done.extend(expect_n(&cq, wrs));
                peer.expect(ones);
            }
            Step::FillSend => {
                let mut n = 0usize;
                let err = loop {
                    let mut one = SendBatch::<1>::new(&a);
                    one.write(
                        wr_id,
                        &to_b,
                        fill_src.sge(0, 16).unwrap(),
                        target.slice(0, 16).unwrap(),
                    )
                    .unwrap();
                    // SAFETY: as above.
                    match unsafe { a.post_send(&one) } {
                        Ok(()) => {
                            n += 1;
                            wr_id += 1;
                        }
                        Err(e) => break e,
                    }
                    assert!(n <= 4 * DEPTH as usize, "the send queue never filled");
                };
                fills.push(format!("send queue took {n}, then {err:?}"));
                done.extend(expect_n(&cq, n));
            }
            Step::FillRecv => fills.push(peer.fill()),
        }
    }
    expect_none(&cq, std::time::Duration::from_millis(5));
    let received = peer.finish();
    Outcome {
        sent: sorted(done, a.qpn(), b_ep.qpn(), 0),
        sink: sink.as_slice().to_vec(),
        fills,
        received,
        backends: [a.backend(), cq.backend()],
    }
}
