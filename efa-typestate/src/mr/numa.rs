//! [`NumaBuffer`]: page-aligned host memory placed on one NUMA node (the NIC's, for
//! staging buffers near it), registrable like any [`RegionMemory`].
//!
//! An anonymous `mmap`, an `mbind(MPOL_BIND)` to the node, then every page touched so it
//! is allocated under that policy before a registration pins it. Where the kernel refuses
//! the policy (a node this machine does not have, as on a one-node container running an
//! instance shape of efa-sim; `mbind` forbidden by a seccomp filter) the memory is still
//! allocated, on whatever node the kernel chooses, and [`NumaPlacement`] says which node
//! was asked for, why the policy failed and where the pages are
//! (`get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR)`).

use core::ptr::NonNull;

use super::memory::{RawRegion, RegionMemory};
use crate::topology::NicTopology;

/// `MPOL_BIND`, `MPOL_F_NODE`, `MPOL_F_ADDR` (linux/mempolicy.h).
const MPOL_BIND: libc::c_int = 2;
const MPOL_F_NODE: libc::c_ulong = 1;
const MPOL_F_ADDR: libc::c_ulong = 2;
/// Nodes the `mbind` mask holds (the kernel's largest `MAX_NUMNODES`).
pub const MAX_NUMA_NODES: u32 = 1024;
const WORD_BITS: u32 = libc::c_ulong::BITS;
const MASK_WORDS: usize = (MAX_NUMA_NODES / WORD_BITS) as usize;
/// `mbind`'s `maxnode`: the kernel reads one bit fewer than it says.
const MAXNODE: libc::c_ulong = MAX_NUMA_NODES as libc::c_ulong + 1;

/// Where a [`NumaBuffer`] asked to be and where it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NumaPlacement {
    /// The node asked for (`None`: no node given, e.g. a NIC whose sysfs `numa_node` is
    /// -1; no policy was set).
    pub requested: Option<u32>,
    /// `errno` of the `mbind` the kernel refused (`EINVAL`: no such node with memory;
    /// `EPERM`/`ENOSYS`: forbidden here); `None` when it was applied or not attempted.
    pub bind_errno: Option<i32>,
    /// The node holding the buffer's first and last pages, as the kernel reports it after
    /// they were touched (`None`: the kernel does not say, or they are on different
    /// nodes).
    pub actual: Option<u32>,
}

impl NumaPlacement {
    /// Whether the kernel honoured the request: the policy was set and the pages checked
    /// are on the node asked for.
    pub fn honoured(&self) -> bool {
        self.requested.is_some() && self.bind_errno.is_none() && self.actual == self.requested
    }
}

/// Why a [`NumaBuffer`] could not be allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NumaError {
    /// Zero bytes asked for.
    Empty,
    /// The length rounded up to whole pages does not fit in `usize`.
    TooLarge {
        /// The length asked for.
        len: usize,
    },
    /// A node beyond [`MAX_NUMA_NODES`].
    NodeOutOfRange {
        /// The node asked for.
        node: u32,
    },
    /// `mmap` failed.
    Mmap {
        /// The bytes asked for (whole pages).
        len: usize,
        /// Its `errno`.
        errno: i32,
    },
}

impl core::fmt::Display for NumaError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            NumaError::Empty => write!(f, "a NUMA buffer of zero bytes"),
            NumaError::TooLarge { len } => {
                write!(
                    f,
                    "a NUMA buffer of {len} bytes does not fit in whole pages"
                )
            }
            NumaError::NodeOutOfRange { node } => write!(
                f,
                "NUMA node {node} is beyond the {MAX_NUMA_NODES} nodes a policy can name"
            ),
            NumaError::Mmap { len, errno } => {
                write!(
                    f,
                    "mmap of {len} bytes for a NUMA buffer failed: errno {errno}"
                )
            }
        }
    }
}

impl std::error::Error for NumaError {}

