//! Which libraries answered: the file the dynamic loader bound `libibverbs.so.1` and
//! `libefa.so.1` to (rdma-core, or efa-sim's single library standing in for both), found
//! with `dladdr` on a function of each.

use std::ffi::{c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// Who implements a library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// rdma-core (real hardware, or no device at all).
    RdmaCore,
    /// efa-sim, the software EFA device.
    EfaSim,
    /// Something else.
    Unknown,
}

impl Kind {
    /// In words.
    pub fn name(self) -> &'static str {
        match self {
            Kind::RdmaCore => "rdma-core",
            Kind::EfaSim => "efa-sim",
            Kind::Unknown => "unknown",
        }
    }
}

/// One library the process loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lib {
    /// The soname programs link: `libibverbs.so.1` or `libefa.so.1`.
    pub soname: &'static str,
    /// The file it resolved to (symlinks followed), if the loader says.
    pub path: Option<PathBuf>,
    /// Who implements it.
    pub kind: Kind,
    /// rdma-core's release (from the file name, `libibverbs.so.1.14.44.0` is 44.0) or
    /// efa-sim's version (from its devices' firmware string).
    pub version: Option<String>,
}

/// The file that holds `addr` (a function of a loaded library).
fn file_of(addr: *const c_void) -> Option<PathBuf> {
    // SAFETY: all-zero is a valid Dl_info (null pointers, zero integers).
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    // SAFETY: dladdr only reads `addr` as a number and writes `info`, a valid out struct.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader, valid while the
    // library stays loaded (libibverbs and libefa are never unloaded: we link them).
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    let path = PathBuf::from(OsStr::from_bytes(name.to_bytes()));
    Some(std::fs::canonicalize(&path).unwrap_or(path))
}

/// Classifies a library file; `sim_version` is efa-sim's version if a device said it.
pub fn classify(path: &Path, sim_version: Option<&str>) -> (Kind, Option<String>) {
    let name = path.file_name().and_then(OsStr::to_str).unwrap_or("");
    if name.starts_with("libefa_sim") {
        return (Kind::EfaSim, sim_version.map(str::to_string));
    }
    for base in ["libibverbs.so.", "libefa.so."] {
        if let Some(rest) = name.strip_prefix(base) {
            // soname major, ABI minor, then rdma-core's release: 1.14.44.0 → 44.0
            let parts: Vec<&str> = rest.split('.').collect();
            let version = (parts.len() >= 4).then(|| parts[2..].join("."));
            return (Kind::RdmaCore, version);
        }
    }
    (Kind::Unknown, None)
}

/// Both libraries, with efa-sim's version taken from `fw` (a device's firmware string).
pub fn loaded(fw: Option<&str>) -> Vec<Lib> {
    let sim_version = fw.and_then(|f| f.strip_prefix("efa-sim ")).map(str::trim);
    let syms: [(&'static str, *const c_void); 2] = [
        (
            "libibverbs.so.1",
            efa::sys::verbs::ibv_get_device_list as *const c_void,
        ),
        ("libefa.so.1", efa::sys::efadv_query_device as *const c_void),
    ];
    syms.into_iter()
        .map(|(soname, addr)| {
            let path = file_of(addr);
            let (kind, version) = path
                .as_deref()
                .map_or((Kind::Unknown, None), |p| classify(p, sim_version));
            Lib {
                soname,
                path,
                kind,
                version,
            }
        })
        .collect()
}

impl Lib {
    /// The file, who implements it and which version.
    pub fn origin(&self) -> String {
        let path = self
            .path
            .as_ref()
            .map_or("(not found)".to_string(), |p| p.display().to_string());
        let who = match self.kind {
            Kind::EfaSim => "efa-sim, the software EFA device".to_string(),
            k => k.name().to_string(),
        };
        match &self.version {
            Some(v) => format!("{path} ({who} {v})"),
            None => format!("{path} ({who})"),
        }
    }
    /// One line: soname, then [`origin`](Self::origin).
    pub fn describe(&self) -> String {
        format!("{:<16} {}", self.soname, self.origin())
    }
    /// As JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "soname": self.soname,
            "path": self.path.as_ref().map(|p| p.display().to_string()),
            "kind": self.kind.name(),
            "version": self.version,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_say_who_and_which_release() {
        let c = |p: &str| classify(Path::new(p), Some("0.1.0"));
        assert_eq!(
            c("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0"),
            (Kind::RdmaCore, Some("44.0".into()))
        );
        assert_eq!(
            c("/usr/lib64/libefa.so.1.3.57.0"),
            (Kind::RdmaCore, Some("57.0".into()))
        );
        assert_eq!(c("/x/libibverbs.so.1"), (Kind::RdmaCore, None));
        assert_eq!(
            c("/t/deps/libefa_sim.so"),
            (Kind::EfaSim, Some("0.1.0".into()))
        );
        assert_eq!(c("/t/libfoo.so"), (Kind::Unknown, None));
    }
}
