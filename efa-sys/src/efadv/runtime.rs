//! Run-time resolution of libefa entry points newer than node `EFA_1.2`.
//!
//! rdma-core 44 (and every libefa before 50) exports only `EFA_1.0` .. `EFA_1.2`, so linking
//! the newer functions would make the program fail to load there. Each newer function is
//! looked up once in `libefa.so.1` (`dlopen(RTLD_NOLOAD)` first, since the program normally
//! has it loaded already, then a plain `dlopen`; then `dlvsym(name, node)`, falling back to
//! `dlsym(name)`). The outcome is cached in an atomic: after the first call a lookup is one
//! atomic load, with no lock and no allocation.
//!
//! A missing function is reported as [`NotProvided`], never as an errno, so "this libefa is
//! too old" cannot be mistaken for "the device said EOPNOTSUPP".
//!
//! Two ways to call a resolved function:
//! * the wrappers named like the C functions ([`efadv_query_mr`], ...) resolve and call;
//! * the statics ([`EFADV_QUERY_MR`], ...) give the typed function pointer
//!   ([`RuntimeSymbol::resolve`]) for callers that want to keep it.
//!
//! ```
//! use efa_sys::efadv::{efadv_mr_attr, runtime::EFADV_QUERY_MR, NotProvidedReason};
//!
//! match EFADV_QUERY_MR.resolve() {
//!     // `query_mr` is an `unsafe extern "C" fn(*mut ibv_mr, *mut efadv_mr_attr, u32) -> c_int`;
//!     // call it with a live MR and `size_of::<efadv_mr_attr>() as u32`.
//!     Ok(query_mr) => assert!(EFADV_QUERY_MR.is_provided()),
//!     // rdma-core < 50: the error names the function and its version node.
//!     Err(e) => {
//!         assert_eq!((e.function, e.version_node), ("efadv_query_mr", "EFA_1.3"));
//!         assert!(matches!(
//!             e.reason,
//!             NotProvidedReason::SymbolAbsent | NotProvidedReason::LibraryUnavailable
//!         ));
//!     }
//! }
//! // Or in one step (Ok holds the C return value):
//! // let rc = unsafe { efa_sys::efadv::efadv_query_mr(mr, &mut attr, inlen) }?;
//! ```

use super::{
    efadv_comp_cntr_init_attr, efadv_cq_attr, efadv_mr_attr, efadv_qp, efadv_rq_depth_attr,
    efadv_sq_depth_attr, efadv_wq_attr,
};
use crate::verbs_ext::{ibv_comp_cntr, ibv_comp_cntr_init_attr};
use core::ffi::{c_char, c_int, c_void};
use core::fmt;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicUsize, Ordering};
use rdma_sys::{ibv_context, ibv_cq, ibv_mr, ibv_qp, ibv_qp_ex};

/// Why a run-time resolved libefa function is unavailable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotProvidedReason {
    /// `libefa.so.1` could not be found or loaded.
    LibraryUnavailable,
    /// `libefa.so.1` is loaded but does not export the function (it predates the version node).
    SymbolAbsent,
}

/// A libefa entry point is not provided by the `libefa.so.1` this process uses.
///
/// This is not a device error: the library is older than the function's version node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NotProvided {
    /// C name of the function, e.g. `"efadv_query_mr"`.
    pub function: &'static str,
    /// libefa version node that introduced it, e.g. `"EFA_1.3"`.
    pub version_node: &'static str,
    /// Whether the library or just the symbol is missing.
    pub reason: NotProvidedReason,
}

