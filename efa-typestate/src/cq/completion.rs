//! The completion value and its status, opcode and flag types.

use core::mem::MaybeUninit;

use crate::ah::AH_UNKNOWN;
use crate::endpoint::Gid;
use crate::error::{EfaStatus, Error, Result};
use crate::ffi::{self, ibv_wc_opcode, ibv_wc_status};
use crate::flags::flag_set;

/// A verbs completion status (`ibv_wc_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct WcStatus(pub u32);

impl WcStatus {
    /// Success.
    pub const SUCCESS: WcStatus = WcStatus(ibv_wc_status::IBV_WC_SUCCESS);
    /// Local length error (e.g. a send larger than the MTU).
    pub const LOC_LEN_ERR: WcStatus = WcStatus(ibv_wc_status::IBV_WC_LOC_LEN_ERR);
    /// Local QP operation error.
    pub const LOC_QP_OP_ERR: WcStatus = WcStatus(ibv_wc_status::IBV_WC_LOC_QP_OP_ERR);
    /// Local protection error.
    pub const LOC_PROT_ERR: WcStatus = WcStatus(ibv_wc_status::IBV_WC_LOC_PROT_ERR);
    /// Flushed.
    pub const WR_FLUSH_ERR: WcStatus = WcStatus(ibv_wc_status::IBV_WC_WR_FLUSH_ERR);
    /// Bad response.
    pub const BAD_RESP_ERR: WcStatus = WcStatus(ibv_wc_status::IBV_WC_BAD_RESP_ERR);
    /// Remote invalid request.
    pub const REM_INV_REQ_ERR: WcStatus = WcStatus(ibv_wc_status::IBV_WC_REM_INV_REQ_ERR);
    /// Remote access error.
    pub const REM_ACCESS_ERR: WcStatus = WcStatus(ibv_wc_status::IBV_WC_REM_ACCESS_ERR);
    /// Remote operation error.
    pub const REM_OP_ERR: WcStatus = WcStatus(ibv_wc_status::IBV_WC_REM_OP_ERR);
    /// RNR retries exceeded.
    pub const RNR_RETRY_EXC_ERR: WcStatus = WcStatus(ibv_wc_status::IBV_WC_RNR_RETRY_EXC_ERR);
    /// Remote invalid read request (EFA: bad destination QPN).
    pub const REM_INV_RD_REQ_ERR: WcStatus = WcStatus(ibv_wc_status::IBV_WC_REM_INV_RD_REQ_ERR);
    /// Remote abort.
    pub const REM_ABORT_ERR: WcStatus = WcStatus(ibv_wc_status::IBV_WC_REM_ABORT_ERR);
    /// Response timeout.
    pub const RESP_TIMEOUT_ERR: WcStatus = WcStatus(ibv_wc_status::IBV_WC_RESP_TIMEOUT_ERR);
    /// General error.
    pub const GENERAL_ERR: WcStatus = WcStatus(ibv_wc_status::IBV_WC_GENERAL_ERR);

