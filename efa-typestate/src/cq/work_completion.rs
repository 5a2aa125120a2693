//! [`WorkCompletion`]: a classic CQ's entry exactly as `ibv_poll_cq` writes it.

use core::mem::MaybeUninit;

use super::completion::VERBS_WC_FLAGS;
use super::{Completion, CompletionFlags, WcOpcode, WcStatus};
use crate::ah::AH_UNKNOWN;
use crate::error::{EfaStatus, Error, Result};
use crate::ffi;

/// One entry of a classic CQ as the provider wrote it (`struct ibv_wc`, 48 bytes), from
/// [`Cq::poll_wc`](super::Cq::poll_wc): polled straight into the caller's array, with
/// nothing converted, as C's `ibv_poll_cq` does. Only polling makes one.
///
/// The provider writes some fields only for some entries (the receive fields only for
/// receives, the immediate only with `IBV_WC_WITH_IMM`), so the entry is kept as
/// possibly uninitialised bytes and every accessor reads only what was written: the
/// receive-only ones report 0 (or `None`) for send completions. [`completion`](Self::completion)
/// gives the same entry as a [`Completion`].
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct WorkCompletion(MaybeUninit<[u64; WC_WORDS]>);

/// An `ibv_wc` in words (the bindings' struct is not `Copy`).
const WC_WORDS: usize = core::mem::size_of::<ffi::ibv_wc>() / 8;

static_assertions::assert_eq_size!(WorkCompletion, ffi::ibv_wc);
static_assertions::const_assert_eq!(
    core::mem::align_of::<WorkCompletion>(),
    core::mem::align_of::<ffi::ibv_wc>()
);

impl WorkCompletion {
    /// The entry a provider would have written for `c` (a direct CQ's completion, whose
    /// first 48 bytes are an `ibv_wc` with every field initialised).
    #[cfg(feature = "std")]
    #[inline]
    pub(crate) fn from_completion(c: &Completion) -> WorkCompletion {
        let mut w = MaybeUninit::<[u64; WC_WORDS]>::uninit();
        // SAFETY: a `Completion` is 64 bytes whose first 48 are laid out as `ibv_wc`
        // (checked at compile time in `completion.rs`); `w` holds 48 bytes; the two do
        // not overlap. Bytes are copied as they are (the target may hold any bytes).
        unsafe {
            core::ptr::copy_nonoverlapping(
                (c as *const Completion).cast::<u8>(),
                w.as_mut_ptr().cast::<u8>(),
                core::mem::size_of::<ffi::ibv_wc>(),
            )
        };
        WorkCompletion(w)
    }

    /// The entry as the provider's struct.
    #[inline(always)]
    fn wc(&self) -> *const ffi::ibv_wc {
        self.0.as_ptr().cast()
    }
}

/// Reads field `$f` of the `ibv_wc` in `$wc`, a field the provider writes for this entry.
macro_rules! written {
    ($wc:expr, $f:ident) => {
        // SAFETY: only fields the provider wrote for this entry are read (the callers
        // check opcode and flags first); the entry came from `ibv_poll_cq`.
        unsafe { core::ptr::addr_of!((*$wc.wc()).$f).read() }
    };
}

impl WorkCompletion {
    /// The work request id given when posting.
    #[inline]
    pub fn wr_id(&self) -> u64 {
        written!(self, wr_id)
    }
    /// Verbs status.
    #[inline]
    pub fn status(&self) -> WcStatus {
        WcStatus(written!(self, status))
    }
    /// True on success.
    #[inline]
    pub fn is_ok(&self) -> bool {
        self.status() == WcStatus::SUCCESS
    }
    /// Opcode.
    #[inline]
    pub fn opcode(&self) -> WcOpcode {
        WcOpcode(written!(self, opcode))
    }
    /// The EFA status (`vendor_err`).
    #[inline]
    pub fn efa_status(&self) -> EfaStatus {
        EfaStatus(written!(self, vendor_err))
    }
    /// Local QP number.
    #[inline]
    pub fn qp_num(&self) -> u32 {
        written!(self, qp_num)
    }
    /// Flags (those verbs defines).
    #[inline]
    pub fn flags(&self) -> CompletionFlags {
        CompletionFlags::from_bits_retain(written!(self, wc_flags) & VERBS_WC_FLAGS)
    }
    /// True for receive-side entries (whose receive fields the provider wrote).
    #[inline]
    fn is_recv(&self) -> bool {
        self.opcode().is_recv()
    }
    /// Bytes received (receive completions; 0 for send completions).
    #[inline]
    pub fn byte_len(&self) -> u32 {
        if self.is_recv() {
            written!(self, byte_len)
        } else {
            0
        }
    }
    /// Immediate data in host byte order, if any.
    #[inline]
    pub fn imm(&self) -> Option<u32> {
        if !self.is_recv() || !self.flags().contains(CompletionFlags::WITH_IMM) {
            return None;
        }
        // SAFETY: with IBV_WC_WITH_IMM on a receive the provider wrote the immediate.
        Some(u32::from_be(unsafe {
            core::ptr::addr_of!((*self.wc()).imm_data_invalidated_rkey_union.imm_data).read()
        }))
    }
    /// Sender's QP number (receive completions; 0 for send completions).
    #[inline]
    pub fn src_qp(&self) -> u32 {
        if self.is_recv() {
            written!(self, src_qp)
        } else {
            0
        }
    }
    /// Receiver-side AH number of the sender, [`AH_UNKNOWN`] if this side has none
    /// (receive completions; 0 for send completions).
    #[inline]
    pub fn slid(&self) -> u16 {
        if self.is_recv() {
            written!(self, slid)
        } else {
            0
        }
    }
    /// The sender's AH number if this side has an AH for it.
    #[inline]
    pub fn sender_ah(&self) -> Option<u16> {
        let slid = self.slid();
        (self.is_recv() && slid != AH_UNKNOWN).then_some(slid)
    }
    /// `Ok(self)` on success, else the typed error.
    #[inline]
    pub fn result(&self) -> Result<&Self> {
        if self.is_ok() {
            return Ok(self);
        }
        Err(Error::Completion {
            status: self.status(),
            efa: self.efa_status(),
        })
    }
    /// The same entry as a [`Completion`] (for leases, or one type for both CQ kinds).
    #[inline]
    pub fn completion(&self) -> Completion {
        let mut c = MaybeUninit::<Completion>::uninit();
        // SAFETY: a Completion's first 48 bytes are laid out as an ibv_wc (checked in
        // completion.rs): the entry's bytes (written or not) are copied there bytewise,
        // then `settle` initialises the fields the provider may have left unwritten, so
        // every field a Completion needs is initialised.
        unsafe {
            core::ptr::copy_nonoverlapping(
                self.0.as_ptr().cast::<u8>(),
                c.as_mut_ptr().cast::<u8>(),
                core::mem::size_of::<ffi::ibv_wc>(),
            );
            super::classic::settle(c.as_mut_ptr());
            c.assume_init()
        }
    }
}

impl core::fmt::Debug for WorkCompletion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("WorkCompletion")
            .field("wr_id", &self.wr_id())
            .field("status", &self.status())
            .field("opcode", &self.opcode())
            .field("vendor_err", &self.efa_status())
            .field("byte_len", &self.byte_len())
            .field("imm", &self.imm())
            .field("qp_num", &self.qp_num())
            .field("src_qp", &self.src_qp())
            .field("slid", &self.slid())
            .field("flags", &self.flags())
            .finish()
    }
}
