//! Address handles and peers: how a QP names the destination of a send.

use core::marker::PhantomData;
use core::ptr::NonNull;

use crate::endpoint::{EndpointInfo, Gid, MAX_QPN};
use crate::error::{Error, InvalidInput, Result, Verb};
use crate::ffi;
use crate::pd::Pd;

/// The device's number for "no address handle / unknown sender".
pub const AH_UNKNOWN: u16 = 0xffff;

/// An address handle (`ibv_ah`) for one destination GID, destroyed on drop.
pub struct Ah<'pd> {
    raw: NonNull<ffi::ibv_ah>,
    number: u16,
    gid: Gid,
    _pd: PhantomData<&'pd Pd<'pd>>,
}

// SAFETY: an AH is an immutable handle; verbs on it are thread-safe.
unsafe impl Send for Ah<'_> {}
// SAFETY: see above.
unsafe impl Sync for Ah<'_> {}

impl<'pd> Pd<'pd> {
    /// Creates an address handle for `gid` (port 1) and reads its device AH number.
    pub fn create_ah(&'pd self, gid: Gid) -> Result<Ah<'pd>> {
        // SAFETY: all-zero is a valid ibv_ah_attr (integers and a byte union).
        let mut attr: ffi::ibv_ah_attr = unsafe { core::mem::zeroed() };
        attr.grh.dgid = ffi::ibv_gid { raw: gid.0 };
        attr.is_global = 1;
        attr.port_num = 1;
        // SAFETY: valid PD and attribute struct.
        let raw = unsafe { ffi::ibv_create_ah(self.as_ptr(), &mut attr) };
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
            _pd: PhantomData,
        })
    }

    /// Creates the AH for a peer's endpoint info and returns the [`Peer`] to send to.
    pub fn connect(&'pd self, info: &EndpointInfo) -> Result<Peer<'pd>> {
        info.validate()?;
        let ah = self.create_ah(info.gid())?;
        Peer::new(ah, info.qpn(), info.qkey())
    }
}

impl Ah<'_> {
    /// Device AH number (`efadv_query_ah`); the number receivers report as `slid`.
    pub fn number(&self) -> u16 {
        self.number
    }
    /// Destination GID.
    pub fn gid(&self) -> Gid {
        self.gid
    }
    /// The raw AH.
    pub fn as_ptr(&self) -> *mut ffi::ibv_ah {
        self.raw.as_ptr()
    }
    /// Destroys the AH, reporting failure.
    pub fn close(self) -> Result<(), (Self, Error)> {
        // SAFETY: owned AH destroyed once.
        let rc = unsafe { ffi::ibv_destroy_ah(self.raw.as_ptr()) };
        if rc != 0 {
            return Err((self, Error::verb(Verb::DestroyAh, rc)));
        }
        core::mem::forget(self);
        Ok(())
    }
}

impl Drop for Ah<'_> {
    fn drop(&mut self) {
        // SAFETY: owned AH destroyed once.
        unsafe { ffi::ibv_destroy_ah(self.raw.as_ptr()) };
    }
}

impl core::fmt::Debug for Ah<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Ah")
            .field("number", &self.number)
            .field("gid", &self.gid)
            .finish()
    }
}

/// A destination: address handle + remote QP number + remote qkey.
#[derive(Debug)]
pub struct Peer<'pd> {
    ah: Ah<'pd>,
    qpn: u32,
    qkey: u32,
}

impl<'pd> Peer<'pd> {
    /// From an AH and the remote QP's number and qkey; fails if `qpn` exceeds 24 bits.
    pub fn new(ah: Ah<'pd>, qpn: u32, qkey: u32) -> Result<Peer<'pd>> {
        if qpn > MAX_QPN {
            return Err(InvalidInput::QpnOutOfRange(qpn).into());
        }
        Ok(Peer { ah, qpn, qkey })
    }
    /// The address handle.
    pub fn ah(&self) -> &Ah<'pd> {
        &self.ah
    }
    /// Remote QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
    /// Remote qkey.
    pub fn qkey(&self) -> u32 {
        self.qkey
    }
    /// The endpoint info this peer was made from.
    pub fn endpoint(&self) -> EndpointInfo {
        EndpointInfo::from_parts(self.ah.gid, self.qpn, self.qkey)
    }
    /// Gives the AH back.
    pub fn into_ah(self) -> Ah<'pd> {
        self.ah
    }
}