    /// The status in words, from libibverbs' `ibv_wc_status_str` (e.g. "remote access
    /// error"; "unknown" for a value it does not know).
    pub fn description(self) -> &'static str {
        // SAFETY: `ibv_wc_status_str` takes any value and returns a pointer into a static
        // table of NUL-terminated strings (or a static "unknown"), never freed.
        let s = unsafe { ffi::ibv_wc_status_str(self.0) };
        if s.is_null() {
            return "unknown";
        }
        // SAFETY: non-null, NUL-terminated, static (above).
        unsafe { core::ffi::CStr::from_ptr(s) }
            .to_str()
            .unwrap_or("unknown")
    }

    /// The C enumerator name.
    pub fn name(self) -> &'static str {
        use ibv_wc_status::*;
        match self.0 {
            IBV_WC_SUCCESS => "IBV_WC_SUCCESS",
            IBV_WC_LOC_LEN_ERR => "IBV_WC_LOC_LEN_ERR",
            IBV_WC_LOC_QP_OP_ERR => "IBV_WC_LOC_QP_OP_ERR",
            IBV_WC_LOC_EEC_OP_ERR => "IBV_WC_LOC_EEC_OP_ERR",
            IBV_WC_LOC_PROT_ERR => "IBV_WC_LOC_PROT_ERR",
            IBV_WC_WR_FLUSH_ERR => "IBV_WC_WR_FLUSH_ERR",
            IBV_WC_MW_BIND_ERR => "IBV_WC_MW_BIND_ERR",
            IBV_WC_BAD_RESP_ERR => "IBV_WC_BAD_RESP_ERR",
            IBV_WC_LOC_ACCESS_ERR => "IBV_WC_LOC_ACCESS_ERR",
            IBV_WC_REM_INV_REQ_ERR => "IBV_WC_REM_INV_REQ_ERR",
            IBV_WC_REM_ACCESS_ERR => "IBV_WC_REM_ACCESS_ERR",
            IBV_WC_REM_OP_ERR => "IBV_WC_REM_OP_ERR",
            IBV_WC_RETRY_EXC_ERR => "IBV_WC_RETRY_EXC_ERR",
            IBV_WC_RNR_RETRY_EXC_ERR => "IBV_WC_RNR_RETRY_EXC_ERR",
            IBV_WC_LOC_RDD_VIOL_ERR => "IBV_WC_LOC_RDD_VIOL_ERR",
            IBV_WC_REM_INV_RD_REQ_ERR => "IBV_WC_REM_INV_RD_REQ_ERR",
            IBV_WC_REM_ABORT_ERR => "IBV_WC_REM_ABORT_ERR",
            IBV_WC_INV_EECN_ERR => "IBV_WC_INV_EECN_ERR",
            IBV_WC_INV_EEC_STATE_ERR => "IBV_WC_INV_EEC_STATE_ERR",
            IBV_WC_FATAL_ERR => "IBV_WC_FATAL_ERR",
            IBV_WC_RESP_TIMEOUT_ERR => "IBV_WC_RESP_TIMEOUT_ERR",
            IBV_WC_GENERAL_ERR => "IBV_WC_GENERAL_ERR",
            _ => "IBV_WC_(unknown)",
        }
    }
}

/// A completion opcode (`ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct WcOpcode(pub u32);

impl WcOpcode {
    /// Send or send-with-immediate finished. EFA also reports RDMA-read requester
    /// completions with this opcode (rdma-core behaviour).
    pub const SEND: WcOpcode = WcOpcode(ibv_wc_opcode::IBV_WC_SEND);
    /// RDMA write (with or without immediate) finished.
    pub const RDMA_WRITE: WcOpcode = WcOpcode(ibv_wc_opcode::IBV_WC_RDMA_WRITE);
    /// RDMA read finished (on devices/providers that report it as such).
    pub const RDMA_READ: WcOpcode = WcOpcode(ibv_wc_opcode::IBV_WC_RDMA_READ);
    /// A message arrived in a posted receive.
    pub const RECV: WcOpcode = WcOpcode(ibv_wc_opcode::IBV_WC_RECV);
    /// A peer's RDMA write with immediate landed.
    pub const RECV_RDMA_WITH_IMM: WcOpcode = WcOpcode(ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM);

    /// True for receive-side completions.
    #[inline]
    pub fn is_recv(self) -> bool {
        self.0 & ibv_wc_opcode::IBV_WC_RECV != 0
    }
}

flag_set! {
    /// Per-completion flags.
    pub struct CompletionFlags: u32 {
        /// Carries immediate data (`IBV_WC_WITH_IMM`).
        const WITH_IMM = ffi::ibv_wc_flags::IBV_WC_WITH_IMM.0;
        /// A write-with-immediate that consumed no receive WR (`wr_id` is 0). This and
        /// `SENDER_GID` are this crate's bits, above the 16 bits verbs defines.
        const UNSOLICITED = 1 << 16;
        /// The sender GID is valid (sender unknown to this receiver, CQ made with sender GID).
        const SENDER_GID = 1 << 17;
    }
}

/// The `wc_flags` bits verbs defines (the rest of [`CompletionFlags`] is this crate's).
pub(crate) const VERBS_WC_FLAGS: u32 = 0xffff;

