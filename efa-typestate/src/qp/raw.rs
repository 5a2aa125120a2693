//! The raw layer every QP form shares: the handles, the provider's function pointers
//! checked once at creation (`send_fns.rs`), state changes, queries, and the two post
//! paths.

use core::ffi::c_int;
use core::mem::MaybeUninit;
use core::ptr::NonNull;

use super::config::{QpAttr, QpCaps, QpType, RnrRetry, RtsOptions, WqLayout, DEFAULT_RNR_RETRY};
use super::send_fns::{PostRecvFn, SendFns};
use super::state::QpStateKind;
use crate::context::DeviceCaps;
use crate::endpoint::{EndpointInfo, Gid};
use crate::error::{Error, InvalidInput, Result, Unsupported, Verb};
use crate::ffi::{self, ibv_qp_attr_mask as Mask};
use crate::wr::{QpLimits, RecvBatch, RecvBufs, SendBatch};

// ibv_qp_attr_mask bits used here.
pub(crate) const ATTR_STATE: u32 = Mask::IBV_QP_STATE.0;
const ATTR_PKEY_INDEX: u32 = Mask::IBV_QP_PKEY_INDEX.0;
const ATTR_PORT: u32 = Mask::IBV_QP_PORT.0;
pub(crate) const ATTR_QKEY: u32 = Mask::IBV_QP_QKEY.0;
const ATTR_RNR_RETRY: u32 = Mask::IBV_QP_RNR_RETRY.0;
const ATTR_SQ_PSN: u32 = Mask::IBV_QP_SQ_PSN.0;
const ATTR_CAP: u32 = Mask::IBV_QP_CAP.0;
/// EFA's only port.
pub(crate) const EFA_PORT: u8 = 1;

/// What every QP form shares: handles, checked function pointers, granted limits.
/// Destroys the QP on drop.
pub(crate) struct QpInner {
    pub(crate) qp: NonNull<ffi::ibv_qp>,
    pub(crate) qpx: *mut ffi::ibv_qp_ex,
    pub(crate) fns: SendFns,
    pub(crate) post_recv: PostRecvFn,
    pub(crate) limits: QpLimits,
    pub(crate) caps: QpCaps,
    pub(crate) device_caps: DeviceCaps,
    pub(crate) gid: Gid,
    pub(crate) qkey: u32,
    /// The direct backend's state, for a QP created [`Backend::Direct`](super::Backend).
    #[cfg(feature = "std")]
    pub(crate) direct: Option<DirectLink>,
}

/// A direct QP's state and the direct CQs serving it (one entry when one CQ serves both
/// queues). Dropped after the QP is destroyed (a field of [`QpInner`], whose `Drop`
/// destroys the QP first): it then leaves the CQs' tables.
#[cfg(feature = "std")]
pub(crate) struct DirectLink {
    pub(crate) qp: std::sync::Arc<crate::direct::backend::DirectQp>,
    pub(crate) cqs: arrayvec::ArrayVec<std::sync::Arc<crate::direct::backend::DirectCq>, 2>,
}

#[cfg(feature = "std")]
impl Drop for DirectLink {
    fn drop(&mut self) {
        for cq in &self.cqs {
            cq.unregister(&self.qp);
        }
    }
}

// SAFETY: the EFA provider takes the SQ lock in wr_start and releases it in
// wr_complete/wr_abort, and the `wr_id`/`wr_flags` fields are written only inside that
// window; post_recv takes the RQ lock. So a QP may be posted to from several threads.
// The direct backend's state (`direct`) is `Arc`s of types whose mutable parts are
// behind a mutex per queue (see `direct::backend`), so the same holds for direct QPs.
unsafe impl Send for QpInner {}
// SAFETY: see above.
unsafe impl Sync for QpInner {}

impl Drop for QpInner {
    fn drop(&mut self) {
        // SAFETY: owned QP destroyed once; its PD and CQs are held beside it, dropped after.
        unsafe { ffi::ibv_destroy_qp(self.qp.as_ptr()) };
    }
}

pub(crate) fn zeroed_attr() -> ffi::ibv_qp_attr {
    // SAFETY: all-zero is a valid ibv_qp_attr (integers and a byte union).
    unsafe { core::mem::zeroed() }
}

impl QpInner {
    /// Destroys the QP, handing it back on failure.
    #[allow(unused_mut)] // `mut` only with the direct backend (std)
    pub(crate) fn destroy(mut self) -> core::result::Result<(), (Self, Error)> {
        // SAFETY: owned QP destroyed once (Drop skipped below on success).
        let rc = unsafe { ffi::ibv_destroy_qp(self.qp.as_ptr()) };
        if rc != 0 {
            return Err((self, Error::verb(Verb::DestroyQp, rc)));
        }
        #[cfg(feature = "std")]
        let direct = self.direct.take();
        core::mem::forget(self);
        // The QP is gone: its direct state leaves the CQs' tables.
        #[cfg(feature = "std")]
        drop(direct);
        Ok(())
    }

