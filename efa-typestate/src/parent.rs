//! How a handle holds its parent, and with it everything else it needs alive.
//!
//! Every handle of this crate is generic over one type parameter that holds its parent
//! (a [`Pd`](crate::Pd) its [`Context`](crate::Context), an [`Mr`](crate::Mr) or a
//! [`Qp`](crate::Qp) its `Pd`, ...). There are two forms, from one implementation:
//!
//! * **borrowed**, `&'a T`: zero cost; the borrow checker keeps the parent alive, so the
//!   child's type carries the lifetime (`Pd<&'a Context>`, `Qp<&'a Pd<&'a Context>, Rts>`);
//! * **shared**, `Arc<T>` (feature `std`): the child holds a reference count, touched
//!   when the child is made and when it is dropped, never on the post/poll path. Such
//!   handles have no lifetime: an engine can own its context, PD, CQs, QPs and MRs in one
//!   struct and move it to another thread (see the crate docs).
//!
//! A child that needs more than its parent alive (a QP its CQs, a CQ its completion
//! channel) takes those as [`Sibling`]s held the same way: borrows of the same lifetime
//! beside a borrowed parent, `Arc`s beside a shared one.
//!
//! Both traits are sealed: only `&T` and `Arc<T>` hold parents, so a parent cannot be
//! released early by an exotic pointer type.

use core::ops::Deref;

mod sealed {
    pub trait Sealed {}
    impl<T: ?Sized> Sealed for &T {}
    #[cfg(feature = "std")]
    impl<T: ?Sized> Sealed for std::sync::Arc<T> {}
}

/// A pointer that keeps a parent object alive: `&'a T` or `Arc<T>`. Sealed.
pub trait Parent: Deref + sealed::Sealed {}

impl<T: ?Sized> Parent for &T {}

#[cfg(feature = "std")]
impl<T: ?Sized> Parent for std::sync::Arc<T> {}

/// What a child stores for each [`Sibling`] it keeps alive: nothing for borrows (the
/// borrow's lifetime is part of the child's type), a reference count for `Arc`. Stored
/// as a plain value (not an associated type), so every handle stays covariant in its
/// holder: a `Qp<&'long Pd<_>, _>` can be used where a `Qp<&'short Pd<_>, _>` is wanted.
#[doc(hidden)]
pub struct Keep {
    #[cfg(feature = "std")]
    _arc: Option<std::sync::Arc<dyn Send + Sync>>,
}

impl Keep {
    /// Keeps nothing alive (a borrow does it).
    pub(crate) const NOTHING: Keep = Keep {
        #[cfg(feature = "std")]
        _arc: None,
    };
}

/// An object a child keeps alive beside its parent `P`, held the same way: `&'a X`
/// beside `&'a T`, `Arc<X>` beside `Arc<T>`. Sealed.
pub trait Sibling<P: Parent>: Deref + sealed::Sealed {
    /// Converts into what the child stores.
    #[doc(hidden)]
    fn into_keep(self) -> Keep;
}

impl<'a, T: ?Sized, X: ?Sized> Sibling<&'a T> for &'a X {
    fn into_keep(self) -> Keep {
        Keep::NOTHING
    }
}

#[cfg(feature = "std")]
impl<T: ?Sized, X: Send + Sync + 'static> Sibling<std::sync::Arc<T>> for std::sync::Arc<X> {
    fn into_keep(self) -> Keep {
        Keep { _arc: Some(self) }
    }
}
