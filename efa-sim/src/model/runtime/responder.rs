//! The responder: executes a request against this device's QPs and MRs (from the engine
//! thread for datagrams, or a same-process requester's thread) and writes the receive
//! completions. Every access of local memory is checked against a live MR of the target
//! QP's PD inside the caller's read section (see [`super::trust`]).

use super::requester::STATUS_RNR;
use super::stats::bump;
use super::Runtime;
use crate::model::mem::{self, Data, Place};
use crate::model::recv_queue::{Head, RxBufs};
use crate::model::{
    qp, Gid, Qp, QpState, QpType, Sge, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};
use crate::rcu::Guard;
use crate::ring::cqe::{Cqe, NO_AH};
use crate::sysfs::counters::port::*;
use crate::transport::wire::{self, Header, Op};
use efa_sys::io::{queue_type, send_op_type};
use efa_sys::vendor::comp_status as st;
use std::net::SocketAddrV4;

/// Bytes of a UD receive buffer left before the payload (GRH area).
pub const UD_GRH: usize = 40;

/// What the responder does with a request.
pub(crate) enum Outcome {
    /// Answer with this status.
    Respond(u8),
    /// Drop it silently (the requester times out).
    Drop,
    /// A bulk read whose rkey and range are valid: answer [`wire::STATUS_PULL`] with the
    /// host address of the source, from which the requester copies the data itself.
    Pull(u64),
}

/// A QP state that accepts incoming requests.
fn receiving(s: QpState) -> bool {
    matches!(s, QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe)
}

impl Runtime {
    /// The receiver-side AH number of the sender and, for an unknown sender on a CQ that
    /// reports it, the sender's GID.
    fn receiver_info(qp: &Qp, h: &Header, g: &Guard) -> (u16, Option<Gid>) {
        let slid = qp.pd().ah_number_of(&h.src_gid, g);
        let sgid = (slid == NO_AH && qp.recv_cq().options().with_sgid).then_some(h.src_gid);
        (slid, sgid)
    }

    /// A receive completion of `qp` for request `h`.
    fn recv_cqe(qp: &Qp, h: &Header, g: &Guard, req_id: u16, op_type: u8, imm: Option<u32>) -> Cqe {
        let (slid, sgid) = Self::receiver_info(qp, h, g);
        Cqe {
            req_id,
            status: 0,
            q_type: queue_type::RECV,
            op_type,
            has_imm: imm.is_some(),
            unsolicited: false,
            qp_num: qp.qpn() as u16,
            length: h.total_len,
            ah: slid,
            src_qp: h.src_qpn,
            imm: imm.unwrap_or(0),
            src_gid: sgid,
        }
    }

    /// Executes one SRD request against this device's QPs and MRs, inside the caller's
    /// read section `g`. For a successful small RDMA read, `read_src` receives where
    /// the `h.total_len` bytes to answer with are (valid while `g` is open: the
    /// caller copies them out before closing it). `from` is the datagram's source; `None`
    /// for the same-process direct path, whose header this process built itself and
    /// whose data are the requester's validated ranges.
    #[inline(always)]
    pub(crate) fn execute(
        &self,
        h: &Header,
        data: Data<'_>,
        from: Option<SocketAddrV4>,
        g: &Guard,
        read_src: &mut Option<Place>,
    ) -> Outcome {
        match self.qp(u32::from(h.dst_qpn), g) {
            Some(qp) if qp.qp_type() == QpType::Srd && receiving(qp.state()) => {
                self.execute_on(qp, h, data, from, g, read_src)
            }
            _ => Outcome::Respond(st::REMOTE_ERROR_BAD_DEST_QPN as u8),
        }
    }

