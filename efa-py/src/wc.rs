//! Work completions (`WC`) and the pool `CQ.poll` takes them from.
//!
//! A `WC` is immutable to Python (no setters), but its fields are atomics: a CQ keeps
//! the `WC`s its polls handed out ([`WcPool`]) and rewrites one in place, instead of
//! allocating a new object, once nothing but the pool refers to it (its reference count
//! is 1, read with the GIL held). A `WC` the program still holds is never touched again.
//! Creating and freeing a PyO3 object costs several hundred instructions (the type
//! object's lookup, the allocation, the deallocation), more than the rest of a poll per
//! completion; with the pool, a loop that drops its completions before the next poll
//! allocates none.

use std::cell::{RefCell, RefMut};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};

use pyo3::sync::GILProtected;

use efa_typestate::{Completion, CompletionFlags, WorkCompletion};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

/// Most `WC`s one CQ keeps for reuse.
const POOL_MAX: usize = 256;

/// `WC` objects made so far (the pool's tests read it: `efa._efa._wc_created()`).
static CREATED: AtomicU64 = AtomicU64::new(0);

/// How many `WC` objects this process has made (for tests of the pool).
#[pyfunction]
pub fn _wc_created() -> u64 {
    CREATED.load(Relaxed)
}

/// A work completion.
#[pyclass(module = "efa._efa", frozen)]
pub struct WC {
    wr_id: AtomicU64,
    status: AtomicU32,
    opcode: AtomicU32,
    vendor_err: AtomicU32,
    byte_len: AtomicU32,
    imm_data: AtomicU32,
    qp_num: AtomicU32,
    src_qp: AtomicU32,
    wc_flags: AtomicU32,
    slid: AtomicU32,
    /// The sender GID's bytes, meaningful when `has_sgid`.
    sgid: [AtomicU64; 2],
    has_sgid: AtomicBool,
    unsolicited: AtomicBool,
}

impl WC {
    /// The error completion the device gives a SEND longer than the port's
    /// `max_msg_sz` or an RDMA longer than `max_rdma_size` (`IBV_WC_LOC_LEN_ERR`, EFA
    /// status `LOCAL_ERROR_BAD_LENGTH`), for a request the Rust core refuses to post
    /// (`crate::credits::Refused`).
    pub fn too_long(r: crate::credits::Refused) -> WC {
        use efa_typestate::sys::verbs::ibv_wc_status;
        CREATED.fetch_add(1, Relaxed);
        let wc = WC::zeroed();
        wc.wr_id.store(r.wr_id, Relaxed);
        wc.status.store(ibv_wc_status::IBV_WC_LOC_LEN_ERR, Relaxed);
        wc.opcode.store(r.opcode, Relaxed);
        wc.vendor_err
            .store(efa_typestate::EfaStatus::LOCAL_BAD_LENGTH.0, Relaxed);
        wc.qp_num.store(r.qp_num, Relaxed);
        wc
    }

    fn zeroed() -> WC {
        WC {
            wr_id: AtomicU64::new(0),
            status: AtomicU32::new(0),
            opcode: AtomicU32::new(0),
            vendor_err: AtomicU32::new(0),
            byte_len: AtomicU32::new(0),
            imm_data: AtomicU32::new(0),
            qp_num: AtomicU32::new(0),
            src_qp: AtomicU32::new(0),
            wc_flags: AtomicU32::new(0),
            slid: AtomicU32::new(0),
            sgid: [AtomicU64::new(0), AtomicU64::new(0)],
            has_sgid: AtomicBool::new(false),
            unsolicited: AtomicBool::new(false),
        }
    }

    /// Every field from `c`, an entry of a classic CQ as the provider wrote it (the
    /// same values as [`set`](Self::set) of its `Completion`; going through
    /// `WorkCompletion::completion` costs 25 instructions more per completion).
    #[inline(always)]
    fn set_wc(&self, c: &WorkCompletion) {
        self.wr_id.store(c.wr_id(), Relaxed);
        self.status.store(c.status().0, Relaxed);
        self.opcode.store(c.opcode().0, Relaxed);
        self.vendor_err.store(c.efa_status().0, Relaxed);
        self.byte_len.store(c.byte_len(), Relaxed);
        self.imm_data.store(c.imm().unwrap_or(0), Relaxed);
        self.qp_num.store(c.qp_num(), Relaxed);
        self.src_qp.store(c.src_qp(), Relaxed);
        self.wc_flags.store(c.flags().bits() & 0xffff, Relaxed);
        self.slid.store(u32::from(c.slid()), Relaxed);
        self.has_sgid.store(false, Relaxed);
        self.unsolicited.store(false, Relaxed);
    }

