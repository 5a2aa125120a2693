//! The remote view of a registration: what a peer needs to RDMA into or out of it, with
//! its 24-byte wire format.
// Addresses and lengths here come from peers: no arithmetic that can wrap.
#![deny(clippy::arithmetic_side_effects)]

use zerocopy::byteorder::big_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::{Error, InvalidInput, Result};

/// A peer's registered memory as seen from here: device address, length and rkey, with a
/// 24-byte network-order wire format (`[addr:u64][len:u64][rkey:u32][0:u32]`, big endian).
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct RemoteBuffer {
    addr: U64,
    len: U64,
    rkey: U32,
    reserved: U32,
}

impl RemoteBuffer {
    /// Size of the wire format.
    pub const WIRE_SIZE: usize = 24;

    /// From its parts.
    #[inline]
    pub fn new(addr: u64, len: u64, rkey: u32) -> RemoteBuffer {
        RemoteBuffer {
            addr: U64::new(addr),
            len: U64::new(len),
            rkey: U32::new(rkey),
            reserved: U32::ZERO,
        }
    }
    /// Parses the 24-byte wire format. A range that runs past the end of the 64-bit
    /// address space is refused ([`InvalidInput::AddressWraps`]): a peer's bytes are
    /// input like any other. The reserved word is ignored: the value is the one
    /// [`new`](Self::new) makes of the address, length and rkey.
    #[inline]
    pub fn parse(bytes: &[u8]) -> Result<RemoteBuffer> {
        let r = RemoteBuffer::read_from_bytes(bytes).map_err(|_| {
            Error::Invalid(InvalidInput::WireLength {
                expected: Self::WIRE_SIZE as u32,
                got: bytes.len(),
            })
        })?;
        r.end()?;
        // Not `r` itself: a non-zero reserved word would make it unequal to (and hash
        // and encode differently from) the buffer it names.
        Ok(RemoteBuffer::new(r.addr(), r.len(), r.rkey()))
    }
    /// One past the last byte's address; fails if that does not fit 64 bits.
    #[inline]
    pub(crate) fn end(&self) -> Result<u64> {
        self.addr().checked_add(self.len()).ok_or_else(|| {
            InvalidInput::AddressWraps {
                addr: self.addr(),
                len: saturate(self.len()),
            }
            .into()
        })
    }
    /// The wire bytes.
    #[inline]
    pub fn to_bytes(&self) -> [u8; 24] {
        let mut out = [0u8; 24];
        out.copy_from_slice(self.as_bytes());
        out
    }
    /// Device address of the first byte.
    #[inline]
    pub fn addr(&self) -> u64 {
        self.addr.get()
    }
    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> u64 {
        self.len.get()
    }
    /// True if zero bytes long.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Remote key.
    #[inline]
    pub fn rkey(&self) -> u32 {
        self.rkey.get()
    }
    /// `len` bytes at `offset`, checked to lie inside this buffer (and, for a buffer
    /// made with [`new`](Self::new) from unchecked parts, inside the address space).
    #[inline]
    pub fn slice(&self, offset: u64, len: u64) -> Result<RemoteBuffer> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => {
                let Some(addr) = self.addr().checked_add(offset) else {
                    return Err(InvalidInput::AddressWraps {
                        addr: self.addr(),
                        len: saturate(end),
                    }
                    .into());
                };
                let out = RemoteBuffer::new(addr, len, self.rkey());
                out.end()?;
                Ok(out)
            }
            _ => Err(InvalidInput::RemoteOutOfBounds {
                offset,
                len: saturate(len),
            }
            .into()),
        }
    }
}

/// A length for an error field of 32 bits.
fn saturate(len: u64) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

impl core::fmt::Debug for RemoteBuffer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "RemoteBuffer {{ addr: {:#x}, len: {}, rkey: {:#x} }}",
            self.addr(),
            self.len(),
            self.rkey()
        )
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    #[test]
    fn wire_format_is_big_endian_and_checked() {
        let r = RemoteBuffer::new(0x0102_0304_0506_0708, 0x1000, 0xaabb_ccdd);
        let b = r.to_bytes();
        assert_eq!(&b[..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[8..16], &0x1000u64.to_be_bytes());
        assert_eq!(&b[16..20], &[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(&b[20..], &[0; 4]);
        assert_eq!(RemoteBuffer::parse(&b).unwrap(), r);
        assert_eq!(
            RemoteBuffer::parse(&b[..23]).unwrap_err(),
            Error::Invalid(InvalidInput::WireLength {
                expected: 24,
                got: 23
            })
        );
    }

    #[test]
    fn slices_stay_inside() {
        let r = RemoteBuffer::new(0x1000, 128, 9);
        let s = r.slice(100, 28).unwrap();
        assert_eq!((s.addr(), s.len(), s.rkey()), (0x1000 + 100, 28, 9));
        assert_eq!(
            r.slice(1, 128).unwrap_err(),
            Error::Invalid(InvalidInput::RemoteOutOfBounds {
                offset: 1,
                len: 128
            })
        );
        assert_eq!(
            r.slice(0, 1 << 40).unwrap_err(),
            Error::Invalid(InvalidInput::RemoteOutOfBounds {
                offset: 0,
                len: u32::MAX
            })
        );
        assert!(r.slice(u64::MAX, 2).is_err());
    }
}
