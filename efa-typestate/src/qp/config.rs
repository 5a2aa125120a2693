//! How a QP is made and brought to RTS: its type, requested limits, creation options,
//! RTS options (RNR retry), and what queries report.

use super::state::QpStateKind;
use crate::wr::SendOps;

/// The transport of a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Unreliable datagram: SEND/SEND_IMM only; receive buffers start with a 40-byte prefix.
    Ud,
    /// Scalable Reliable Datagram (EFA): reliable, unordered, with RDMA.
    Srd,
}

/// Queue sizes and limits, as requested or as granted by the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send.
    pub max_send_sge: u32,
    /// SGEs per receive.
    pub max_recv_sge: u32,
    /// Inline bytes per send.
    pub max_inline_data: u32,
}

/// Which data path posts to a QP or polls a CQ (issue 26).
///
/// * [`Provider`](Backend::Provider): libefa's (`ibv_wr_*`, `ibv_post_recv`, the CQ's poll
///   functions).
/// * [`Direct`](Backend::Direct): this crate writes WQEs and receive descriptors into the
///   device's rings, rings the doorbells and reads completions by phase bit itself, as
///   libfabric's efa-direct does. Creation fails with [`Error::Direct`](crate::Error::Direct)
///   naming why when the rings cannot be had. A direct QP needs direct CQs (only the
///   direct state can match its completions to `wr_id`s) and a direct CQ only serves direct
///   QPs; both are checked when the QP is created.
/// * [`Auto`](Backend::Auto) (the default): the provider. The direct path has been
///   proven equal to it on efa-sim only, so a program gets it only by asking: by naming
///   `Direct`, or by running with `EFA_RS_DIRECT=1`
///   ([`DIRECT_ENV`](crate::DIRECT_ENV)), which makes `Auto` CQs direct
///   where the ring can be had (`efadv_query_cq` answers with a ring the direct path
///   drives, the CPU barriers are proven for this architecture, the crate has `std`, the
///   device has no sub-CQs); an `Auto` QP is direct when both its CQs are.
///   `EFA_RS_DIRECT=0` refuses `Direct` as well
///   ([`DirectError::DisabledByEnvironment`](crate::DirectError::DisabledByEnvironment)).
///   An explicit `Provider` QP needs `Provider` CQs.
/// * A device that splits its CQs into sub-CQs (first-generation EFA) never gets the
///   direct path: `Direct` is
///   [`DirectError::SubCqs`](crate::DirectError::SubCqs).
///
/// ```
/// # use efa_typestate::*;
/// # let ctx = Context::open_first_efa()?;
/// # if std::env::var_os("EFA_RS_DIRECT").is_none() {
/// let cq = ctx.create_ext_cq(CqOptions::new(64))?;
/// assert_eq!(cq.backend(), Backend::Provider); // unless EFA_RS_DIRECT=1
/// # }
/// # Ok::<(), efa_typestate::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The provider, or the direct path where `EFA_RS_DIRECT=1` asks for it and the
    /// rings can be had.
    #[default]
    Auto,
    /// The direct data path, or an error.
    Direct,
    /// libefa's data path.
    Provider,
}

/// How to create a QP. Start from [`QpConfig::srd`] or [`QpConfig::ud`].
#[derive(Clone, Copy, Debug)]
pub struct QpConfig {
    pub(crate) qp_type: QpType,
    pub(crate) caps: Option<QpCaps>,
    pub(crate) depth: (u32, u32),
    pub(crate) sges: Option<(u32, u32)>,
    pub(crate) max_inline: Option<u32>,
    pub(crate) send_ops: Option<SendOps>,
    pub(crate) unsolicited_write_recv: bool,
    pub(crate) inline_write: bool,
    pub(crate) sl: u8,
    pub(crate) backend: Backend,
}

impl QpConfig {
    /// An SRD QP with every send operation the device supports, 256-deep queues, 2 send
    /// SGEs (or the device maximum), 1 receive SGE and the device's inline size.
    pub fn srd() -> Self {
        QpConfig {
            qp_type: QpType::Srd,
            caps: None,
            depth: (256, 256),
            sges: None,
            max_inline: None,
            send_ops: None,
            unsolicited_write_recv: false,
            inline_write: false,
            sl: 0,
            backend: Backend::Auto,
        }
    }
    /// A UD QP (SEND and SEND_WITH_IMM).
    pub fn ud() -> Self {
        QpConfig {
            qp_type: QpType::Ud,
            ..Self::srd()
        }
    }
    /// Queue depths (requests; the device may grant more).
    pub fn depth(mut self, send: u32, recv: u32) -> Self {
        self.depth = (send, recv);
        self
    }
    /// SGEs per send and per receive (defaults: min(2, device max) and 1).
    pub fn sges(mut self, send: u32, recv: u32) -> Self {
        self.sges = Some((send, recv));
        self
    }
    /// Inline bytes per send (default: the device's `inline_buf_size`).
    pub fn max_inline(mut self, bytes: u32) -> Self {
        self.max_inline = Some(bytes);
        self
    }
    /// Every limit explicitly (overrides `depth`, `sges` and `max_inline`).
    pub fn caps(mut self, caps: QpCaps) -> Self {
        self.caps = Some(caps);
        self
    }
    /// Only these send operations (the QP refuses others when posting).
    pub fn send_ops(mut self, ops: SendOps) -> Self {
        self.send_ops = Some(ops);
        self
    }
    /// Receive write-with-immediate without consuming receive WRs (SRD only; needs
    /// [`DeviceCaps::UNSOLICITED_WRITE_RECV`](crate::DeviceCaps::UNSOLICITED_WRITE_RECV)).
    pub fn unsolicited_write_recv(mut self) -> Self {
        self.unsolicited_write_recv = true;
        self
    }
    /// Allow inline RDMA writes (SRD only; 128-byte WQEs; needs
    /// [`DeviceCaps::RDMA_WRITE`](crate::DeviceCaps::RDMA_WRITE)).
    pub fn inline_write(mut self) -> Self {
        self.inline_write = true;
        self
    }
    /// Which data path posts to the QP ([`Backend`]; default [`Backend::Auto`]).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }
    /// The data path asked for ([`backend`](Self::backend)): a direct QP needs CQs
    /// created with the same choice.
    pub fn backend_choice(&self) -> Backend {
        self.backend
    }
    /// Service level (traffic class, 0 = default).
    pub fn service_level(mut self, sl: u8) -> Self {
        self.sl = sl;
        self
    }
}