    /// Every field from `c` (the sender GID only if the CQ reports them: `sgid`).
    #[inline(always)]
    fn set(&self, c: &Completion, sgid: bool) {
        let flags = c.flags();
        self.wr_id.store(c.wr_id(), Relaxed);
        self.status.store(c.status().0, Relaxed);
        self.opcode.store(c.opcode().0, Relaxed);
        self.vendor_err.store(c.efa_status().0, Relaxed);
        self.byte_len.store(c.byte_len(), Relaxed);
        self.imm_data.store(c.imm().unwrap_or(0), Relaxed);
        self.qp_num.store(c.qp_num(), Relaxed);
        self.src_qp.store(c.src_qp(), Relaxed);
        self.wc_flags.store(flags.bits() & 0xffff, Relaxed);
        self.slid.store(u32::from(c.slid()), Relaxed);
        let gid = if sgid { c.sender_gid() } else { None };
        if let Some(g) = gid {
            let (mut lo, mut hi) = ([0u8; 8], [0u8; 8]);
            lo.copy_from_slice(&g.as_bytes()[..8]);
            hi.copy_from_slice(&g.as_bytes()[8..]);
            self.sgid[0].store(u64::from_ne_bytes(lo), Relaxed);
            self.sgid[1].store(u64::from_ne_bytes(hi), Relaxed);
        }
        self.has_sgid.store(gid.is_some(), Relaxed);
        self.unsolicited
            .store(flags.contains(CompletionFlags::UNSOLICITED), Relaxed);
    }
}

#[pymethods]
impl WC {
    /// The sender's GID (16 bytes, as the package gives it), when the CQ reports sender
    /// GIDs and the device gave one; else None.
    #[getter]
    fn sgid<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        if !self.has_sgid.load(Relaxed) {
            return None;
        }
        let mut g = [0u8; 16];
        g[..8].copy_from_slice(&self.sgid[0].load(Relaxed).to_ne_bytes());
        g[8..].copy_from_slice(&self.sgid[1].load(Relaxed).to_ne_bytes());
        Some(PyBytes::new(py, &g))
    }
    /// True if the work request completed successfully.
    #[getter]
    fn is_success(&self) -> bool {
        self.status.load(Relaxed) == 0
    }
    /// The status in words, as libibverbs' `ibv_wc_status_str` gives them.
    #[getter]
    fn status_str(&self) -> &'static str {
        efa_typestate::WcStatus(self.status.load(Relaxed)).description()
    }
    /// Raises `CompletionError` (an `EfaError`) if this completion failed.
    fn raise_for_status(slf: &Bound<'_, Self>) -> PyResult<()> {
        let me = slf.get();
        let status = me.status.load(Relaxed);
        if status == 0 {
            return Ok(());
        }
        let rust = efa_typestate::Error::Completion {
            status: efa_typestate::WcStatus(status),
            efa: efa_typestate::EfaStatus(me.vendor_err.load(Relaxed)),
        };
        // The package's words, then the Rust core's (which name the EFA status).
        let msg = format!(
            "work completion failed: {} (status={status}, vendor_err=0x{:x}); work request {}: {rust}",
            me.status_str(),
            me.vendor_err.load(Relaxed),
            me.wr_id.load(Relaxed)
        );
        let py = slf.py();
        let completion_error = &crate::errors::classes(py)?.1;
        let err = PyErr::from_type(
            completion_error.bind(py).clone(),
            (slf.clone().unbind(), msg),
        );
        Err(err)
    }
    fn __repr__(&self) -> String {
        format!(
            "WC(wr_id={}, status={} ({}), opcode={}, byte_len={}, qp_num={})",
            self.wr_id.load(Relaxed),
            self.status.load(Relaxed),
            self.status_str(),
            self.opcode.load(Relaxed),
            self.byte_len.load(Relaxed),
            self.qp_num.load(Relaxed)
        )
    }
}