impl fmt::Display for NotProvided {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason {
            NotProvidedReason::LibraryUnavailable => write!(
                f,
                "{}@{} is not provided: libefa.so.1 could not be loaded",
                self.function, self.version_node
            ),
            NotProvidedReason::SymbolAbsent => write!(
                f,
                "{}@{} is not provided by this libefa.so.1 (it predates {})",
                self.function, self.version_node, self.version_node
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for NotProvided {}

// Cache states; real function addresses are never this small.
const UNRESOLVED: usize = 0;
const LIBRARY_UNAVAILABLE: usize = 1;
const SYMBOL_ABSENT: usize = 2;

/// A libefa function looked up once at run time; `F` is its `unsafe extern "C" fn` type.
pub struct RuntimeSymbol<F> {
    /// NUL-terminated soname of the library that exports it.
    library: &'static str,
    /// NUL-terminated C name.
    name: &'static str,
    /// NUL-terminated version node.
    version_node: &'static str,
    cache: AtomicUsize,
    _fn: PhantomData<F>,
}

impl<F: Copy> RuntimeSymbol<F> {
    /// # Safety
    /// `F` must be the exact `unsafe extern "C" fn` type of the C function `name`.
    /// `library`, `name` and `version_node` must end with a NUL byte (checked at compile time
    /// for statics).
    pub(crate) const unsafe fn new(
        library: &'static str,
        name: &'static str,
        version_node: &'static str,
    ) -> Self {
        assert!(core::mem::size_of::<F>() == core::mem::size_of::<usize>());
        assert!(ends_with_nul(library) && ends_with_nul(name) && ends_with_nul(version_node));
        Self {
            library,
            name,
            version_node,
            cache: AtomicUsize::new(UNRESOLVED),
            _fn: PhantomData,
        }
    }

    /// C name of the function.
    pub fn name(&self) -> &'static str {
        &self.name[..self.name.len() - 1]
    }

    /// libefa version node that introduced the function.
    pub fn version_node(&self) -> &'static str {
        &self.version_node[..self.version_node.len() - 1]
    }

    /// The function pointer, or why this libefa does not provide it. The first call looks it
    /// up; later calls are one atomic load.
    #[inline]
    pub fn resolve(&self) -> Result<F, NotProvided> {
        let cached = self.cache.load(Ordering::Acquire);
        if cached > SYMBOL_ABSENT {
            // SAFETY: `cached` is a non-null address dlvsym/dlsym returned for `name`, and `new`'s
            // contract says `F` is that function's pointer type (pointer-sized, checked in `new`).
            return Ok(unsafe { core::mem::transmute_copy::<usize, F>(&cached) });
        }
        self.resolve_slow(cached)
    }

    /// Whether this libefa provides the function.
    pub fn is_provided(&self) -> bool {
        self.resolve().is_ok()
    }

    #[cold]
    fn resolve_slow(&self, cached: usize) -> Result<F, NotProvided> {
        let state = if cached == UNRESOLVED {
            self.look_up()
        } else {
            cached
        };
        // Racing threads compute the same value, so a plain store is enough.
        self.cache.store(state, Ordering::Release);
        match state {
            LIBRARY_UNAVAILABLE => Err(self.not_provided(NotProvidedReason::LibraryUnavailable)),
            SYMBOL_ABSENT => Err(self.not_provided(NotProvidedReason::SymbolAbsent)),
            // SAFETY: as in `resolve`.
            address => Ok(unsafe { core::mem::transmute_copy::<usize, F>(&address) }),
        }
    }

    fn look_up(&self) -> usize {
        let Some(handle) = open_library(self.library) else {
            return LIBRARY_UNAVAILABLE;
        };
        let name = self.name.as_ptr().cast::<c_char>();
        let node = self.version_node.as_ptr().cast::<c_char>();
        // SAFETY: `handle` came from dlopen and is never closed; both strings are NUL-terminated
        // (checked in `new`).
        let mut address = unsafe { libc::dlvsym(handle, name, node) };
        if address.is_null() {
            // A library built without version nodes (or a stand-in) still counts.
            // SAFETY: as above.
            address = unsafe { libc::dlsym(handle, name) };
        }
        match address as usize {
            a if a > SYMBOL_ABSENT => a,
            _ => SYMBOL_ABSENT,
        }
    }

    fn not_provided(&self, reason: NotProvidedReason) -> NotProvided {
        NotProvided {
            function: self.name(),
            version_node: self.version_node(),
            reason,
        }
    }
}

impl<F> fmt::Debug for RuntimeSymbol<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeSymbol")
            .field("name", &self.name.trim_end_matches('\0'))
            .field("version_node", &self.version_node.trim_end_matches('\0'))
            .finish_non_exhaustive()
    }
}

const fn ends_with_nul(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty() && b[b.len() - 1] == 0
}