/// What [`NumaBuffer`] keeps besides its pages (boxed while registered: a registration
/// carries one word besides pointer and length).
#[derive(Clone, Copy, Debug)]
struct Meta {
    mapped: usize,
    placement: NumaPlacement,
}

/// `len` bytes of zeroed, page-aligned host memory on a chosen NUMA node (best effort,
/// reported by [`placement`](Self::placement)), unmapped on drop. Register it like a
/// `Vec<u8>` (`pd.register(buf, access)`): it is owned memory that stays allocated if its
/// registration is leaked.
#[derive(Debug)]
pub struct NumaBuffer {
    ptr: NonNull<u8>,
    len: usize,
    meta: Meta,
}

// SAFETY: the buffer owns its pages exclusively (as a Vec<u8> owns its heap block); the
// raw pointer is only its address.
unsafe impl Send for NumaBuffer {}
// SAFETY: shared access only reads through `&self`.
unsafe impl Sync for NumaBuffer {}

impl NumaBuffer {
    /// `len` bytes on `node` (`None`: wherever the kernel places them, no policy set).
    /// Errors: [`NumaError::Empty`], [`NumaError::TooLarge`],
    /// [`NumaError::NodeOutOfRange`], [`NumaError::Mmap`]; a node the kernel refuses is
    /// not an error (see [`NumaPlacement`]).
    pub fn new(len: usize, node: Option<u32>) -> Result<NumaBuffer, NumaError> {
        if len == 0 {
            return Err(NumaError::Empty);
        }
        if let Some(n) = node.filter(|&n| n >= MAX_NUMA_NODES) {
            return Err(NumaError::NodeOutOfRange { node: n });
        }
        let page = page_size();
        let mapped = len
            .checked_next_multiple_of(page)
            .ok_or(NumaError::TooLarge { len })?;
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(NumaError::Mmap {
                len: mapped,
                errno: errno(),
            });
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(NumaError::Mmap {
            len: mapped,
            errno: 0,
        })?;
        let bind_errno = node.and_then(|n| bind(ptr, mapped, n).err());
        // Fault every page in now, under the policy (registration pins them where they are).
        for off in (0..mapped).step_by(page) {
            // SAFETY: inside our fresh read/write mapping; it holds zeros, so writing a
            // zero changes nothing but allocates the page.
            unsafe { ptr.as_ptr().add(off).write_volatile(0) };
        }
        let first = node_of(ptr.as_ptr());
        // SAFETY: the last page of the mapping.
        let last = node_of(unsafe { ptr.as_ptr().add(mapped.saturating_sub(page)) });
        let actual = if first == last { first } else { None };
        Ok(NumaBuffer {
            ptr,
            len,
            meta: Meta {
                mapped,
                placement: NumaPlacement {
                    requested: node,
                    bind_errno,
                    actual,
                },
            },
        })
    }

    /// `len` bytes on the NUMA node of `nic` (its `Topology` entry); a NIC without a node
    /// gets memory without a policy.
    pub fn for_nic(nic: &NicTopology, len: usize) -> Result<NumaBuffer, NumaError> {
        NumaBuffer::new(len, nic.numa_node)
    }

    /// The node asked for, whether the kernel applied the policy, where the pages are.
    pub fn placement(&self) -> NumaPlacement {
        self.meta.placement
    }
    /// Length in bytes (as asked; the mapping is whole pages).
    pub fn len(&self) -> usize {
        self.len
    }
    /// Never true (empty buffers are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` initialised bytes of our mapping, borrowed with `self`.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, exclusively borrowed with `self`.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for NumaBuffer {
    fn drop(&mut self) {
        // SAFETY: our mapping, unmapped once; nothing borrows it any more.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.meta.mapped) };
    }
}