/// Gives `WC` its plain fields as struct members (`PyMemberDef`, read-only): CPython
/// reads such a field itself, as it reads the package's Cython `cdef readonly` fields,
/// where a PyO3 getter costs a call through its trampoline and a lookup of the type
/// object (about 120 instructions of every `wc.status`). Runs once, at import.
pub fn install_members(py: Python<'_>) -> PyResult<()> {
    use pyo3::ffi;
    // The offsets of the fields in a `WC` object, read off one.
    let probe = Py::new(py, WC::zeroed())?;
    let base = probe.as_ptr() as usize;
    let w = probe.get();
    let at = |field: *const u8| (field as usize - base) as ffi::Py_ssize_t;
    let u32_at = |f: &AtomicU32| (ffi::Py_T_UINT, at(f.as_ptr().cast()));
    let members = [
        (
            c"wr_id",
            (ffi::Py_T_ULONGLONG, at(w.wr_id.as_ptr().cast())),
            c"The work request's id (0 for an unsolicited write).",
        ),
        (
            c"status",
            u32_at(&w.status),
            c"The completion status (WCStatus).",
        ),
        (
            c"opcode",
            u32_at(&w.opcode),
            c"The completion opcode (WCOpcode).",
        ),
        (
            c"vendor_err",
            u32_at(&w.vendor_err),
            c"The EFA status of a failed completion.",
        ),
        (c"byte_len", u32_at(&w.byte_len), c"Bytes received."),
        (
            c"imm_data",
            u32_at(&w.imm_data),
            c"The immediate, host order (with WCFlags.WITH_IMM).",
        ),
        (c"qp_num", u32_at(&w.qp_num), c"The local QP's number."),
        (
            c"src_qp",
            u32_at(&w.src_qp),
            c"The sender's QP number (receives).",
        ),
        (c"wc_flags", u32_at(&w.wc_flags), c"WCFlags."),
        (
            c"slid",
            u32_at(&w.slid),
            c"The sender's address handle number, as libefa reports it.",
        ),
        (
            c"unsolicited",
            (ffi::Py_T_BOOL, at(w.unsolicited.as_ptr().cast())),
            c"Whether this is an unsolicited RDMA write with immediate (no receive consumed).",
        ),
    ];
    let ty = py.get_type::<WC>();
    for (name, (type_code, offset), doc) in members {
        // The descriptor keeps a pointer to its definition: one small leak per field,
        // once per process.
        let def: &'static mut ffi::PyMemberDef = Box::leak(Box::new(ffi::PyMemberDef {
            name: name.as_ptr(),
            type_code,
            offset,
            flags: ffi::Py_READONLY,
            doc: doc.as_ptr(),
        }));
        // SAFETY: `ty` is `WC`'s type object; `def` lives for ever and describes a field
        // of every `WC` object (offset read off one, of the C type its code names:
        // `Atomic*` have their integer's layout; a `WC` cannot be subclassed). CPython
        // reads the field with the GIL held, and `WC`s are written only with it held
        // (`Filler`), so the read and the atomic stores never race.
        let descr = unsafe {
            Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMember(ty.as_type_ptr(), def))
        }?;
        ty.setattr(name.to_str().unwrap_or_default(), descr)?;
    }
    Ok(())
}