    /// The backend the QP was created with.
    #[inline]
    pub(crate) fn backend(&self) -> super::Backend {
        #[cfg(feature = "std")]
        if self.direct.is_some() {
            return super::Backend::Direct;
        }
        super::Backend::Provider
    }

    pub(crate) fn modify(&self, attr: &mut ffi::ibv_qp_attr, mask: u32) -> Result<()> {
        // SAFETY: valid QP and attribute struct.
        let rc = unsafe { ffi::ibv_modify_qp(self.qp.as_ptr(), attr, mask as c_int) };
        if rc != 0 {
            return Err(Error::verb(Verb::ModifyQp, rc));
        }
        // RESET forgets every posted WR: the device starts both queues at index 0 again,
        // and so must the direct state.
        #[cfg(feature = "std")]
        if let Some(d) = &self.direct {
            if mask & ATTR_STATE != 0 && attr.qp_state == QpStateKind::Reset.to_raw() {
                d.qp.reset();
            }
        }
        Ok(())
    }

    pub(crate) fn set_init(&mut self, qkey: u32) -> Result<()> {
        let mut a = zeroed_attr();
        a.qp_state = QpStateKind::Init.to_raw();
        a.pkey_index = 0;
        a.port_num = EFA_PORT;
        a.qkey = qkey;
        self.modify(&mut a, ATTR_STATE | ATTR_PKEY_INDEX | ATTR_PORT | ATTR_QKEY)?;
        self.qkey = qkey;
        Ok(())
    }

    pub(crate) fn set_state(&self, s: QpStateKind) -> Result<()> {
        let mut a = zeroed_attr();
        a.qp_state = s.to_raw();
        self.modify(&mut a, ATTR_STATE)
    }

    /// The RNR retry to set at RTS: the caller's, or the finite default where the device
    /// lets it be set (SRD with the RNR_RETRY capability).
    fn rnr_retry(&self, asked: Option<RnrRetry>) -> Result<Option<u8>> {
        let settable =
            self.limits.qp_type == QpType::Srd && self.device_caps.contains(DeviceCaps::RNR_RETRY);
        match asked {
            None if settable => DEFAULT_RNR_RETRY.to_raw().map(Some),
            None => Ok(None),
            Some(r) => {
                let n = r.to_raw()?;
                if self.limits.qp_type == QpType::Srd && !settable {
                    return Err(Error::Unsupported {
                        verb: Verb::ModifyQp,
                        why: Unsupported::MissingCapability(DeviceCaps::RNR_RETRY),
                    });
                }
                Ok(Some(n))
            }
        }
    }

    pub(crate) fn set_rts(&self, opts: RtsOptions) -> Result<()> {
        let mut a = zeroed_attr();
        a.qp_state = QpStateKind::Rts.to_raw();
        a.sq_psn = opts.sq_psn;
        let mut mask = ATTR_STATE | ATTR_SQ_PSN;
        if let Some(n) = self.rnr_retry(opts.rnr_retry)? {
            a.rnr_retry = n;
            mask |= ATTR_RNR_RETRY;
        }
        self.modify(&mut a, mask)
    }

    pub(crate) fn query(&self) -> Result<QpAttr> {
        let mut a = zeroed_attr();
        // SAFETY: all-zero is a valid ibv_qp_init_attr (pointers null, integers 0).
        let mut init: ffi::ibv_qp_init_attr = unsafe { core::mem::zeroed() };
        let mask = ATTR_STATE | ATTR_QKEY | ATTR_SQ_PSN | ATTR_CAP | ATTR_RNR_RETRY;
        let mask = mask | ATTR_PORT | ATTR_PKEY_INDEX;
        // SAFETY: valid QP and out-structs.
        let rc = unsafe { ffi::ibv_query_qp(self.qp.as_ptr(), &mut a, mask as c_int, &mut init) };
        if rc != 0 {
            return Err(Error::verb(Verb::QueryQp, rc));
        }
        Ok(QpAttr {
            state: QpStateKind::from_raw(a.qp_state),
            qkey: a.qkey,
            sq_psn: a.sq_psn,
            rnr_retry: a.rnr_retry,
            port_num: a.port_num,
            pkey_index: a.pkey_index,
            caps: QpCaps {
                max_send_wr: a.cap.max_send_wr,
                max_recv_wr: a.cap.max_recv_wr,
                max_send_sge: a.cap.max_send_sge,
                max_recv_sge: a.cap.max_recv_sge,
                max_inline_data: a.cap.max_inline_data,
            },
        })
    }

