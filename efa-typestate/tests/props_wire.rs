//! Property tests of the two 24-byte wire formats (issue 24, item 5): [`EndpointInfo`]
//! and [`RemoteBuffer`] parsing, and remote slices. Each property states exactly which
//! inputs succeed, what the result is, and which error (with its fields) every other
//! input gives; arbitrary inputs include the edges of the 64-bit space, so that no check
//! can wrap unnoticed and nothing panics (the debug build traps overflow). Shared
//! runner and strategies: `common/props.rs`; ranges and chunking: `props_ranges.rs`.

mod common;

use common::props::*;
use efa_typestate::*;
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------
// EndpointInfo: `[gid:16][qpn:u32 BE][qkey:u32 BE]`, qpn 24-bit.

fn qpn_edge() -> impl Strategy<Value = u32> {
    prop_oneof![
        3 => 0..=MAX_QPN,
        2 => (MAX_QPN - 3)..=(MAX_QPN + 3),
        2 => any::<u32>(),
    ]
}

/// `EndpointInfo::new` accepts exactly the 24-bit QP numbers; what it builds encodes as
/// the documented big-endian layout and parses back to itself.
#[test]
fn endpoint_info_new_encodes_and_parses_back() {
    check(
        "endpoint_info_new_encodes_and_parses_back",
        (any::<[u8; 16]>(), qpn_edge(), any::<u32>()),
        |(gid, qpn, qkey)| {
            let made = EndpointInfo::new(Gid(gid), qpn, qkey);
            if qpn > 0x00ff_ffff {
                prop_assert_eq!(made, invalid(InvalidInput::QpnOutOfRange(qpn)));
                return Ok(());
            }
            let info = made.unwrap();
            prop_assert_eq!((info.gid(), info.qpn(), info.qkey()), (Gid(gid), qpn, qkey));
            prop_assert_eq!(info.validate(), Ok(()));
            let b = info.to_bytes();
            prop_assert_eq!(&b[..16], &gid[..]);
            prop_assert_eq!(&b[16..20], &qpn.to_be_bytes()[..]);
            prop_assert_eq!(&b[20..], &qkey.to_be_bytes()[..]);
            prop_assert_eq!(EndpointInfo::parse(&b), Ok(info));
            Ok(())
        },
    );
}