/// Appends `wc` to `out` (`PyList_Append` itself: PyO3's `append` takes and drops a
/// reference of its own around it).
#[inline(always)]
fn append(out: &Bound<'_, PyList>, wc: &Py<WC>) -> PyResult<()> {
    // SAFETY: `out` is a list and `wc` a valid object (the list takes its own reference);
    // the GIL is held (`out` is bound to it).
    if unsafe { pyo3::ffi::PyList_Append(out.as_ptr(), wc.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(PyErr::fetch(out.py()))
    }
}

/// The `WC`s one CQ handed out, for reuse (see the module docs), each with the number
/// of polls in a row that found it still held by the program.
///
/// A `WC` held at one poll is usually free by the next (a loop variable still naming the
/// last completion of a `for` over the previous poll's list); one held at two polls in a
/// row is taken to be kept, and the pool forgets it (the program's reference keeps it
/// alive), so a program that keeps every completion costs the pool at most two looks at
/// each.
///
/// Guarded by the GIL (every poll holds it), not by a lock of its own.
pub struct WcPool {
    wcs: GILProtected<RefCell<Pooled>>,
}

/// The pooled `WC`s, each with the number of polls in a row that found it held.
type Pooled = Vec<(Py<WC>, u8)>;

impl Default for WcPool {
    fn default() -> Self {
        WcPool {
            wcs: GILProtected::new(RefCell::new(Vec::new())),
        }
    }
}

impl WcPool {
    /// What one `CQ.poll` appends its `WC`s to `out` with.
    pub fn filler<'a, 'py>(
        &'a self,
        py: Python<'py>,
        out: &'a Bound<'py, PyList>,
        sgid: bool,
    ) -> Filler<'a, 'py> {
        Filler {
            py,
            out,
            // A poll from a finaliser that runs inside this one (a collection triggered by
            // an allocation here) finds the pool taken: it allocates, it does not wait.
            wcs: self.wcs.get(py).try_borrow_mut().ok(),
            at: 0,
            sgid,
        }
    }
}

/// Appends one poll's `WC`s to its list: pooled ones that nobody else holds, rewritten,
/// and new ones (kept in the pool while it has room) for the rest.
pub struct Filler<'a, 'py> {
    py: Python<'py>,
    out: &'a Bound<'py, PyList>,
    wcs: Option<RefMut<'a, Pooled>>,
    /// Where the pool is looked at next (the `WC`s this poll put in `out` are the
    /// program's now, but not for long: they must not count as held).
    at: usize,
    sgid: bool,
}

impl<'py> Filler<'_, 'py> {
    /// The GIL's token.
    #[inline(always)]
    pub fn py(&self) -> Python<'py> {
        self.py
    }
    /// Appends a `WC` of `c`, an entry of a classic CQ.
    #[inline(always)]
    pub fn put_wc(&mut self, c: &WorkCompletion) -> PyResult<()> {
        self.put_with(|wc| wc.set_wc(c))
    }
    /// Appends a `WC` of `c`.
    #[inline(always)]
    pub fn put(&mut self, c: &Completion) -> PyResult<()> {
        let sgid = self.sgid;
        self.put_with(|wc| wc.set(c, sgid))
    }

    #[inline(always)]
    fn put_with(&mut self, set: impl Fn(&WC)) -> PyResult<()> {
        let py = self.py;
        if let Some(wcs) = self.wcs.as_mut() {
            // The next pooled `WC` only the pool holds (reference count 1: the GIL is
            // held, so no other thread can take a reference meanwhile).
            while let Some((wc, held)) = wcs.get_mut(self.at) {
                if wc.get_refcnt(py) == 1 {
                    *held = 0;
                    set(wc.get());
                    append(self.out, wc)?;
                    self.at += 1;
                    return Ok(());
                }
                *held += 1;
                if *held >= 2 {
                    // Kept by the program: its reference keeps it alive, so dropping ours
                    // frees nothing here (`drop_ref`: `crate::entry`).
                    wcs.swap_remove(self.at).0.drop_ref(py);
                } else {
                    self.at += 1;
                }
            }
        }
        self.put_new(&set)
    }

    /// Appends a new `WC`, kept in the pool if it has room.
    #[inline(never)]
    fn put_new(&mut self, set: &dyn Fn(&WC)) -> PyResult<()> {
        let py = self.py;
        CREATED.fetch_add(1, Relaxed);
        let wc = Py::new(py, WC::zeroed())?;
        set(wc.get());
        let appended = append(self.out, &wc);
        match self.wcs.as_mut() {
            Some(wcs) if wcs.len() < POOL_MAX && appended.is_ok() => {
                wcs.push((wc, 0));
                self.at = wcs.len();
            }
            // `drop_ref`: `crate::entry`.
            _ => wc.drop_ref(py),
        }
        appended
    }
}
