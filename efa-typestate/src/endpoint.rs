//! Addresses: the 16-byte GID and the 24-byte endpoint info peers exchange out of band.
// Offsets, lengths and indexes here come from callers or peers: no arithmetic that can wrap.
#![deny(clippy::arithmetic_side_effects)]

use core::fmt;

use zerocopy::byteorder::big_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::{InvalidInput, Result};

/// A device's 16-byte network address (formatted like an IPv6 address).
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Default,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
#[repr(transparent)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The raw bytes.
    #[inline]
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks_exact(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:x}", u16::from_be_bytes([pair[0], pair[1]]))?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// The error for a wire buffer of `got` bytes (out of line: it is the cold path).
#[cold]
#[inline(never)]
fn wire_length(got: usize) -> crate::Error {
    InvalidInput::WireLength {
        expected: EndpointInfo::WIRE_SIZE as u32,
        got,
    }
    .into()
}

/// The error for a QP number that does not fit 24 bits (out of line, so that the
/// error's fields do not split the `Ok` value into pieces on the hot path).
#[cold]
#[inline(never)]
fn qpn_out_of_range(qpn: u32) -> crate::Error {
    InvalidInput::QpnOutOfRange(qpn).into()
}

/// Largest QP number the wire format carries (24 bits).
pub const MAX_QPN: u32 = 0x00ff_ffff;

/// What a peer needs to reach one of our QPs: GID, QP number and qkey, in a fixed
/// 24-byte, network-byte-order wire format (`[gid:16][qpn:u32 BE][qkey:u32 BE]`).
///
/// Send [`as_bytes`](IntoBytes::as_bytes) to the peer by any means; parse what arrives
/// with [`EndpointInfo::parse`], which rejects wrong sizes and out-of-range values.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct EndpointInfo {
    gid: Gid,
    qpn: U32,
    qkey: U32,
}

static_assertions::assert_eq_size!(EndpointInfo, [u8; 24]);

impl EndpointInfo {
    /// Size of the wire format.
    pub const WIRE_SIZE: usize = 24;

    /// Builds endpoint info; fails if `qpn` does not fit 24 bits.
    #[inline]
    pub fn new(gid: Gid, qpn: u32, qkey: u32) -> Result<EndpointInfo> {
        if qpn > MAX_QPN {
            return Err(qpn_out_of_range(qpn));
        }
        Ok(EndpointInfo {
            gid,
            qpn: U32::new(qpn),
            qkey: U32::new(qkey),
        })
    }

    /// From parts already known to be in range (QPN masked to 24 bits).
    #[inline]
    pub(crate) fn from_parts(gid: Gid, qpn: u32, qkey: u32) -> EndpointInfo {
        EndpointInfo {
            gid,
            qpn: U32::new(qpn & MAX_QPN),
            qkey: U32::new(qkey),
        }
    }

    /// Parses the 24-byte wire format.
    #[inline]
    pub fn parse(bytes: &[u8]) -> Result<EndpointInfo> {
        // Field by field rather than `read_from_bytes` + `validate()?`: that moved the
        // value through the result in odd-sized pieces (twice C's instructions).
        let Ok(wire) = <&[u8; Self::WIRE_SIZE]>::try_from(bytes) else {
            return Err(wire_length(bytes.len()));
        };
        let (gid, rest) = wire.split_at(16);
        let (qpn, qkey) = rest.split_at(4);
        // The lengths are constants: these conversions cannot fail and fold away.
        let qpn = U32::from_bytes(qpn.try_into().unwrap_or_default());
        if qpn.get() > MAX_QPN {
            return Err(qpn_out_of_range(qpn.get()));
        }
        Ok(EndpointInfo {
            gid: Gid(gid.try_into().unwrap_or_default()),
            qpn,
            qkey: U32::from_bytes(qkey.try_into().unwrap_or_default()),
        })
    }

    /// Checks the value ranges (useful after a zero-copy cast that bypassed [`parse`](Self::parse)).
    #[inline]
    pub fn validate(&self) -> Result<()> {
        let qpn = self.qpn.get();
        if qpn > MAX_QPN {
            return Err(qpn_out_of_range(qpn));
        }
        Ok(())
    }

    /// The wire bytes.
    #[inline]
    pub fn to_bytes(&self) -> [u8; 24] {
        let mut out = [0u8; 24];
        out.copy_from_slice(self.as_bytes());
        out
    }

    /// The peer's GID.
    #[inline]
    pub fn gid(&self) -> Gid {
        self.gid
    }
    /// The peer's QP number.
    #[inline]
    pub fn qpn(&self) -> u32 {
        self.qpn.get()
    }
    /// The peer QP's qkey.
    #[inline]
    pub fn qkey(&self) -> u32 {
        self.qkey.get()
    }
}

impl fmt::Debug for EndpointInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointInfo")
            .field("gid", &self.gid)
            .field("qpn", &self.qpn())
            .field("qkey", &format_args!("{:#x}", self.qkey()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_is_big_endian() {
        let gid = Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        let info = EndpointInfo::new(gid, 0x123456, 0x11223344).unwrap();
        let b = info.to_bytes();
        assert_eq!(&b[..16], gid.as_bytes());
        assert_eq!(&b[16..20], &[0x00, 0x12, 0x34, 0x56]);
        assert_eq!(&b[20..24], &[0x11, 0x22, 0x33, 0x44]);
        assert_eq!(EndpointInfo::parse(&b).unwrap(), info);
    }

    #[test]
    fn rejects_bad_input() {
        let b = [0u8; 24];
        assert_eq!(
            EndpointInfo::parse(&b[..23]),
            Err(crate::Error::Invalid(InvalidInput::WireLength {
                expected: 24,
                got: 23
            }))
        );
        let mut long = [0u8; 25];
        long[..24].copy_from_slice(&b);
        assert_eq!(
            EndpointInfo::parse(&long),
            Err(crate::Error::Invalid(InvalidInput::WireLength {
                expected: 24,
                got: 25
            }))
        );
        let mut bad = [0u8; 24];
        bad[16..20].copy_from_slice(&0x0100_0000u32.to_be_bytes());
        assert_eq!(
            EndpointInfo::parse(&bad),
            Err(crate::Error::Invalid(InvalidInput::QpnOutOfRange(
                0x0100_0000
            )))
        );
        assert!(EndpointInfo::new(Gid::default(), MAX_QPN + 1, 0).is_err());
    }

    #[test]
    fn gid_formats_like_ipv6() {
        let gid = Gid([
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x04, 0xa5, 0x28, 0xff, 0xfe, 0x98, 0xe5, 0,
        ]);
        let mut s = arrayvec::ArrayString::<64>::new();
        core::fmt::write(&mut s, format_args!("{gid}")).unwrap();
        assert_eq!(s.as_str(), "fe80:0:0:0:4a5:28ff:fe98:e500");
    }
}