/// How often an SRD sender retries a message the receiver has no buffer for (RNR:
/// receiver not ready) before completing it with `IBV_WC_RNR_RETRY_EXC_ERR` (EFA status
/// 10, [`EfaStatus::REMOTE_RNR`](crate::EfaStatus::REMOTE_RNR)).
///
/// The default is [`DEFAULT_RNR_RETRY`] (3 retries, as libfabric's EFA provider uses):
/// a send to a peer that never posts a receive fails after the device's RNR back-off
/// has run 3 times (on efa-sim 1 ms each, so a few milliseconds; on hardware AWS does not
/// publish the back-off), instead of staying outstanding forever. Retrying forever is
/// only done when asked for by name, [`RnrRetry::Forever`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RnrRetry {
    /// Retry this many times, 0..=6 (7 and above are refused:
    /// [`InvalidInput::RnrRetryOutOfRange`](crate::InvalidInput::RnrRetryOutOfRange)).
    Times(u8),
    /// Retry forever (`rnr_retry = 7`): a send to a receiver that never posts stays
    /// outstanding until the QP or AH is destroyed or the peer stops responding.
    Forever,
}

/// The RNR retry count QPs get unless told otherwise: 3.
pub const DEFAULT_RNR_RETRY: RnrRetry = RnrRetry::Times(3);

/// The `rnr_retry` value that means "forever" (verbs).
const RNR_RETRY_FOREVER: u8 = 7;

impl RnrRetry {
    /// The verbs value, 0..=7.
    pub fn to_raw(self) -> crate::Result<u8> {
        match self {
            RnrRetry::Times(n) if n < RNR_RETRY_FOREVER => Ok(n),
            RnrRetry::Times(n) => Err(crate::InvalidInput::RnrRetryOutOfRange(n).into()),
            RnrRetry::Forever => Ok(RNR_RETRY_FOREVER),
        }
    }
    /// From a verbs value (as [`QpAttr::rnr_retry`] reports it).
    pub fn from_raw(n: u8) -> RnrRetry {
        if n >= RNR_RETRY_FOREVER {
            RnrRetry::Forever
        } else {
            RnrRetry::Times(n)
        }
    }
}

impl Default for RnrRetry {
    fn default() -> Self {
        DEFAULT_RNR_RETRY
    }
}

/// Options for RTR → RTS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtsOptions {
    /// RNR retry (SRD; setting it needs [`DeviceCaps::RNR_RETRY`](crate::DeviceCaps::RNR_RETRY)).
    /// `None`: [`DEFAULT_RNR_RETRY`] on SRD QPs of devices with that capability, nothing
    /// elsewhere (UD has no RNR retry; SRD devices without the capability report an RNR
    /// without retrying).
    pub rnr_retry: Option<RnrRetry>,
    /// Send PSN (no visible effect on EFA).
    pub sq_psn: u32,
}

/// Attributes reported by [`Qp::query`](super::Qp::query).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpAttr {
    /// Current state.
    pub state: QpStateKind,
    /// Current qkey.
    pub qkey: u32,
    /// Send PSN.
    pub sq_psn: u32,
    /// RNR retry count (7 = forever; [`RnrRetry::from_raw`] reads it).
    pub rnr_retry: u8,
    /// The port the QP is bound to (1 on EFA).
    pub port_num: u8,
    /// The P_Key table index (0 on EFA, which has one P_Key).
    pub pkey_index: u16,
    /// Granted limits.
    pub caps: QpCaps,
}

/// Ring layout of one work queue (`efadv_query_qp_wqs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WqLayout {
    /// Ring start.
    pub buffer: usize,
    /// Bytes per entry.
    pub entry_size: u32,
    /// Entries.
    pub num_entries: u32,
    /// Doorbell address.
    pub doorbell: usize,
    /// Most entries per doorbell.
    pub max_batch: u32,
}
