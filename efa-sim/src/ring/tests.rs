//! The rings' unit tests.
use super::*;

#[test]
fn slots_wrap_and_copy_whole_entries() {
    let r = Ring::new(4, 32).unwrap();
    assert!(!r.as_ptr().is_null());
    assert_eq!(r.as_ptr() as usize % 4096, 0, "page aligned");
    r.write_slot(5, &[7u8; 32]);
    let mut out = [0u8; 32];
    r.read_slot(1, &mut out);
    assert_eq!(out, [7u8; 32], "slot 5 of 4 is slot 1");
    let mut e = [9u8; 32];
    e[3] = 0x81;
    r.publish_slot(6, &e);
    assert_eq!(r.load_head(2).to_ne_bytes(), [9, 9, 9, 0x81, 9, 9, 9, 9]);
    assert_eq!(r.load_byte(6, 3), 0x81);
    r.read_slot(2, &mut out);
    assert_eq!(out, e, "the whole entry, first word included");
    r.doorbell().write(9);
    assert_eq!(r.doorbell().read(), 9);
    assert_eq!(r.doorbell().as_ptr() as usize % 64, 0);
}

std::thread_local! {
    /// The entry as a reader would copy it at each pause of `publish_slot_torn`.
    static SEEN: std::cell::RefCell<Vec<[u64; 4]>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Called at each pause of [`Ring::publish_slot_torn`] (test builds).
pub(super) fn paused(r: &Ring, index: u32) {
    let mut words = [0u8; 32];
    r.read_slot(index, &mut words);
    let w = |i: usize| u64::from_ne_bytes(words[8 * i..8 * i + 8].try_into().unwrap());
    SEEN.with(|s| s.borrow_mut().push([w(0), w(1), w(2), w(3)]));
}

#[test]
fn strict_completions_land_in_pieces_with_the_phase_last() {
    let r = Ring::new(4, 32).unwrap();
    let old = [0x11u8; 32];
    r.publish_slot(0, &old);
    let mut new = [0x22u8; 32];
    new[3] = 0x23; // the flags byte: another phase
    r.publish_slot_torn(0, &new);
    let seen = SEEN.with(|s| s.take());
    let (o, n) = (u64::from_ne_bytes([0x11; 8]), u64::from_ne_bytes([0x22; 8]));
    // A reader in a pause sees the old phase word with part of the new entry: torn,
    // whichever words it copies before looking at the phase.
    assert_eq!(seen, vec![[o, o, o, n], [o, o, n, n], [o, n, n, n]]);
    let mut out = [0u8; 32];
    r.read_slot(0, &mut out);
    assert_eq!(out, new, "whole once the phase word is stored");
}

#[test]
fn empty_ring_has_no_memory() {
    let r = Ring::new(0, 16).unwrap();
    assert!(r.as_ptr().is_null());
    let mut out = [1u8; 16];
    r.read_slot(0, &mut out);
    assert_eq!(out, [0u8; 16]);
}

#[test]
fn cursor_phase_flips_per_lap() {
    let mut c = Cursor::default();
    for _ in 0..4 {
        c.advance(4);
    }
    assert_eq!((c.count, c.phase), (4, 1));
    for _ in 0..4 {
        c.advance(4);
    }
    assert_eq!((c.count, c.phase), (8, 0));
}