    #[inline(always)]
    fn execute_on(
        &self,
        qp: &Qp,
        h: &Header,
        data: Data<'_>,
        from: Option<SocketAddrV4>,
        g: &Guard,
        read_src: &mut Option<Place>,
    ) -> Outcome {
        if h.qkey != qp.qkey() {
            bump(&self.stats.qkey_violations);
            self.hw.add(RX_DROPS, 1);
            return Outcome::Drop;
        }
        let imm = (h.flags & wire::FLAG_IMM != 0).then_some(h.imm);
        if h.op == Op::Send {
            if data.len() != h.total_len as usize || h.flags & wire::FLAG_FAST != 0 {
                bump(&self.stats.malformed);
                return Outcome::Drop;
            }
            return self.deliver_send(qp, h, data, imm, 0, g);
        }
        if qp.pd().ah_number_of(&h.src_gid, g) == NO_AH {
            return Outcome::Respond(st::REMOTE_ERROR_UNKNOWN_PEER as u8);
        }
        let len = h.total_len as usize;
        let (need, write) = if h.op == Op::Write {
            (ACCESS_REMOTE_WRITE, true)
        } else {
            (ACCESS_REMOTE_READ, false)
        };
        let fast = h.flags & wire::FLAG_FAST != 0;
        let commit = h.flags & wire::FLAG_COMMIT != 0;
        let inline_bad = if commit {
            !data.is_empty() || !write || imm.is_none() || fast
        } else if write {
            data.len() != len
        } else {
            // A read answered in one datagram; the same-process path copies any length.
            from.is_some() && len > wire::MAX_DATA
        };
        if (!fast && inline_bad) || (!write && imm.is_some()) {
            bump(&self.stats.malformed);
            return Outcome::Drop;
        }
        // Solicited write-with-imm needs a posted receive (checked before any byte moves).
        let unsolicited = qp.efa_flags() & qp::QP_FLAG_UNSOLICITED_WRITE_RECV != 0;
        if imm.is_some() && !unsolicited && !qp.rq_dev().has_posted(self) {
            return Outcome::Respond(STATUS_RNR);
        }
        // A same-process requester's buffer must be registered memory of this process.
        if fast && !commit && h.pid == self.pid && !self.config.no_process_vm {
            let local_need = if write { 0 } else { ACCESS_LOCAL_WRITE };
            if !Runtime::own_range_registered(h.local_addr, len as u64, local_need, g) {
                bump(&self.stats.malformed);
                return Outcome::Drop;
            }
        }
        // process_vm_* only for the process that really sent this request.
        let proven = !fast
            || commit
            || self.config.no_process_vm
            || from.map_or(true, |f| self.sender_proven(h, f));
        let target = self
            .mrs()
            .get(h.rkey, g)
            .filter(|mr| core::ptr::eq(&*mr.pd, &**qp.pd()))
            .and_then(|mr| mr.place(h.remote_addr, len as u64, need));
        let Some(at) = target else {
            return Outcome::Respond(st::REMOTE_ERROR_BAD_ADDRESS as u8);
        };
        if commit {
            // Chunked data already landed; only the immediate is left.
        } else if fast {
            if self.config.no_process_vm {
                return Outcome::Respond(wire::STATUS_FALLBACK);
            }
            if !proven {
                bump(&self.stats.unproven);
                return Outcome::Respond(wire::STATUS_FALLBACK);
            }
            // GPU memory here: process_vm_* cannot reach it, the data moves in chunks.
            let Some(host) = at.host() else {
                return Outcome::Respond(wire::STATUS_FALLBACK);
            };
            if !write {
                // The requester copies a bulk read into its buffer itself, while the read
                // is still pending there (see `super::pull`): never this process, which
                // cannot tell whether that buffer is still the requester's to write.
                self.count_served(false, len);
                return Outcome::Pull(host as u64);
            }
            // SAFETY: host..host+len is inside our live MR (read section open).
            let copy = || unsafe { mem::pull_from_process(h.pid, h.local_addr, host, len) };
            // A datagram from a requester of this process: copy only while it still waits
            // for this request (not after its QP was reset, flushed or destroyed).
            let r = if from.is_some() && h.pid == self.pid {
                match Runtime::while_requested(h, copy) {
                    Some(r) => r,
                    None => return Outcome::Drop,
                }
            } else {
                copy()
            };
            if r.is_err() {
                return Outcome::Respond(wire::STATUS_FALLBACK);
            }
            bump(&self.stats.process_vm);
        } else if write {
            // SAFETY: at..at+len is inside our live MR with REMOTE_WRITE (section open).
            if unsafe { data.write_to(at, 0, len) }.is_err() {
                return Outcome::Respond(st::REMOTE_ERROR_BAD_ADDRESS as u8);
            }
        } else {
            *read_src = Some(at);
        }
        if !commit {
            self.count_served(write, len);
        }
        if let Some(imm) = imm {
            let mut c = Self::recv_cqe(qp, h, g, 0, send_op_type::RDMA_WRITE, Some(imm));
            if unsolicited {
                c.unsolicited = true;
                qp.recv_cq().push(&c);
            } else {
                let rq = qp.rq_dev();
                let mut at = rq.lock();
                match rq.head(self, &at, &mut RxBufs::new()) {
                    Head::Wqe(w) => {
                        *at = w.next;
                        drop(at);
                        c.req_id = w.req_id;
                        qp.recv_cq().push(&c);
                    }
                    Head::Malformed(req_id, next) => {
                        *at = next;
                        drop(at);
                        bump(&self.stats.bad_wqes);
                        c.req_id = req_id;
                        c.status = st::LOCAL_ERROR_QP_INTERNAL_ERROR as u8;
                        qp.recv_cq().push(&c);
                    }
                    // Raced with a QP reset: the data landed, nobody to tell.
                    Head::Empty => return Outcome::Respond(STATUS_RNR),
                }
            }
        }
        Outcome::Respond(st::OK as u8)
    }

