//! Property tests of the export arithmetic over 4 KiB and 64 KiB pages, with a small
//! deterministic generator (splitmix64) mixing random, page-edge and near-overflow cases.

use efa_cuda::{byte_len, export_range, AlignError};

struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A pointer: random, on a page edge, one byte either side of one, or near 2^64.
    fn ptr(&mut self, page: u64) -> u64 {
        let base = (self.next() >> 16) & !(page - 1);
        match self.next() % 6 {
            0 => base,
            1 => base + 1,
            2 => base.wrapping_sub(1),
            3 => u64::MAX - (self.next() % (4 * page)),
            _ => self.next() >> (self.next() % 20),
        }
    }
    /// A length: tiny, around a page, large, or absurd.
    fn len(&mut self, page: u64) -> u64 {
        match self.next() % 6 {
            0 => self.next() % 16,
            1 => page - 1 + self.next() % 3,
            2 => self.next() % (64 * page),
            3 => self.next() >> (self.next() % 64),
            _ => 1 + self.next() % 4096,
        }
    }
}

fn check_one(ptr: u64, len: u64, page: u64) {
    let r = export_range(ptr, len, page);
    if len == 0 {
        assert_eq!(r, Err(AlignError::Empty));
        return;
    }
    let fits = ptr
        .checked_add(len)
        .and_then(|end| end.checked_add(page - 1))
        .is_some();
    if !fits {
        assert_eq!(r, Err(AlignError::Overflow { ptr, len }), "{ptr:#x}+{len}");
        return;
    }
    let r = r.unwrap_or_else(|e| panic!("{ptr:#x}+{len} page {page}: {e}"));
    assert_eq!(r.export_base % page, 0, "base page-aligned");
    assert_eq!(r.export_len % page, 0, "length whole pages");
    assert!(r.export_base <= ptr, "base at or below ptr");
    assert!(r.offset < page, "offset inside the first page");
    assert_eq!(r.export_base + r.offset, ptr, "offset locates the buffer");
    assert_eq!(r.len, len, "registers the exact length");
    assert!(r.offset + r.len <= r.export_len, "buffer inside the export");
    assert!(
        r.offset + r.len > r.export_len - page,
        "no whole spare page at the end"
    );
    assert_eq!(r.iova, ptr, "iova is the CUDA address");
    assert_eq!(
        r.iova - r.offset,
        r.export_base,
        "iova - offset == export base"
    );
    assert_eq!(r.iova % page, r.offset % page, "iova ≡ offset (mod page)");
}

#[test]
fn export_range_properties_hold_for_4k_and_64k_pages() {
    for page in [4096u64, 65536] {
        let mut g = Gen(page);
        for _ in 0..200_000 {
            let (ptr, len) = (g.ptr(page), g.len(page));
            check_one(ptr, len, page);
        }
    }
}

#[test]
fn page_size_changes_the_export_not_the_registration() {
    let mut g = Gen(7);
    for _ in 0..50_000 {
        let ptr = g.ptr(65536) >> 1;
        let len = 1 + g.len(4096) % (1 << 30);
        let small = export_range(ptr, len, 4096).unwrap();
        let big = export_range(ptr, len, 65536).unwrap();
        assert_eq!((small.len, small.iova), (big.len, big.iova));
        // The 64 KiB export contains the 4 KiB one.
        assert!(big.export_base <= small.export_base);
        assert!(big.export_base + big.export_len >= small.export_base + small.export_len);
    }
}

#[test]
fn non_power_of_two_pages_are_rejected() {
    for page in [0u64, 3, 4095, 4097, 65535, 3 << 12] {
        assert_eq!(
            export_range(0x10000, 16, page),
            Err(AlignError::BadPageSize(page))
        );
    }
}

#[test]
fn byte_len_is_checked_multiplication() {
    let mut g = Gen(11);
    for _ in 0..100_000 {
        let (n, e) = (g.next() >> (g.next() % 64), g.next() >> (g.next() % 64));
        match n.checked_mul(e) {
            Some(v) => assert_eq!(byte_len(n, e), Ok(v)),
            None => assert_eq!(
                byte_len(n, e),
                Err(AlignError::SizeOverflow {
                    count: n,
                    elem_size: e
                })
            ),
        }
    }
}
