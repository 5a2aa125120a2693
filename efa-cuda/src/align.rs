//! The export arithmetic of a dma-buf registration, pure and separately tested.
//!
//! `cuMemGetHandleForAddressRange` exports only host-page-aligned ranges (pointer and size
//! both multiples of the *host* page size: 4 KiB on x86, 64 KiB on some aarch64 kernels),
//! while a buffer may start and end anywhere. So the export covers the pages around the
//! buffer, and the registration names the buffer inside it:
//!
//! ```text
//!   export_base            ptr                 ptr+len        export_base+export_len
//!   |<------ offset ------>|<------ len ------>|                |
//!   ibv_reg_dmabuf_mr(pd, offset, len, iova = ptr, fd, access)
//! ```
//!
//! With `iova = ptr` the MR's address space is the CUDA virtual address space, and
//! `iova - offset == export_base` (what the kernel and the EFA provider rely on).

use core::fmt;

/// Why an export range cannot be formed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlignError {
    /// Zero-length buffer.
    Empty,
    /// `ptr + len` (or its rounding up to a page) overflows 64 bits.
    Overflow {
        /// Start of the buffer.
        ptr: u64,
        /// Its length.
        len: u64,
    },
    /// `count * elem_size` overflows.
    SizeOverflow {
        /// Number of elements.
        count: u64,
        /// Size of one element.
        elem_size: u64,
    },
    /// The page size is zero or not a power of two.
    BadPageSize(u64),
}

impl fmt::Display for AlignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AlignError::Empty => write!(f, "empty range"),
            AlignError::Overflow { ptr, len } => {
                write!(f, "range of {len} bytes at {ptr:#x} overflows")
            }
            AlignError::SizeOverflow { count, elem_size } => {
                write!(f, "{count} elements of {elem_size} bytes overflow")
            }
            AlignError::BadPageSize(p) => write!(f, "page size {p} is not a power of two"),
        }
    }
}

/// What to export and what to register for a buffer `[ptr, ptr + len)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportRange {
    /// First byte of the export: `ptr` rounded down to a page.
    pub export_base: u64,
    /// Length of the export: a whole number of pages covering the buffer.
    pub export_len: u64,
    /// Offset of the buffer inside the export (`ibv_reg_dmabuf_mr`'s `offset`).
    pub offset: u64,
    /// Length to register (the buffer's exact length).
    pub len: u64,
    /// The device address the MR uses for its first byte: the CUDA address `ptr`.
    pub iova: u64,
}

/// The page-rounded export covering `[ptr, ptr + len)` for pages of `page` bytes.
pub fn export_range(ptr: u64, len: u64, page: u64) -> Result<ExportRange, AlignError> {
    if page == 0 || !page.is_power_of_two() {
        return Err(AlignError::BadPageSize(page));
    }
    if len == 0 {
        return Err(AlignError::Empty);
    }
    let overflow = AlignError::Overflow { ptr, len };
    let end = ptr.checked_add(len).ok_or(overflow)?;
    let export_base = ptr & !(page - 1);
    let export_end = end.checked_add(page - 1).ok_or(overflow)? & !(page - 1);
    Ok(ExportRange {
        export_base,
        export_len: export_end - export_base,
        offset: ptr - export_base,
        len,
        iova: ptr,
    })
}

/// `count * elem_size`, the byte length of a typed buffer, checked.
pub fn byte_len(count: u64, elem_size: u64) -> Result<u64, AlignError> {
    count
        .checked_mul(elem_size)
        .ok_or(AlignError::SizeOverflow { count, elem_size })
}

/// The host page size (`sysconf(_SC_PAGESIZE)`): never assumed, it is 64 KiB on some
/// aarch64 kernels.
pub fn host_page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        // sysconf cannot fail for _SC_PAGESIZE on Linux; keep a sane value regardless.
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_page_size_is_a_power_of_two() {
        assert!(host_page_size().is_power_of_two());
    }

    #[test]
    fn aligned_buffer_exports_itself() {
        let r = export_range(0x10000, 0x2000, 4096).unwrap();
        assert_eq!(
            r,
            ExportRange {
                export_base: 0x10000,
                export_len: 0x2000,
                offset: 0,
                len: 0x2000,
                iova: 0x10000
            }
        );
    }

    #[test]
    fn unaligned_buffer_spans_its_pages() {
        // 1 byte at the last byte of a page: one page.
        let r = export_range(0x10fff, 1, 4096).unwrap();
        assert_eq!(
            (r.export_base, r.export_len, r.offset),
            (0x10000, 0x1000, 0xfff)
        );
        // 2 bytes across a page boundary: two pages.
        let r = export_range(0x10fff, 2, 4096).unwrap();
        assert_eq!(
            (r.export_base, r.export_len, r.offset),
            (0x10000, 0x2000, 0xfff)
        );
        // Same buffer with 64 KiB pages.
        let r = export_range(0x10fff, 2, 65536).unwrap();
        assert_eq!(
            (r.export_base, r.export_len, r.offset),
            (0x10000, 0x10000, 0xfff)
        );
    }

    #[test]
    fn rejects_empty_overflow_and_bad_pages() {
        assert_eq!(export_range(0x1000, 0, 4096), Err(AlignError::Empty));
        assert_eq!(
            export_range(u64::MAX - 10, 11, 4096),
            Err(AlignError::Overflow {
                ptr: u64::MAX - 10,
                len: 11
            })
        );
        // Fits in 64 bits but its page-rounded end does not.
        assert_eq!(
            export_range(u64::MAX - 4095, 10, 4096),
            Err(AlignError::Overflow {
                ptr: u64::MAX - 4095,
                len: 10
            })
        );
        assert_eq!(export_range(0, 1, 0), Err(AlignError::BadPageSize(0)));
        assert_eq!(export_range(0, 1, 3000), Err(AlignError::BadPageSize(3000)));
        assert_eq!(
            byte_len(u64::MAX / 2, 3),
            Err(AlignError::SizeOverflow {
                count: u64::MAX / 2,
                elem_size: 3
            })
        );
        assert_eq!(byte_len(1024, 4), Ok(4096));
    }
}