/// Handle of `soname` (NUL-terminated), never closed. Called once per symbol, on its first
/// resolution only.
fn open_library(soname: &'static str) -> Option<*mut c_void> {
    let soname = soname.as_ptr().cast::<c_char>();
    // SAFETY: `soname` is NUL-terminated; RTLD_NOLOAD only returns an already loaded library.
    let mut handle = unsafe { libc::dlopen(soname, libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        // SAFETY: as above; loading the library runs only its own initialisers.
        handle = unsafe { libc::dlopen(soname, libc::RTLD_NOW | libc::RTLD_LOCAL) };
    }
    (!handle.is_null()).then_some(handle)
}

/// Soname of libefa, NUL-terminated.
const LIBEFA: &str = "libefa.so.1\0";

/// Type of `efadv_query_mr` (node `EFA_1.3`).
pub type efadv_query_mr_fn =
    unsafe extern "C" fn(ibvmr: *mut ibv_mr, attr: *mut efadv_mr_attr, inlen: u32) -> c_int;
/// Type of `efadv_query_qp_wqs` (node `EFA_1.4`).
pub type efadv_query_qp_wqs_fn = unsafe extern "C" fn(
    ibvqp: *mut ibv_qp,
    sq_attr: *mut efadv_wq_attr,
    rq_attr: *mut efadv_wq_attr,
    inlen: u32,
) -> c_int;
/// Type of `efadv_query_cq` (node `EFA_1.4`).
pub type efadv_query_cq_fn =
    unsafe extern "C" fn(ibvcq: *mut ibv_cq, attr: *mut efadv_cq_attr, inlen: u32) -> c_int;
/// Type of `efadv_get_max_sq_depth` (node `EFA_1.5`).
pub type efadv_get_max_sq_depth_fn = unsafe extern "C" fn(
    ibvctx: *mut ibv_context,
    attr: *mut efadv_sq_depth_attr,
    inlen: u32,
) -> c_int;
/// Type of `efadv_get_max_rq_depth` (node `EFA_1.5`).
pub type efadv_get_max_rq_depth_fn = unsafe extern "C" fn(
    ibvctx: *mut ibv_context,
    attr: *mut efadv_rq_depth_attr,
    inlen: u32,
) -> c_int;
/// Type of `efadv_qp_from_ibv_qp_ex` (node `EFA_1.6`).
pub type efadv_qp_from_ibv_qp_ex_fn = unsafe extern "C" fn(ibvqpx: *mut ibv_qp_ex) -> *mut efadv_qp;
/// Type of `efadv_create_comp_cntr` (node `EFA_1.7`).
pub type efadv_create_comp_cntr_fn = unsafe extern "C" fn(
    ibvctx: *mut ibv_context,
    attr: *mut ibv_comp_cntr_init_attr,
    efa_attr: *mut efadv_comp_cntr_init_attr,
    inlen: u32,
) -> *mut ibv_comp_cntr;

macro_rules! runtime_symbols {
    ($($(#[$doc:meta])* $stat:ident: $fn_ty:ident = $name:literal @ $node:literal;)*) => {$(
        $(#[$doc])*
        pub static $stat: RuntimeSymbol<$fn_ty> =
            // SAFETY: `$fn_ty` is the C prototype of `$name` from efadv.h (rdma-core 65).
            unsafe { RuntimeSymbol::new(LIBEFA, concat!($name, "\0"), concat!($node, "\0")) };
    )*};
}

runtime_symbols! {
    /// `efadv_query_mr`, node `EFA_1.3` (rdma-core 50).
    EFADV_QUERY_MR: efadv_query_mr_fn = "efadv_query_mr" @ "EFA_1.3";
    /// `efadv_query_qp_wqs`, node `EFA_1.4` (rdma-core 59).
    EFADV_QUERY_QP_WQS: efadv_query_qp_wqs_fn = "efadv_query_qp_wqs" @ "EFA_1.4";
    /// `efadv_query_cq`, node `EFA_1.4` (rdma-core 59).
    EFADV_QUERY_CQ: efadv_query_cq_fn = "efadv_query_cq" @ "EFA_1.4";
    /// `efadv_get_max_sq_depth`, node `EFA_1.5` (rdma-core 63).
    EFADV_GET_MAX_SQ_DEPTH: efadv_get_max_sq_depth_fn = "efadv_get_max_sq_depth" @ "EFA_1.5";
    /// `efadv_get_max_rq_depth`, node `EFA_1.5` (rdma-core 63).
    EFADV_GET_MAX_RQ_DEPTH: efadv_get_max_rq_depth_fn = "efadv_get_max_rq_depth" @ "EFA_1.5";
    /// `efadv_qp_from_ibv_qp_ex`, node `EFA_1.6` (rdma-core 64).
    EFADV_QP_FROM_IBV_QP_EX: efadv_qp_from_ibv_qp_ex_fn = "efadv_qp_from_ibv_qp_ex" @ "EFA_1.6";
    /// `efadv_create_comp_cntr`, node `EFA_1.7` (rdma-core 65).
    EFADV_CREATE_COMP_CNTR: efadv_create_comp_cntr_fn = "efadv_create_comp_cntr" @ "EFA_1.7";
}

/// Reads the interconnect ids of an MR. `Ok` holds the C result: 0 or a positive errno.
///
/// # Safety
/// `ibvmr` must be a live MR of an EFA context; `attr` must be valid for `inlen` bytes of writes.
#[inline]
pub unsafe fn efadv_query_mr(
    ibvmr: *mut ibv_mr,
    attr: *mut efadv_mr_attr,
    inlen: u32,
) -> Result<c_int, NotProvided> {
    let f = EFADV_QUERY_MR.resolve()?;
    // SAFETY: `f` is libefa's efadv_query_mr; arguments as promised by the caller.
    Ok(unsafe { f(ibvmr, attr, inlen) })
}

/// Reads the raw send/receive ring descriptions of a QP. `Ok` holds 0 or a positive errno.
///
/// # Safety
/// `ibvqp` must be a live EFA QP; `sq_attr` and `rq_attr` must each be valid for `inlen` bytes
/// of writes.
#[inline]
pub unsafe fn efadv_query_qp_wqs(
    ibvqp: *mut ibv_qp,
    sq_attr: *mut efadv_wq_attr,
    rq_attr: *mut efadv_wq_attr,
    inlen: u32,
) -> Result<c_int, NotProvided> {
    let f = EFADV_QUERY_QP_WQS.resolve()?;
    // SAFETY: `f` is libefa's efadv_query_qp_wqs; arguments as promised by the caller.
    Ok(unsafe { f(ibvqp, sq_attr, rq_attr, inlen) })
}

/// Reads the raw completion-ring description of a CQ. `Ok` holds 0 or a positive errno.
///
/// # Safety
/// `ibvcq` must be a live EFA CQ; `attr` must be valid for `inlen` bytes of writes.
#[inline]
pub unsafe fn efadv_query_cq(
    ibvcq: *mut ibv_cq,
    attr: *mut efadv_cq_attr,
    inlen: u32,
) -> Result<c_int, NotProvided> {
    let f = EFADV_QUERY_CQ.resolve()?;
    // SAFETY: `f` is libefa's efadv_query_cq; arguments as promised by the caller.
    Ok(unsafe { f(ibvcq, attr, inlen) })
}

/// Largest send-queue depth for the given SGE/inline needs. `Ok` holds the depth, or a
/// **negative** errno.
///
/// # Safety
/// `ibvctx` must be a live EFA context; `attr` must be valid for `inlen` bytes of reads.
#[inline]
pub unsafe fn efadv_get_max_sq_depth(
    ibvctx: *mut ibv_context,
    attr: *mut efadv_sq_depth_attr,
    inlen: u32,
) -> Result<c_int, NotProvided> {
    let f = EFADV_GET_MAX_SQ_DEPTH.resolve()?;
    // SAFETY: `f` is libefa's efadv_get_max_sq_depth; arguments as promised by the caller.
    Ok(unsafe { f(ibvctx, attr, inlen) })
}

/// Largest receive-queue depth for the given SGE count. `Ok` holds the depth, or a
/// **negative** errno.
///
/// # Safety
/// `ibvctx` must be a live EFA context; `attr` must be valid for `inlen` bytes of reads.
#[inline]
pub unsafe fn efadv_get_max_rq_depth(
    ibvctx: *mut ibv_context,
    attr: *mut efadv_rq_depth_attr,
    inlen: u32,
) -> Result<c_int, NotProvided> {
    let f = EFADV_GET_MAX_RQ_DEPTH.resolve()?;
    // SAFETY: `f` is libefa's efadv_get_max_rq_depth; arguments as promised by the caller.
    Ok(unsafe { f(ibvctx, attr, inlen) })
}

/// The `efadv_qp` embedded in an EFA extended QP (libefa does no checks).
///
/// # Safety
/// `ibvqpx` must be a live `ibv_qp_ex` of an EFA QP.
#[inline]
pub unsafe fn efadv_qp_from_ibv_qp_ex(
    ibvqpx: *mut ibv_qp_ex,
) -> Result<*mut efadv_qp, NotProvided> {
    let f = EFADV_QP_FROM_IBV_QP_EX.resolve()?;
    // SAFETY: `f` is libefa's efadv_qp_from_ibv_qp_ex; argument as promised by the caller.
    Ok(unsafe { f(ibvqpx) })
}

/// Creates a completion counter with EFA options. `Ok` holds the counter, or NULL with
/// `errno` set.
///
/// # Safety
/// `ibvctx` must be a live EFA context; `attr` must point to a valid `ibv_comp_cntr_init_attr`
/// and `efa_attr` must be valid for `inlen` bytes of reads.
#[inline]
pub unsafe fn efadv_create_comp_cntr(
    ibvctx: *mut ibv_context,
    attr: *mut ibv_comp_cntr_init_attr,
    efa_attr: *mut efadv_comp_cntr_init_attr,
    inlen: u32,
) -> Result<*mut ibv_comp_cntr, NotProvided> {
    let f = EFADV_CREATE_COMP_CNTR.resolve()?;
    // SAFETY: `f` is libefa's efadv_create_comp_cntr; arguments as promised by the caller.
    Ok(unsafe { f(ibvctx, attr, efa_attr, inlen) })
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    #[test]
    fn linked_function_resolves_to_the_linked_address() {
        type QueryDevice = unsafe extern "C" fn(
            *mut ibv_context,
            *mut super::super::efadv_device_attr,
            u32,
        ) -> c_int;
        // SAFETY: QueryDevice is efadv_query_device's prototype; names are NUL-terminated.
        let sym: RuntimeSymbol<QueryDevice> =
            unsafe { RuntimeSymbol::new(LIBEFA, "efadv_query_device\0", "EFA_1.1\0") };
        let resolved = sym.resolve().expect("the system libefa exports EFA_1.1");
        let linked: QueryDevice = super::super::efadv_query_device;
        assert_eq!(resolved as usize, linked as usize);
        // Second call takes the cached path and returns the same pointer.
        assert_eq!(sym.resolve().unwrap() as usize, linked as usize);
        assert!(sym.is_provided());
    }

    #[test]
    fn wrong_version_node_falls_back_to_unversioned_lookup() {
        type CqFromEx = unsafe extern "C" fn(*mut ibv_qp_ex) -> *mut c_void;
        // SAFETY: only the address is compared, never called.
        let sym: RuntimeSymbol<CqFromEx> =
            unsafe { RuntimeSymbol::new(LIBEFA, "efadv_cq_from_ibv_cq_ex\0", "EFA_9.9\0") };
        assert!(sym.resolve().is_ok());
    }

    #[test]
    fn missing_symbol_is_reported_as_not_provided() {
        type Nothing = unsafe extern "C" fn();
        // SAFETY: the symbol does not exist, so nothing is ever called.
        let sym: RuntimeSymbol<Nothing> =
            unsafe { RuntimeSymbol::new(LIBEFA, "efadv_no_such_function\0", "EFA_1.99\0") };
        let err = sym.resolve().unwrap_err();
        assert_eq!(
            err,
            NotProvided {
                function: "efadv_no_such_function",
                version_node: "EFA_1.99",
                reason: NotProvidedReason::SymbolAbsent,
            }
        );
        // Cached failure gives the same answer.
        assert_eq!(sym.resolve().unwrap_err(), err);
        assert_eq!(
            err.to_string(),
            "efadv_no_such_function@EFA_1.99 is not provided by this libefa.so.1 (it predates EFA_1.99)"
        );
    }

    #[test]
    fn missing_library_is_reported_as_library_unavailable() {
        type Nothing = unsafe extern "C" fn();
        // SAFETY: the library does not exist, so nothing is ever called.
        let sym: RuntimeSymbol<Nothing> = unsafe {
            RuntimeSymbol::new(
                "libefa-sys-no-such-library.so.9\0",
                "efadv_query_mr\0",
                "EFA_1.3\0",
            )
        };
        let err = sym.resolve().unwrap_err();
        assert_eq!(err.reason, NotProvidedReason::LibraryUnavailable);
        assert_eq!(
            (err.function, err.version_node),
            ("efadv_query_mr", "EFA_1.3")
        );
        assert_eq!(sym.resolve().unwrap_err(), err);
        assert_eq!(
            err.to_string(),
            "efadv_query_mr@EFA_1.3 is not provided: libefa.so.1 could not be loaded"
        );
    }

    #[test]
    fn statics_carry_their_names_and_nodes() {
        assert_eq!(EFADV_QUERY_MR.name(), "efadv_query_mr");
        assert_eq!(EFADV_QUERY_MR.version_node(), "EFA_1.3");
        assert_eq!(EFADV_CREATE_COMP_CNTR.name(), "efadv_create_comp_cntr");
        assert_eq!(EFADV_CREATE_COMP_CNTR.version_node(), "EFA_1.7");
        assert_eq!(EFADV_QP_FROM_IBV_QP_EX.version_node(), "EFA_1.6");
    }
}
