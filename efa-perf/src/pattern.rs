//! The bytes efa-perf moves, and their verification on the receiving side: a pattern
//! that depends on the message size and the byte's position, with an optional 8-byte
//! sequence stamp at the start (ping-pong tests stamp every message).

/// Byte `i` of the pattern of `size`-byte messages.
#[inline]
pub fn byte(size: usize, i: usize) -> u8 {
    (i as u32)
        .wrapping_mul(131)
        .wrapping_add((size as u32).wrapping_mul(7))
        .wrapping_add(1) as u8
}

/// Bytes of the stamp (fewer for messages shorter than 8 bytes).
pub fn stamp_len(size: usize) -> usize {
    size.min(8)
}

/// Writes the pattern of `size`-byte messages into `buf[..size]`.
pub fn fill(buf: &mut [u8], size: usize) {
    for (i, b) in buf[..size].iter_mut().enumerate() {
        *b = byte(size, i);
    }
}

/// Writes sequence number `seq` over the first bytes of a `size`-byte message.
pub fn stamp(buf: &mut [u8], size: usize, seq: u64) {
    let n = stamp_len(size);
    buf[..n].copy_from_slice(&seq.to_le_bytes()[..n]);
}

/// The sequence number stamped in `got` (its first bytes).
pub fn read_stamp(got: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = got.len().min(8);
    b[..n].copy_from_slice(&got[..n]);
    u64::from_le_bytes(b)
}

/// Checks a received `size`-byte message: the pattern, after a stamp of `seq` if given;
/// the error names the first wrong byte.
pub fn check(got: &[u8], size: usize, seq: Option<u64>) -> Result<(), String> {
    if got.len() < size {
        return Err(format!("only {} of {size} bytes arrived", got.len()));
    }
    let from = match seq {
        Some(s) => {
            let n = stamp_len(size);
            let mask = if n == 8 {
                u64::MAX
            } else {
                (1u64 << (8 * n)) - 1
            };
            let want = s & mask;
            if read_stamp(&got[..n]) != want {
                return Err(format!(
                    "data mismatch in a {size}-byte message: sequence stamp {} where {want} was sent",
                    read_stamp(&got[..n])
                ));
            }
            n
        }
        None => 0,
    };
    match (from..size).find(|&i| got[i] != byte(size, i)) {
        None => Ok(()),
        Some(i) => Err(format!(
            "data mismatch: byte {i} of a {size}-byte message is 0x{:02x}, expected 0x{:02x}",
            got[i],
            byte(size, i)
        )),
    }
}

/// Checks that `guard` (the bytes after a message) is still all zero.
pub fn check_untouched(guard: &[u8], size: usize) -> Result<(), String> {
    match guard.iter().position(|&b| b != 0) {
        None => Ok(()),
        Some(i) => Err(format!(
            "data written where it must not go: byte {} after a {size}-byte message changed",
            i
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verification_finds_the_first_wrong_byte() {
        let mut b = vec![0u8; 100];
        fill(&mut b, 100);
        assert_eq!(check(&b, 100, None), Ok(()));
        stamp(&mut b, 100, 77);
        assert_eq!(check(&b, 100, Some(77)), Ok(()));
        assert!(check(&b, 100, Some(78))
            .unwrap_err()
            .contains("sequence stamp 77"));
        b[50] ^= 1;
        let e = check(&b, 100, Some(77)).unwrap_err();
        assert!(e.contains("byte 50 of a 100-byte message"), "{e}");
        let mut small = [0u8; 3];
        fill(&mut small, 3);
        stamp(&mut small, 3, 0x0102_0304);
        assert_eq!(check(&small, 3, Some(0x0102_0304)), Ok(()));
        assert!(check(&small[..2], 3, None)
            .unwrap_err()
            .contains("only 2 of 3"));
        assert_eq!(check_untouched(&[0; 8], 4), Ok(()));
        assert!(check_untouched(&[0, 0, 9], 4)
            .unwrap_err()
            .contains("byte 2 after"));
    }
}