/// Any bytes, of any length: `parse` never panics; it fails with `WireLength { 24, got }`
/// unless there are exactly 24, then with `QpnOutOfRange(qpn)` when the QPN's high byte
/// (byte 16) is not zero, and otherwise gives the value whose wire bytes are the input
/// (every other bit is carried: the format has no reserved bits).
#[test]
fn endpoint_info_parse_any_bytes() {
    let bytes = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        (any::<[u8; 24]>(), any::<bool>()).prop_map(|(mut b, clear_high)| {
            if clear_high {
                b[16] = 0;
            }
            b.to_vec()
        }),
        (any::<[u8; 16]>(), qpn_edge(), any::<u32>()).prop_map(|(gid, qpn, qkey)| {
            [&gid[..], &qpn.to_be_bytes(), &qkey.to_be_bytes()].concat()
        }),
    ];
    check("endpoint_info_parse_any_bytes", bytes, |b| {
        let got = EndpointInfo::parse(&b);
        if b.len() != 24 {
            prop_assert_eq!(
                got,
                invalid(InvalidInput::WireLength {
                    expected: 24,
                    got: b.len()
                })
            );
            return Ok(());
        }
        let qpn = u32::from_be_bytes(b[16..20].try_into().unwrap());
        let qkey = u32::from_be_bytes(b[20..24].try_into().unwrap());
        if b[16] != 0 {
            prop_assert_eq!(got, invalid(InvalidInput::QpnOutOfRange(qpn)));
            return Ok(());
        }
        let info = got.unwrap();
        prop_assert_eq!(&info.to_bytes()[..], &b[..]);
        prop_assert_eq!(info.gid(), Gid(b[..16].try_into().unwrap()));
        prop_assert_eq!((info.qpn(), info.qkey()), (qpn, qkey));
        prop_assert_eq!(Ok(info), EndpointInfo::new(info.gid(), qpn, qkey));
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------
// RemoteBuffer: `[addr:u64][len:u64][rkey:u32][0:u32]`, big endian; addr + len fits.

/// The canonical wire bytes of a remote buffer.
fn remote_wire(addr: u64, len: u64, rkey: u32) -> [u8; 24] {
    let mut b = [0u8; 24];
    b[..8].copy_from_slice(&addr.to_be_bytes());
    b[8..16].copy_from_slice(&len.to_be_bytes());
    b[16..20].copy_from_slice(&rkey.to_be_bytes());
    b
}

/// A remote buffer whose range fits encodes as the documented layout (reserved word
/// zero) and parses back to itself.
#[test]
fn remote_buffer_round_trip() {
    check(
        "remote_buffer_round_trip",
        (fitting_range(), any::<u32>()),
        |((addr, len), rkey)| {
            let r = RemoteBuffer::new(addr, len, rkey);
            prop_assert_eq!((r.addr(), r.len(), r.rkey()), (addr, len, rkey));
            prop_assert_eq!(r.is_empty(), len == 0);
            prop_assert_eq!(r.to_bytes(), remote_wire(addr, len, rkey));
            prop_assert_eq!(RemoteBuffer::parse(&r.to_bytes()), Ok(r));
            Ok(())
        },
    );
}

/// Any bytes: `parse` succeeds iff there are exactly 24 and `addr + len` fits 64 bits;
/// otherwise `WireLength { 24, got }`, or `AddressWraps { addr, len (saturated) }`. What
/// it gives equals `RemoteBuffer::new(addr, len, rkey)`, so it compares, hashes and
/// encodes as the canonical value whatever the reserved word held.
#[test]
fn remote_buffer_parse_any_bytes() {
    let bytes = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        any::<[u8; 24]>().prop_map(|b| b.to_vec()),
        (
            edge_u64(),
            edge_u64(),
            any::<u32>(),
            prop_oneof![Just(0u32), any::<u32>()]
        )
            .prop_map(|(addr, len, rkey, reserved)| {
                let mut b = remote_wire(addr, len, rkey);
                b[20..].copy_from_slice(&reserved.to_be_bytes());
                b.to_vec()
            }),
    ];
    check("remote_buffer_parse_any_bytes", bytes, |b| {
        let got = RemoteBuffer::parse(&b);
        if b.len() != 24 {
            prop_assert_eq!(
                got,
                invalid(InvalidInput::WireLength {
                    expected: 24,
                    got: b.len()
                })
            );
            return Ok(());
        }
        let addr = u64::from_be_bytes(b[..8].try_into().unwrap());
        let len = u64::from_be_bytes(b[8..16].try_into().unwrap());
        let rkey = u32::from_be_bytes(b[16..20].try_into().unwrap());
        if addr.checked_add(len).is_none() {
            prop_assert_eq!(
                got,
                invalid(InvalidInput::AddressWraps {
                    addr,
                    len: sat(len)
                })
            );
            return Ok(());
        }
        let r = got.unwrap();
        prop_assert_eq!((r.addr(), r.len(), r.rkey()), (addr, len, rkey));
        prop_assert_eq!(r, RemoteBuffer::new(addr, len, rkey));
        prop_assert_eq!(r.to_bytes(), remote_wire(addr, len, rkey));
        Ok(())
    });
}

/// The input `remote_buffer_parse_any_bytes` shrank to before `parse` ignored the
/// reserved word: the parsed value printed as `new(0, 0, 0)` but compared unequal to
/// it and encoded the 1 back.
#[test]
fn remote_buffer_parse_ignores_the_reserved_word() {
    let mut b = [0u8; 24];
    b[23] = 1;
    let r = RemoteBuffer::parse(&b).unwrap();
    assert_eq!(r, RemoteBuffer::new(0, 0, 0));
    assert_eq!(r.to_bytes(), [0u8; 24]);
}

/// `slice(offset, len)` of any buffer (made with `new`, so possibly wrapping): Ok iff
/// `offset + len` fits and is at most the buffer's length, and `addr + offset + len`
/// fits; then the slice lies inside the original, keeps its rkey and parses back.
/// Errors: `RemoteOutOfBounds { offset, len }` for a range outside the buffer, then
/// `AddressWraps` naming the buffer's address (if `addr + offset` wraps) or the slice's.
#[test]
fn remote_buffer_slice() {
    let strategy = (edge_u64(), edge_u64(), any::<u32>()).prop_flat_map(|(addr, len, rkey)| {
        let inside = (0..=len).prop_flat_map(move |o| (Just(o), 0..=len - o));
        let at_end = (0..=len.min(16)).prop_map(move |l| (len - l, l));
        (
            Just((addr, len, rkey)),
            prop_oneof![(edge_u64(), edge_u64()), inside, at_end],
        )
    });
    check(
        "remote_buffer_slice",
        strategy,
        |((addr, len, rkey), (off, slen))| {
            let r = RemoteBuffer::new(addr, len, rkey);
            let got = r.slice(off, slen);
            let Some(end) = off.checked_add(slen).filter(|&e| e <= len) else {
                prop_assert_eq!(
                    got,
                    invalid(InvalidInput::RemoteOutOfBounds {
                        offset: off,
                        len: sat(slen)
                    })
                );
                return Ok(());
            };
            let Some(start) = addr.checked_add(off) else {
                prop_assert_eq!(
                    got,
                    invalid(InvalidInput::AddressWraps {
                        addr,
                        len: sat(end)
                    })
                );
                return Ok(());
            };
            if start.checked_add(slen).is_none() {
                prop_assert_eq!(
                    got,
                    invalid(InvalidInput::AddressWraps {
                        addr: start,
                        len: sat(slen)
                    })
                );
                return Ok(());
            }
            let s = got.unwrap();
            prop_assert_eq!((s.addr(), s.len(), s.rkey()), (start, slen, rkey));
            // Inside the original (its end computed without wrapping).
            prop_assert!(s.addr() >= r.addr());
            prop_assert!(
                u128::from(s.addr()) + u128::from(s.len()) <= u128::from(addr) + u128::from(len)
            );
            prop_assert_eq!(RemoteBuffer::parse(&s.to_bytes()), Ok(s));
            prop_assert_eq!(s.slice(0, slen), Ok(s));
            Ok(())
        },
    );
}
