//! The identity block of a shared-memory inbox (see [`super::shm`]): 64 bytes,
//! little-endian, the whole pointer file and the first bytes of the ring's control page:
//! `magic u64 "EFASIMQ1", version u32, ring_bytes u32, owner_pid u32, ring_fd u32,
//! owner_start u64, pidns u64, netns u64, ip u32, port u16, 0 u16, nonce u64`.

use super::shm_ring::CONTROL;
use std::net::{Ipv4Addr, SocketAddrV4};

const MAGIC: u64 = u64::from_le_bytes(*b"EFASIMQ1");
const VERSION: u32 = 2;
/// Bytes of the identity block (the whole pointer file).
pub const IDENTITY: usize = 64;

/// What an inbox says about its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Identity {
    pub(super) ring_bytes: u32,
    pub(super) owner_pid: u32,
    pub(super) ring_fd: u32,
    pub(super) owner_start: u64,
    pub(super) pidns: u64,
    pub(super) netns: u64,
    pub(super) addr: SocketAddrV4,
    pub(super) nonce: u64,
}

impl Identity {
    pub(super) fn encode(&self) -> [u8; IDENTITY] {
        let mut b = [0u8; IDENTITY];
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.ring_bytes.to_le_bytes());
        b[16..20].copy_from_slice(&self.owner_pid.to_le_bytes());
        b[20..24].copy_from_slice(&self.ring_fd.to_le_bytes());
        b[24..32].copy_from_slice(&self.owner_start.to_le_bytes());
        b[32..40].copy_from_slice(&self.pidns.to_le_bytes());
        b[40..48].copy_from_slice(&self.netns.to_le_bytes());
        b[48..52].copy_from_slice(&u32::from(*self.addr.ip()).to_le_bytes());
        b[52..54].copy_from_slice(&self.addr.port().to_le_bytes());
        b[56..64].copy_from_slice(&self.nonce.to_le_bytes());
        b
    }

    pub(super) fn decode(b: &[u8; IDENTITY]) -> Option<Identity> {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(w)
        };
        if u64_at(0) != MAGIC || u32_at(8) != VERSION {
            return None;
        }
        let ring_bytes = u32_at(12);
        if !ring_bytes.is_power_of_two() || !(1 << 16..=1 << 26).contains(&ring_bytes) {
            return None;
        }
        Some(Identity {
            ring_bytes,
            owner_pid: u32_at(16),
            ring_fd: u32_at(20),
            owner_start: u64_at(24),
            pidns: u64_at(32),
            netns: u64_at(40),
            addr: SocketAddrV4::new(
                Ipv4Addr::from(u32_at(48)),
                u16::from_le_bytes([b[52], b[53]]),
            ),
            nonce: u64_at(56),
        })
    }

    /// Bytes of the ring file (control page and data area).
    pub(super) fn file_len(&self) -> usize {
        CONTROL + self.ring_bytes as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_round_trips_and_rejects_garbage() {
        let id = Identity {
            ring_bytes: 2 << 20,
            owner_pid: 42,
            ring_fd: 5,
            owner_start: 7,
            pidns: 9,
            netns: 11,
            addr: "127.0.0.1:47005".parse().unwrap(),
            nonce: 0xdead,
        };
        let b = id.encode();
        assert_eq!(Identity::decode(&b), Some(id));
        let mut bad = b;
        bad[0] ^= 1;
        assert_eq!(Identity::decode(&bad), None, "magic");
        let mut bad = b;
        bad[12..16].copy_from_slice(&3u32.to_le_bytes());
        assert_eq!(Identity::decode(&bad), None, "ring size");
    }
}