/// One completion, copied out of the CQ: a plain `Copy` value. Only polling makes one
/// (there is no public constructor): a [`Posted`](crate::lease::Posted) lease trusts
/// that a completion carrying its `wr_id` really came from the device.
///
/// Its first 48 bytes are laid out as `struct ibv_wc` (checked at compile time), so
/// that a classic CQ's `ibv_poll_cq` writes straight into the output and each entry
/// only moves to its slot and has its stale fields cleared; the sender GID follows.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Completion {
    pub(crate) wr_id: u64,
    pub(crate) status: WcStatus,
    pub(crate) opcode: WcOpcode,
    pub(crate) vendor_err: u32,
    pub(crate) byte_len: u32,
    /// Network order, as the device reports it. Initialised whenever `flags` has
    /// `WITH_IMM` (only then does a provider write it): read only through `imm()`.
    pub(crate) imm_be: MaybeUninit<u32>,
    pub(crate) qp_num: u32,
    pub(crate) src_qp: u32,
    pub(crate) flags: CompletionFlags,
    /// `ibv_wc.pkey_index`: not reported (EFA has no partitions); maybe never written.
    _pkey_index: MaybeUninit<u16>,
    pub(crate) slid: u16,
    /// `ibv_wc.sl`, `dlid_path_bits` and padding: not reported; maybe never written.
    _sl_path_bits: MaybeUninit<[u8; 4]>,
    /// Initialised whenever `flags` has `SENDER_GID`: read only through `sender_gid()`.
    pub(crate) sgid: MaybeUninit<Gid>,
}

/// The fields `Completion` shares with `ibv_wc`, at the same offsets.
macro_rules! same_offset {
    ($($ours:ident = $theirs:ident),* $(,)?) => {
        $(static_assertions::const_assert_eq!(
            core::mem::offset_of!(Completion, $ours),
            core::mem::offset_of!(ffi::ibv_wc, $theirs)
        );)*
    };
}
same_offset!(
    wr_id = wr_id,
    status = status,
    opcode = opcode,
    vendor_err = vendor_err,
    byte_len = byte_len,
    imm_be = imm_data_invalidated_rkey_union,
    qp_num = qp_num,
    src_qp = src_qp,
    flags = wc_flags,
    _pkey_index = pkey_index,
    slid = slid,
    _sl_path_bits = sl,
);
static_assertions::const_assert_eq!(
    core::mem::offset_of!(Completion, sgid),
    core::mem::size_of::<ffi::ibv_wc>()
);
static_assertions::assert_eq_size!(Completion, [u8; 64]);

impl PartialEq for Completion {
    /// Compares what the accessors report (the unreported `ibv_wc` fields are skipped).
    fn eq(&self, other: &Self) -> bool {
        self.wr_id == other.wr_id
            && self.status == other.status
            && self.opcode == other.opcode
            && self.vendor_err == other.vendor_err
            && self.byte_len == other.byte_len
            && self.imm() == other.imm()
            && self.qp_num == other.qp_num
            && self.src_qp == other.src_qp
            && self.flags == other.flags
            && self.slid == other.slid
            && self.sender_gid() == other.sender_gid()
    }
}

impl Eq for Completion {}

impl core::fmt::Debug for Completion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Completion")
            .field("wr_id", &self.wr_id)
            .field("status", &self.status)
            .field("opcode", &self.opcode)
            .field("vendor_err", &self.vendor_err)
            .field("byte_len", &self.byte_len)
            .field("imm", &self.imm())
            .field("qp_num", &self.qp_num)
            .field("src_qp", &self.src_qp)
            .field("slid", &self.slid)
            .field("flags", &self.flags)
            .field("sender_gid", &self.sender_gid())
            .finish()
    }
}

impl Completion {
    /// A send-side completion read by the direct backend (the receive fields 0, no flags).
    #[cfg(feature = "std")]
    #[inline]
    pub(crate) fn direct(
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        vendor_err: u32,
        qp_num: u32,
    ) -> Completion {
        Completion {
            wr_id,
            status,
            opcode,
            vendor_err,
            byte_len: 0,
            imm_be: MaybeUninit::new(0),
            qp_num,
            src_qp: 0,
            flags: CompletionFlags::empty(),
            _pkey_index: MaybeUninit::new(0),
            slid: 0,
            _sl_path_bits: MaybeUninit::new([0; 4]),
            sgid: MaybeUninit::uninit(),
        }
    }