    pub(crate) fn wq_layout(&self) -> Result<(WqLayout, WqLayout)> {
        let (mut sq, mut rq) = (ffi::efadv_wq_attr::default(), ffi::efadv_wq_attr::default());
        // SAFETY: valid QP; both out-structs writable with `inlen` = their size.
        let rc = unsafe {
            ffi::efadv_query_qp_wqs(
                self.qp.as_ptr(),
                &mut sq,
                &mut rq,
                core::mem::size_of_val(&sq) as u32,
            )
        }
        .map_err(|e| ffi::not_provided(Verb::EfadvQueryQpWqs, e))?;
        if rc != 0 {
            return Err(Error::verb(Verb::EfadvQueryQpWqs, rc));
        }
        let conv = |w: ffi::efadv_wq_attr| WqLayout {
            buffer: w.buffer as usize,
            entry_size: w.entry_size,
            num_entries: w.num_entries,
            doorbell: w.doorbell as usize,
            max_batch: w.max_batch,
        };
        Ok((conv(sq), conv(rq)))
    }

    #[inline]
    pub(crate) fn qpn(&self) -> u32 {
        // SAFETY: valid QP; qp_num is a plain field set at creation.
        unsafe { (*self.qp.as_ptr()).qp_num }
    }

    #[inline]
    pub(crate) fn endpoint(&self) -> EndpointInfo {
        // QPNs are device-assigned and fit 24 bits (EFA: 16).
        EndpointInfo::from_parts(self.gid, self.qpn(), self.qkey)
    }

    #[inline]
    fn check_batch(&self, limits: &QpLimits) -> Result<()> {
        if !core::ptr::eq(limits, &self.limits) {
            return Err(InvalidInput::WrongQp.into());
        }
        Ok(())
    }

    /// Posts a batch built (and checked) for this QP.
    ///
    /// # Safety
    /// See [`Qp::post_send`](super::Qp::post_send).
    #[inline(always)]
    pub(crate) unsafe fn post_send<const N: usize>(&self, batch: &SendBatch<'_, N>) -> Result<()> {
        self.check_batch(batch.limits)?;
        if batch.wrs.is_empty() {
            return Ok(());
        }
        #[cfg(feature = "std")]
        if let Some(d) = &self.direct {
            // SAFETY: this live QP is driven only by its direct state (never through the
            // provider: `post_with` is refused); the WRs were checked against it when
            // added and their borrows are live; the caller's contract covers the memory.
            return unsafe { d.qp.post_send(batch.wrs.as_slice()) };
        }
        let q = self.qpx;
        let f = &self.fns;
        // SAFETY: `q` is this live QP's ibv_qp_ex; every pointer in `f` was checked at
        // creation, and every work request was checked against this QP when it was added
        // (so ops outside `send_ops`, whose pointers are stubs, never occur). The session
        // holds the provider's SQ lock, so writing wr_id/wr_flags is race-free. SGE lists,
        // inline bytes and AHs are borrowed by the batch and valid for the call; the
        // provider copies SGEs and inline data into the WQE before wr_complete returns.
        unsafe {
            f.start(q);
            for wr in batch.wrs.iter() {
                f.emit(q, wr);
            }
            f.complete(q)
        }
    }

    /// Posts a receive batch built (and checked) for this QP.
    ///
    /// # Safety
    /// See [`Qp::post_recv`](super::Qp::post_recv).
    #[inline(always)]
    pub(crate) unsafe fn post_recv<const N: usize>(&self, batch: &RecvBatch<'_, N>) -> Result<()> {
        self.check_batch(batch.limits)?;
        let n = batch.wrs.len();
        if n == 0 {
            return Ok(());
        }
        #[cfg(feature = "std")]
        if let Some(d) = &self.direct {
            // SAFETY: as in `post_send`, for receives.
            return unsafe { d.qp.post_recv(batch.wrs.as_slice()) };
        }
        let mut chain = [const { MaybeUninit::<ffi::ibv_recv_wr>::uninit() }; N];
        let base = chain.as_mut_ptr().cast::<ffi::ibv_recv_wr>();
        for (i, wr) in batch.wrs.iter().enumerate() {
            let (sg_list, num_sge) = match &wr.bufs {
                RecvBufs::Sge(s) => (s.raw() as *const ffi::ibv_sge, 1),
                RecvBufs::Sges(l) => (l.raw().as_ptr(), l.len() as c_int),
            };
            let next = if i + 1 < n {
                // SAFETY: i < n <= N; `next` points at the following element of the same array.
                unsafe { base.add(i + 1) }
            } else {
                core::ptr::null_mut()
            };
            chain[i].write(ffi::ibv_recv_wr {
                wr_id: wr.wr_id,
                next,
                sg_list: sg_list.cast_mut(),
                num_sge,
            });
        }
        let mut bad: *mut ffi::ibv_recv_wr = core::ptr::null_mut();
        // SAFETY: the first `n` chain entries are initialised and linked; the SGE arrays are
        // borrowed by `batch` for the call and the provider only reads them.
        let rc = unsafe { (self.post_recv)(self.qp.as_ptr(), base, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        let posted = if bad.is_null() {
            0
        } else {
            // SAFETY: `bad` points into `chain` (the provider returns the failing WR).
            unsafe { bad.offset_from(base) }.max(0) as usize
        };
        if rc == libc::ENOMEM {
            Err(Error::RecvQueueFull { posted })
        } else {
            Err(Error::verb(Verb::PostRecv, rc))
        }
    }
}
