//! Seeded random plans of work for the differential test.

/// A small deterministic generator (splitmix64): the same seed gives the same plan on
/// every machine, with no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5eed_d1ff_e7e0_0000)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + (self.next() % u64::from(hi - lo + 1)) as u32
    }
    /// True with probability `n / d`.
    pub fn chance(&mut self, n: u32, d: u32) -> bool {
        self.range(1, d) <= n
    }
}

/// Bytes of the source buffer ops send from.
pub const SRC_LEN: u32 = 16 * 1024;
/// Bytes of write target (and read sink) each op owns.
pub const SLOT: u32 = 4096;
/// Bytes of one receive buffer (two SGEs of half each).
pub const RECV_SLOT: u32 = 1024;
/// Receive buffers, used round-robin (more than the receive queue holds).
pub const RECV_SLOTS: u32 = 64;
/// Bytes of the peer's readable region.
pub const READABLE_LEN: u32 = 8192;
/// Queue depths: small, so the rings wrap many times per plan.
pub const DEPTH: u32 = 32;
/// Most WRs in one batch.
pub const MAX_BATCH: usize = 16;

/// One work request (or, for `Chunked`, a few) of a batch. Offsets into the source.
#[derive(Clone, Debug)]
pub enum Op {
    /// A SEND of one SGE, or of two when `split` (the first SGE's length) is set.
    Send {
        at: u32,
        len: u32,
        split: Option<u32>,
    },
    /// A SEND of inline data (at most the QP's inline size, capped at 32).
    Inline {
        at: u32,
        len: u32,
    },
    SendImm {
        at: u32,
        len: u32,
        imm: u32,
    },
    Write {
        at: u32,
        len: u32,
    },
    WriteImm {
        at: u32,
        len: u32,
        imm: u32,
    },
    /// An RDMA read of the peer's readable region from `from`.
    Read {
        from: u32,
        len: u32,
    },
    /// One write split into `chunk`-byte pieces (an `RdmaChunks`), one WR each.
    Chunked {
        at: u32,
        len: u32,
        chunk: u32,
    },
    /// A write with a wrong rkey: it completes with a status, the QP keeps working.
    BadWrite {
        at: u32,
        len: u32,
    },
}

impl Op {
    /// WRs it posts.
    pub fn wrs(&self) -> usize {
        match *self {
            Op::Chunked { len, chunk, .. } => len.div_ceil(chunk) as usize,
            _ => 1,
        }
    }
    /// Receives it consumes at the peer.
    pub fn receives(&self) -> usize {
        usize::from(matches!(
            self,
            Op::Send { .. } | Op::Inline { .. } | Op::SendImm { .. } | Op::WriteImm { .. }
        ))
    }
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Send { split: None, .. } => "send",
            Op::Send { .. } => "send with two SGEs",
            Op::Inline { .. } => "inline send",
            Op::SendImm { .. } => "send with immediate",
            Op::Write { .. } => "write",
            Op::WriteImm { .. } => "write with immediate",
            Op::Read { .. } => "read",
            Op::Chunked { .. } => "chunked write",
            Op::BadWrite { .. } => "write that fails",
        }
    }
}

/// One step of a plan.
#[derive(Clone, Debug)]
pub enum Step {
    /// Ops posted as one batch (one doorbell), then all their completions awaited.
    Batch(Vec<Op>),
    /// Single 16-byte writes posted one by one until the send queue refuses one.
    FillSend,
    /// Single receives posted until the receive queue refuses one (they stay posted).
    FillRecv,
}

/// Kinds of step and op a plan can hold.
pub const KINDS: usize = 11;

impl Step {
    pub fn kinds(&self) -> Vec<&'static str> {
        match self {
            Step::Batch(ops) => ops.iter().map(Op::kind).collect(),
            Step::FillSend => vec!["fill the send queue"],
            Step::FillRecv => vec!["fill the receive queue"],
        }
    }
}

/// A seed's plan.
pub struct Plan {
    pub seed: u64,
    pub steps: Vec<Step>,
    /// Ops that own a target/sink slot (every op of every batch).
    pub ops: u32,
    pub src: Vec<u8>,
    pub readable: Vec<u8>,
}

impl Plan {
    pub fn new(seed: u64) -> Plan {
        let mut r = Rng::new(seed);
        let src = (0..SRC_LEN).map(|_| r.next() as u8).collect();
        let readable = (0..READABLE_LEN).map(|_| r.next() as u8).collect();
        let mut steps = Vec::new();
        let mut ops = 0;
        for _ in 0..r.range(30, 50) {
            if r.chance(1, 16) {
                steps.push(Step::FillSend);
                continue;
            }
            if r.chance(1, 16) {
                steps.push(Step::FillRecv);
                continue;
            }
            let mut batch: Vec<Op> = Vec::new();
            let want = r.range(1, 12) as usize;
            while batch.len() < want {
                let op = op(&mut r);
                if batch.iter().map(Op::wrs).sum::<usize>() + op.wrs() > MAX_BATCH {
                    break;
                }
                batch.push(op);
            }
            ops += batch.len() as u32;
            steps.push(Step::Batch(batch));
        }
        Plan {
            seed,
            steps,
            ops,
            src,
            readable,
        }
    }
}

/// A source offset for `len` bytes.
fn at(r: &mut Rng, len: u32) -> u32 {
    r.range(0, SRC_LEN - len)
}

fn op(r: &mut Rng) -> Op {
    match r.next() % 17 {
        0..=2 => {
            let len = r.range(1, RECV_SLOT);
            Op::Send {
                at: at(r, len),
                len,
                split: None,
            }
        }
        3 | 4 => {
            let len = r.range(2, RECV_SLOT);
            let split = r.range(1, len - 1);
            Op::Send {
                at: at(r, len),
                len,
                split: Some(split),
            }
        }
        5 | 6 => {
            let len = r.range(1, 32);
            Op::Inline {
                at: at(r, len),
                len,
            }
        }
        7 => {
            let len = r.range(1, RECV_SLOT);
            let imm = r.next() as u32;
            Op::SendImm {
                at: at(r, len),
                len,
                imm,
            }
        }
        8 | 9 => {
            let len = r.range(1, SLOT);
            Op::Write {
                at: at(r, len),
                len,
            }
        }
        10 | 11 => {
            let len = r.range(1, SLOT);
            let imm = r.next() as u32;
            Op::WriteImm {
                at: at(r, len),
                len,
                imm,
            }
        }
        12 | 13 => {
            let len = r.range(1, SLOT);
            Op::Read {
                from: r.range(0, READABLE_LEN - len),
                len,
            }
        }
        14 | 15 => {
            let chunk = r.range(64, 1024);
            let len = r.range(chunk + 1, (chunk * 4).min(SLOT));
            Op::Chunked {
                at: at(r, len),
                len,
                chunk,
            }
        }
        _ => {
            let len = r.range(1, 256);
            Op::BadWrite {
                at: at(r, len),
                len,
            }
        }
    }
}
