//! What host memory can back a registration: borrowed slices, owned `Vec`s and boxed
//! slices of any plain-data element type, and raw memory.

use core::marker::PhantomData;
use core::ptr::NonNull;

use zerocopy::{FromBytes, Immutable, IntoBytes};

/// Plain data: any bit pattern is a valid value (the device may write any bytes) and
/// every byte of a value is initialised (the device may read and send them). This is
/// zerocopy's `FromBytes + IntoBytes + Immutable` (no padding, no interior mutability):
/// `u8`, `u16` (e.g. f16 bits), `u32`, `u64`, `f32`, `f64`, arrays of them, and
/// `#[repr(C)]` records that derive those traits.
pub trait Plain: FromBytes + IntoBytes + Immutable {}
impl<T: FromBytes + IntoBytes + Immutable> Plain for T {}

/// Registered memory taken apart into its start and length (in elements) while an
/// [`Mr`](crate::Mr) holds it, and put back together when it is released.
pub struct RawRegion<T> {
    /// First element.
    pub ptr: NonNull<T>,
    /// Number of elements.
    pub len: usize,
    /// Whatever else the owner needs to rebuild itself (a `Vec`'s capacity).
    pub extra: usize,
}

/// Memory that can back a registration. The memory is taken apart with
/// [`into_raw`](Self::into_raw) for as long as it is registered, so no reference to it
/// exists that the registration could invalidate, and rebuilt with
/// [`from_raw`](Self::from_raw) once the device can no longer reach it.
///
/// # Safety
/// * `into_raw` must return memory valid for reads and writes of `len` elements of
///   `Elem`, which nothing but the returned region accesses until `from_raw` is called
///   with it (the registration owns or exclusively borrows it for its whole life).
/// * `from_raw` must accept exactly what `into_raw` returned.
/// * [`STAYS_ALLOCATED_IF_LEAKED`](Self::STAYS_ALLOCATED_IF_LEAKED) may be true only if
///   the memory stays allocated, and is used by nothing else, forever when the holder is
///   leaked (`mem::forget` of the `Mr`): owned heap memory qualifies, a borrow does not
///   (forgetting the `Mr` ends the borrow and the memory can be reused while still
///   registered). Remote access and leases require it.
pub unsafe trait RegionMemory: Sized {
    /// The element type (bytes for [`RawMemory`]).
    type Elem: Plain;
    /// See the trait's safety section.
    const STAYS_ALLOCATED_IF_LEAKED: bool;
    /// Takes the memory apart.
    fn into_raw(self) -> RawRegion<Self::Elem>;
    /// Puts the memory back together.
    ///
    /// # Safety
    /// `raw` must be what `into_raw` returned for a value of this type, used once.
    unsafe fn from_raw(raw: RawRegion<Self::Elem>) -> Self;
}

// SAFETY: the slice is exclusively borrowed for the whole life of the value, and
// rebuilt with the same pointer and length. A forgotten Mr ends the borrow: false.
unsafe impl<T: Plain> RegionMemory for &mut [T] {
    type Elem = T;
    const STAYS_ALLOCATED_IF_LEAKED: bool = false;
    fn into_raw(self) -> RawRegion<T> {
        let len = self.len();
        RawRegion {
            ptr: NonNull::from(self).cast(),
            len,
            extra: 0,
        }
    }
    unsafe fn from_raw(raw: RawRegion<T>) -> Self {
        // SAFETY: the pointer and length of the original `&'a mut [T]`, unused meanwhile
        // except through the registration, which is gone.
        unsafe { core::slice::from_raw_parts_mut(raw.ptr.as_ptr(), raw.len) }
    }
}

#[cfg(feature = "std")]
// SAFETY: the boxed slice is turned into its raw allocation and back; the heap block
// never moves and is freed only by `from_raw`'s box. A leaked Mr leaks the allocation.
unsafe impl<T: Plain> RegionMemory for std::boxed::Box<[T]> {
    type Elem = T;
    const STAYS_ALLOCATED_IF_LEAKED: bool = true;
    fn into_raw(self) -> RawRegion<T> {
        let len = self.len();
        let ptr = std::boxed::Box::into_raw(self);
        RawRegion {
            // SAFETY: Box::into_raw never returns null.
            ptr: unsafe { NonNull::new_unchecked(ptr.cast::<T>()) },
            len,
            extra: 0,
        }
    }
    unsafe fn from_raw(raw: RawRegion<T>) -> Self {
        let slice = core::ptr::slice_from_raw_parts_mut(raw.ptr.as_ptr(), raw.len);
        // SAFETY: exactly the pointer Box::into_raw returned, with its length.
        unsafe { std::boxed::Box::from_raw(slice) }
    }
}