    /// Sets the receive fields of a direct completion (`imm` host order, `flags` without
    /// `SENDER_GID`, which `sgid` sets).
    #[cfg(feature = "std")]
    #[inline]
    pub(crate) fn set_recv(
        &mut self,
        byte_len: u32,
        src_qp: u32,
        slid: u16,
        mut flags: CompletionFlags,
        imm: Option<u32>,
        sgid: Option<Gid>,
    ) {
        self.byte_len = byte_len;
        self.src_qp = src_qp;
        self.slid = slid;
        if let Some(imm) = imm {
            self.imm_be = MaybeUninit::new(imm.to_be());
            flags |= CompletionFlags::WITH_IMM;
        }
        if let Some(g) = sgid {
            self.sgid = MaybeUninit::new(g);
            flags |= CompletionFlags::SENDER_GID;
        }
        self.flags = flags;
    }

    /// The work request id given when posting (0 for unsolicited write-with-imm).
    #[inline]
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }
    /// Verbs status.
    #[inline]
    pub fn status(&self) -> WcStatus {
        self.status
    }
    /// True on success.
    #[inline]
    pub fn is_ok(&self) -> bool {
        self.status == WcStatus::SUCCESS
    }
    /// Opcode.
    #[inline]
    pub fn opcode(&self) -> WcOpcode {
        self.opcode
    }
    /// The EFA status (`vendor_err`): exactly what the device reported.
    #[inline]
    pub fn efa_status(&self) -> EfaStatus {
        EfaStatus(self.vendor_err)
    }
    /// Bytes received (receive completions; for write-with-imm the write length).
    #[inline]
    pub fn byte_len(&self) -> u32 {
        self.byte_len
    }
    /// Immediate data in host byte order, if any.
    #[inline]
    pub fn imm(&self) -> Option<u32> {
        if !self.flags.contains(CompletionFlags::WITH_IMM) {
            return None;
        }
        // SAFETY: with WITH_IMM set the immediate is initialised (the field's invariant).
        Some(u32::from_be(unsafe { self.imm_be.assume_init() }))
    }
    /// Local QP number.
    #[inline]
    pub fn qp_num(&self) -> u32 {
        self.qp_num
    }
    /// Sender's QP number (receive completions).
    #[inline]
    pub fn src_qp(&self) -> u32 {
        self.src_qp
    }
    /// Receiver-side AH number of the sender, [`AH_UNKNOWN`] (0xffff) if this side has none.
    #[inline]
    pub fn slid(&self) -> u16 {
        self.slid
    }
    /// The sender's AH number if this side has an AH for it.
    #[inline]
    pub fn sender_ah(&self) -> Option<u16> {
        (self.opcode.is_recv() && self.slid != AH_UNKNOWN).then_some(self.slid)
    }
    /// Flags.
    #[inline]
    pub fn flags(&self) -> CompletionFlags {
        self.flags
    }
    /// True for write-with-imm completions that consumed no receive WR.
    #[inline]
    pub fn is_unsolicited(&self) -> bool {
        self.flags.contains(CompletionFlags::UNSOLICITED)
    }
    /// The sender's GID, reported for receives from senders this side has no AH for, on
    /// CQs created with [`CqOptions::sender_gid`](super::CqOptions::sender_gid).
    #[inline]
    pub fn sender_gid(&self) -> Option<Gid> {
        if !self.flags.contains(CompletionFlags::SENDER_GID) {
            return None;
        }
        // SAFETY: with SENDER_GID set the GID is initialised (the field's invariant).
        Some(unsafe { self.sgid.assume_init() })
    }
    /// `Ok(self)` on success, else the typed error.
    #[inline]
    pub fn result(&self) -> Result<&Self> {
        match self.into_error() {
            None => Ok(self),
            Some(e) => Err(e),
        }
    }
    /// The error this completion reports, if it failed.
    #[inline]
    pub fn into_error(&self) -> Option<Error> {
        (!self.is_ok()).then_some(Error::Completion {
            status: self.status,
            efa: self.efa_status(),
        })
    }
}
