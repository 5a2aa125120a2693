//! Address handles and peers: how a QP names the destination of a send.

use core::ptr::NonNull;

use crate::context::Context;
use crate::endpoint::{EndpointInfo, Gid, MAX_QPN};
use crate::error::{Error, InvalidInput, Result, Verb};
use crate::ffi;
use crate::parent::Parent;
use crate::pd::{Pd, PdId};

/// The device's number for "no address handle / unknown sender".
pub const AH_UNKNOWN: u16 = 0xffff;

/// An address handle (`ibv_ah`) for one destination GID, destroyed on drop. Holds its
/// PD through `P` (`&Pd<_>` or `Arc<Pd<_>>`).
pub struct Ah<P> {
    raw: NonNull<ffi::ibv_ah>,
    number: u16,
    gid: Gid,
    pd: PdId,
    _pd: P,
}

// SAFETY: an AH is an immutable handle; verbs on it are thread-safe; the PD holder follows
// its own Send/Sync.
unsafe impl<P: Send> Send for Ah<P> {}
// SAFETY: see above.
unsafe impl<P: Sync> Sync for Ah<P> {}

impl<C: Parent<Target = Context>> Pd<C> {
    /// Creates an address handle for `gid` borrowing this PD: [`Ah::new`].
    pub fn create_ah(&self, gid: Gid) -> Result<Ah<&Self>> {
        Ah::new(self, gid)
    }

    /// Creates the AH for a peer's endpoint info and returns the [`Peer`] to send to,
    /// borrowing this PD: [`Peer::connect`].
    pub fn connect(&self, info: &EndpointInfo) -> Result<Peer<&Self>> {
        Peer::connect(self, info)
    }
}

impl<P> Ah<P> {
    /// Creates an address handle for `gid` (port 1) in `pd` and reads its device AH number.
    pub fn new<C>(pd: P, gid: Gid) -> Result<Ah<P>>
    where
        P: Parent<Target = Pd<C>>,
        C: Parent<Target = Context>,
    {
        // SAFETY: all-zero is a valid ibv_ah_attr (integers and a byte union).
        let mut attr: ffi::ibv_ah_attr = unsafe { core::mem::zeroed() };
        attr.grh.dgid = ffi::ibv_gid { raw: gid.0 };
        attr.is_global = 1;
        attr.port_num = 1;
        // SAFETY: valid PD (held by `pd`) and attribute struct.
        let raw = unsafe { ffi::ibv_create_ah(pd.as_ptr(), &mut attr) };
        let Some(raw) = NonNull::new(raw) else {
            return Err(Error::last_os(Verb::CreateAh));
        };
        let mut a = ffi::efadv_ah_attr::default();
        // SAFETY: valid AH; `a` is writable with `inlen` = its size.
        let rc =
            unsafe { ffi::efadv_query_ah(raw.as_ptr(), &mut a, core::mem::size_of_val(&a) as u32) };
        if rc != 0 {
            // SAFETY: the AH was just created and is destroyed once.
            unsafe { ffi::ibv_destroy_ah(raw.as_ptr()) };
            return Err(Error::verb(Verb::EfadvQueryAh, rc));
        }
        Ok(Ah {
            raw,
            number: a.ahn,
            gid,
            pd: pd.id(),
            _pd: pd,
        })
    }

    /// Device AH number (`efadv_query_ah`); the number receivers report as `slid`.
    #[inline]
    pub fn number(&self) -> u16 {
        self.number
    }
    /// Destination GID.
    #[inline]
    pub fn gid(&self) -> Gid {
        self.gid
    }
    /// The raw AH.
    #[inline]
    pub fn as_ptr(&self) -> *mut ffi::ibv_ah {
        self.raw.as_ptr()
    }
    #[inline]
    pub(crate) fn pd_id(&self) -> PdId {
        self.pd
    }
    /// Destroys the AH, reporting failure.
    pub fn close(self) -> Result<(), (Self, Error)> {
        // SAFETY: owned AH destroyed once.
        let rc = unsafe { ffi::ibv_destroy_ah(self.raw.as_ptr()) };
        if rc != 0 {
            return Err((self, Error::verb(Verb::DestroyAh, rc)));
        }
        let me = core::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again; the PD holder is moved out once.
        drop(unsafe { core::ptr::read(&me._pd) });
        Ok(())
    }
}

impl<P> Drop for Ah<P> {
    fn drop(&mut self) {
        // SAFETY: owned AH destroyed once.
        unsafe { ffi::ibv_destroy_ah(self.raw.as_ptr()) };
    }
}

impl<P> core::fmt::Debug for Ah<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Ah")
            .field("number", &self.number)
            .field("gid", &self.gid)
            .finish()
    }
}

/// A destination: address handle + remote QP number + remote qkey. Work requests may
/// name it only on QPs of the AH's protection domain.
#[derive(Debug)]
pub struct Peer<P> {
    ah: Ah<P>,
    qpn: u32,
    qkey: u32,
}

impl<P> Peer<P> {
    /// From an AH and the remote QP's number and qkey; fails if `qpn` exceeds 24 bits.
    pub fn new(ah: Ah<P>, qpn: u32, qkey: u32) -> Result<Peer<P>> {
        if qpn > MAX_QPN {
            return Err(InvalidInput::QpnOutOfRange(qpn).into());
        }
        Ok(Peer { ah, qpn, qkey })
    }
    /// Creates the AH for a peer's endpoint info in `pd` and returns the peer.
    pub fn connect<C>(pd: P, info: &EndpointInfo) -> Result<Peer<P>>
    where
        P: Parent<Target = Pd<C>>,
        C: Parent<Target = Context>,
    {
        info.validate()?;
        let ah = Ah::new(pd, info.gid())?;
        Peer::new(ah, info.qpn(), info.qkey())
    }
    /// The address handle.
    #[inline]
    pub fn ah(&self) -> &Ah<P> {
        &self.ah
    }
    /// Remote QP number.
    #[inline]
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
    /// Remote qkey.
    #[inline]
    pub fn qkey(&self) -> u32 {
        self.qkey
    }
    /// The endpoint info this peer was made from.
    #[inline]
    pub fn endpoint(&self) -> EndpointInfo {
        EndpointInfo::from_parts(self.ah.gid, self.qpn, self.qkey)
    }
    /// Gives the AH back.
    pub fn into_ah(self) -> Ah<P> {
        self.ah
    }
}
