//! Helpers of the direct-backend tests (`direct_backend*.rs`): the two sides' CQ options,
//! completions reduced to what the backends must agree on, and posting shorthands.

use efa_typestate::*;

/// Ext CQ options of the two sides (b reports sender GIDs and unsolicited writes).
pub fn cq_opts(depth: u32, backend: Backend, b_side: bool) -> CqOptions {
    let o = CqOptions::new(depth).backend(backend);
    if b_side {
        o.unsolicited_flag().sender_gid()
    } else {
        o
    }
}

/// What a completion says, with the QP numbers made relative to the pair (`own`, `peer`)
/// and the AH number dropped (the two pairs' AHs differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Seen {
    pub wr_id: u64,
    pub status: u32,
    pub vendor_err: u32,
    pub opcode: u32,
    pub byte_len: u32,
    pub imm: Option<u32>,
    pub flags: u32,
    pub own_qp: bool,
    pub src_is_peer: bool,
    /// Receives: the slid is the receiver's AH number for the sender (or AH_UNKNOWN).
    pub slid_is_peer_ah: bool,
    pub has_sender_gid: bool,
}

pub fn seen(c: &Completion, own: u32, peer: u32, peer_ah: u16) -> Seen {
    Seen {
        wr_id: c.wr_id(),
        status: c.status().0,
        vendor_err: c.efa_status().0,
        opcode: c.opcode().0,
        byte_len: c.byte_len(),
        imm: c.imm(),
        flags: c.flags().bits(),
        own_qp: c.qp_num() == own,
        src_is_peer: !c.opcode().is_recv() || c.src_qp() == peer,
        slid_is_peer_ah: if c.opcode().is_recv() {
            c.slid() == peer_ah
        } else {
            c.slid() == 0
        },
        has_sender_gid: c.sender_gid().is_some(),
    }
}

/// Completions of one CQ, sorted by what they say (SRD completes out of order).
/// `peer_ah`: the receiver's AH number for the sender ([`AH_UNKNOWN`] if it has none).
pub fn sorted(v: Vec<Completion>, own: u32, peer: u32, peer_ah: u16) -> Vec<Seen> {
    let mut s: Vec<Seen> = v.iter().map(|c| seen(c, own, peer, peer_ah)).collect();
    s.sort();
    s
}

/// Posts the sends of `build` in one batch.
#[allow(unused_macros)] // not every test file posts this way
macro_rules! post {
    ($qp:expr, $n:literal, |$s:ident| $build:block) => {{
        let mut $s = SendBatch::<$n>::new(&$qp);
        $build;
        // SAFETY: every buffer posted in these tests belongs to a registered Mr that lives
        // to the end of the test and is not touched before its completion is polled.
        unsafe { $qp.post_send(&$s) }
    }};
}

pub fn post_recvs<P, S: RecvReady>(qp: &Qp<P, S>, first_id: u64, bufs: &[&[Sge<'_>]]) {
    let mut r = RecvBatch::<8>::new(qp);
    let lists: Vec<SgeList<'_, 2>> = bufs.iter().map(|b| SgeList::new(b).unwrap()).collect();
    for (i, l) in lists.iter().enumerate() {
        r.push(first_id + i as u64, l).unwrap();
    }
    // SAFETY: as in `post!`: receive buffers are read only after their completions.
    unsafe { qp.post_recv(&r) }.unwrap();
}

/// The receive side of a run as the backends must agree on it whatever the arrival order:
/// SRD does not order messages and receives are taken in posting order, so which receive
/// took which message varies; its wr_ids are dropped and the rest sorted.
pub fn unordered(v: Vec<Seen>) -> Vec<Seen> {
    let mut v: Vec<Seen> = v.into_iter().map(|s| Seen { wr_id: 0, ..s }).collect();
    v.sort();
    v
}

/// The messages SENDs landed, each read from the receive that took it (receive
/// `first_id + k` is `dst[k * slot..]`, its payload after `skip` bytes), sorted.
pub fn messages(
    done: &[Completion],
    dst: &[u8],
    (first_id, slot, skip): (u64, usize, usize),
) -> Vec<u8> {
    let mut m: Vec<Vec<u8>> = done
        .iter()
        .filter(|c| c.opcode() == WcOpcode::RECV)
        .map(|c| {
            let at = (c.wr_id() - first_id) as usize * slot + skip;
            dst[at..at + c.byte_len() as usize - skip].to_vec()
        })
        .collect();
    m.sort();
    m.concat()
}