#[cfg(feature = "std")]
// SAFETY: the Vec is taken apart (pointer, length, capacity) and rebuilt with the same
// parts; the registration never grows it, so its buffer never moves.
unsafe impl<T: Plain> RegionMemory for std::vec::Vec<T> {
    type Elem = T;
    const STAYS_ALLOCATED_IF_LEAKED: bool = true;
    fn into_raw(self) -> RawRegion<T> {
        let mut v = core::mem::ManuallyDrop::new(self);
        RawRegion {
            // SAFETY: a Vec's pointer is never null (dangling but non-null when empty).
            ptr: unsafe { NonNull::new_unchecked(v.as_mut_ptr()) },
            len: v.len(),
            extra: v.capacity(),
        }
    }
    unsafe fn from_raw(raw: RawRegion<T>) -> Self {
        // SAFETY: the parts of a Vec taken apart by `into_raw`, unchanged.
        unsafe { std::vec::Vec::from_raw_parts(raw.ptr.as_ptr(), raw.len, raw.extra) }
    }
}

/// Memory given as a raw pointer and length (see
/// [`Pd::register_raw`](crate::Pd::register_raw)).
#[derive(Debug)]
pub struct RawMemory {
    ptr: *mut u8,
    len: usize,
    _not_send: PhantomData<*mut u8>,
}

impl RawMemory {
    pub(crate) fn new(ptr: *mut u8, len: usize) -> RawMemory {
        RawMemory {
            ptr,
            len,
            _not_send: PhantomData,
        }
    }
    /// Start of the memory.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True if zero bytes long.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

// SAFETY: `Pd::register_raw`'s contract makes the caller guarantee validity and
// exclusivity for as long as the registration lives, and forever if it is leaked.
unsafe impl RegionMemory for RawMemory {
    type Elem = u8;
    const STAYS_ALLOCATED_IF_LEAKED: bool = true;
    fn into_raw(self) -> RawRegion<u8> {
        RawRegion {
            ptr: NonNull::new(self.ptr).unwrap_or(NonNull::dangling()),
            len: self.len,
            extra: 0,
        }
    }
    unsafe fn from_raw(raw: RawRegion<u8>) -> Self {
        RawMemory::new(raw.ptr.as_ptr(), raw.len)
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;

    fn round_trip<M: RegionMemory>(mem: M, write: M::Elem) -> M {
        let raw = mem.into_raw();
        if raw.len > 0 {
            // SAFETY: `into_raw` hands out `len` valid, exclusive elements.
            unsafe { raw.ptr.as_ptr().write(write) };
        }
        // SAFETY: exactly what `into_raw` returned, used once.
        unsafe { M::from_raw(raw) }
    }

    #[test]
    fn memory_is_taken_apart_and_rebuilt_intact() {
        let mut v = std::vec::Vec::with_capacity(10);
        v.extend_from_slice(&[1u32, 2, 3]);
        let v = round_trip(v, 9);
        assert_eq!((v.as_slice(), v.capacity()), (&[9, 2, 3][..], 10));
        let b: std::boxed::Box<[u64]> = std::vec![5u64; 4].into_boxed_slice();
        assert_eq!(&*round_trip(b, 6), &[6, 5, 5, 5]);
        let mut arr = [7u8; 3];
        assert_eq!(round_trip(&mut arr[..], 8), &[8, 7, 7]);
        assert_eq!(arr, [8, 7, 7]);
        let empty: std::vec::Vec<u16> = round_trip(std::vec::Vec::new(), 0);
        assert!(empty.is_empty());
        const { assert!(<std::vec::Vec<u8> as RegionMemory>::STAYS_ALLOCATED_IF_LEAKED) };
        const { assert!(!<&mut [u8] as RegionMemory>::STAYS_ALLOCATED_IF_LEAKED) };
    }
}