    /// Counts an RDMA write received or a read served, of `len` bytes, in `hw_counters`.
    #[inline]
    fn count_served(&self, write: bool, len: usize) {
        let (len, mtu) = (len as u64, self.profile.mtu_bytes);
        if write {
            self.hw.add(RDMA_WRITE_RECV_BYTES, len);
            self.hw.add_transfer(RX_BYTES, RX_PKTS, len, mtu);
        } else {
            self.hw.add(RDMA_READ_RESP_BYTES, len);
            self.hw.add(RX_PKTS, 1); // the request
            self.hw.add_transfer(TX_BYTES, TX_PKTS, len, mtu);
        }
    }

    /// SEND into the head receive WQE: scatter, complete, answer. The first `skip` bytes
    /// of the buffers (a UD receive's GRH area) are left untouched.
    fn deliver_send(
        &self,
        qp: &Qp,
        h: &Header,
        data: Data<'_>,
        imm: Option<u32>,
        skip: usize,
        g: &Guard,
    ) -> Outcome {
        let rq = qp.rq_dev();
        let mut at = rq.lock();
        let mut bufs = RxBufs::new();
        let w = match rq.head(self, &at, &mut bufs) {
            Head::Empty => return Outcome::Respond(STATUS_RNR),
            Head::Malformed(req_id, next) => {
                *at = next;
                drop(at);
                bump(&self.stats.bad_wqes);
                let mut c = Self::recv_cqe(qp, h, g, req_id, send_op_type::SEND, imm);
                c.status = st::LOCAL_ERROR_QP_INTERNAL_ERROR as u8;
                c.length = 0;
                qp.recv_cq().push(&c);
                return Outcome::Respond(st::REMOTE_ERROR_BAD_STATUS as u8);
            }
            Head::Wqe(w) => w,
        };
        let end = skip + data.len(); // the virtual stream skip + data
        let room: u64 = bufs.iter().map(|d| d.length as u64).sum();
        if room < end as u64 {
            return Outcome::Respond(st::REMOTE_ERROR_BAD_LENGTH as u8);
        }
        let mut ok = true;
        {
            let mrs = self.mrs();
            let mut pos = 0usize; // position in the virtual stream
            for d in &bufs {
                if pos >= end {
                    break;
                }
                let take = (d.length as usize).min(end - pos);
                let seg = Sge {
                    addr: d.addr,
                    length: take as u32,
                    lkey: d.lkey,
                };
                let Some(at) = Runtime::local_range(mrs, qp.pd(), &seg, ACCESS_LOCAL_WRITE, g)
                else {
                    ok = false;
                    break;
                };
                // Part of this segment that holds payload bytes.
                let from = pos.max(skip);
                let to = pos + take;
                if to > from {
                    // SAFETY: at..at+take is in a live MR with LOCAL_WRITE (section open).
                    if unsafe { data.write_to(at.add(from - pos), from - skip, to - from) }.is_err()
                    {
                        ok = false;
                        break;
                    }
                }
                pos += take;
            }
        }
        *at = w.next;
        drop(at);
        let mut c = Self::recv_cqe(qp, h, g, w.req_id, send_op_type::SEND, imm);
        c.length = end as u32;
        if !ok {
            c.status = st::LOCAL_ERROR_INVALID_LKEY as u8;
            c.length = 0;
        }
        qp.recv_cq().push(&c);
        if ok {
            self.hw.add(RECV_WRS, 1);
            self.hw.add(RECV_BYTES, data.len() as u64);
            let mtu = self.profile.mtu_bytes;
            self.hw
                .add_transfer(RX_BYTES, RX_PKTS, data.len() as u64, mtu);
        }
        Outcome::Respond(if ok {
            st::OK as u8
        } else {
            st::REMOTE_ERROR_BAD_ADDRESS as u8
        })
    }

    /// A UD datagram: delivered into the head receive WQE after the GRH area, or dropped.
    pub(crate) fn ud_receive(&self, h: &Header, data: &[u8]) {
        let g = Guard::enter();
        let delivered = self.ud_deliver(h, data, &g);
        drop(g);
        if !delivered {
            bump(&self.stats.ud_drops);
            self.hw.add(RX_DROPS, 1);
        }
    }

    /// Whether the UD datagram was taken (delivered, or dropped as a Q_Key violation).
    fn ud_deliver(&self, h: &Header, data: &[u8], g: &Guard) -> bool {
        let qp = match self.qp(u32::from(h.dst_qpn), g) {
            Some(qp)
                if qp.qp_type() == QpType::Ud
                    && h.op == Op::Send
                    && data.len() == h.total_len as usize
                    && receiving(qp.state()) =>
            {
                qp
            }
            _ => return false,
        };
        if h.qkey != qp.qkey() {
            bump(&self.stats.qkey_violations);
            self.hw.add(RX_DROPS, 1);
            return true; // counted as a Q_Key violation, not a UD drop
        }
        let imm = (h.flags & wire::FLAG_IMM != 0).then_some(h.imm);
        matches!(
            self.deliver_send(qp, h, Data::Bytes(data), imm, UD_GRH, g),
            Outcome::Respond(s) if s == st::OK as u8
        )
    }
}