// SAFETY: `into_raw` hands out the whole owned mapping (valid for reads and writes of
// `len` bytes, used by nothing else until `from_raw`), with its metadata boxed in `extra`;
// `from_raw` rebuilds exactly that. A leaked registration leaks the mapping, which then
// stays mapped and unused forever: true.
unsafe impl RegionMemory for NumaBuffer {
    type Elem = u8;
    const STAYS_ALLOCATED_IF_LEAKED: bool = true;
    fn into_raw(self) -> RawRegion<u8> {
        let me = core::mem::ManuallyDrop::new(self);
        RawRegion {
            ptr: me.ptr,
            len: me.len,
            extra: Box::into_raw(Box::new(me.meta)) as usize,
        }
    }
    unsafe fn from_raw(raw: RawRegion<u8>) -> Self {
        // SAFETY: `extra` is the box `into_raw` leaked, taken back once (caller).
        let meta = *unsafe { Box::from_raw(raw.extra as *mut Meta) };
        NumaBuffer {
            ptr: raw.ptr,
            len: raw.len,
            meta,
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// `mbind(ptr, len, MPOL_BIND, {node})`; the errno when the kernel refuses.
fn bind(ptr: NonNull<u8>, len: usize, node: u32) -> Result<(), i32> {
    let mut mask = [0 as libc::c_ulong; MASK_WORDS];
    let (word, bit) = (node.checked_div(WORD_BITS), node.checked_rem(WORD_BITS));
    if let (Some(w), Some(b)) = (word.and_then(|w| mask.get_mut(w as usize)), bit) {
        *w |= (1 as libc::c_ulong).checked_shl(b).unwrap_or(0);
    }
    // SAFETY: `[ptr, ptr + len)` is our page-aligned mapping; the mask holds `maxnode - 1`
    // bits (the kernel reads one fewer than maxnode); flags 0 (no pages to move yet).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            ptr.as_ptr(),
            len,
            MPOL_BIND,
            mask.as_ptr(),
            MAXNODE,
            0 as libc::c_uint,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// The node holding the page at `addr` (`get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR)`).
fn node_of(addr: *mut u8) -> Option<u32> {
    let mut node: libc::c_int = -1;
    // SAFETY: valid out pointer for the mode; no node mask asked for; `addr` is a touched
    // page of our mapping.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut node as *mut libc::c_int,
            core::ptr::null_mut::<libc::c_ulong>(),
            0 as libc::c_ulong,
            addr,
            MPOL_F_NODE | MPOL_F_ADDR,
        )
    };
    (rc == 0 && node >= 0).then_some(node as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore)] // mmap and mbind are outside Miri
    fn node_zero_exists_everywhere_and_other_nodes_are_reported() {
        let mut b = NumaBuffer::new(3 * page_size() + 5, Some(0)).unwrap();
        assert_eq!(b.len(), 3 * page_size() + 5);
        assert_eq!(b.as_slice().as_ptr() as usize % page_size(), 0);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[7] = 9;
        let p = b.placement();
        assert_eq!(p.requested, Some(0));
        // Node 0 always exists; where mbind is allowed the pages are on it.
        if p.bind_errno.is_none() {
            assert!(p.honoured(), "{p:?}");
        }
        let raw = b.into_raw();
        // SAFETY: what into_raw returned, once.
        let b = unsafe { NumaBuffer::from_raw(raw) };
        assert_eq!((b.as_slice()[7], b.placement()), (9, p));

        assert_eq!(NumaBuffer::new(0, None).unwrap_err(), NumaError::Empty);
        assert_eq!(
            NumaBuffer::new(10, Some(MAX_NUMA_NODES)).unwrap_err(),
            NumaError::NodeOutOfRange {
                node: MAX_NUMA_NODES
            }
        );
        assert_eq!(
            NumaBuffer::new(usize::MAX, None).unwrap_err(),
            NumaError::TooLarge { len: usize::MAX }
        );
        let none = NumaBuffer::new(10, None).unwrap();
        assert_eq!(none.placement().requested, None);
        assert!(!none.placement().honoured());
    }
}
