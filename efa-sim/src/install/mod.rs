//! Where the `efa-sim` command finds the stand-in library it puts under programs.
//!
//! The CLI carries its own `libefa_sim.so`: the build links the cdylib into the
//! executable as data (`embed_cdylib_in_bins` in build.rs), because `cargo install`
//! installs executables only. [`Lookup::locate`] picks, first match wins:
//!
//! 1. `EFA_SIM_LIB`, when set: that file, which must be a 64-bit ELF shared library
//!    ([`check_library_file`]; anything else is an error before any file is created,
//!    [`Origin::Override`]).
//! 2. `<exe dir>/../lib/efa-sim/libefa_sim.so`, the install layout of the release
//!    tarball and the Python wheel ([`Origin::Installed`]).
//! 3. The embedded library:
//!    * used in place when a file with the same bytes sits next to the executable
//!      (`libefa_sim.so` or `deps/libefa_sim.so`: a cargo build directory), which keeps
//!      development builds out of the cache ([`Origin::BesideExecutable`]);
//!    * otherwise written once to the per-user cache, `$XDG_CACHE_HOME/efa-sim`
//!      (default `~/.cache/efa-sim`), or, when that cannot be written, a private
//!      `efa-sim-<uid>/cache` under `$XDG_RUNTIME_DIR` or the temporary directory
//!      ([`Origin::Cache`]; see [`cache`] for the layout and why it is safe with
//!      several versions and concurrent starts).
//!
//! Without an embedded library (a caller of this module that has none), step 3 takes the
//! newest of the files next to the executable instead.
//!
//! ```
//! use efa_sim::install::{Lookup, Origin};
//! # let dir = std::env::temp_dir().join(format!("efa-sim-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(dir.join("lib/efa-sim")).unwrap();
//! # std::fs::write(dir.join("lib/efa-sim/libefa_sim.so"), b"\x7fELF").unwrap();
//! // An unpacked release tarball: bin/efa-sim finds ../lib/efa-sim/libefa_sim.so.
//! let lookup = Lookup::new(dir.join("bin/efa-sim"), None);
//! let found = lookup.locate().unwrap();
//! assert_eq!(found.origin, Origin::Installed);
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

pub mod cache;
pub mod elf;

use std::path::{Path, PathBuf};

/// File name of the stand-in library (rustc's name for the `efa_sim` cdylib).
pub const LIBRARY_FILE: &str = "libefa_sim.so";
/// Where an installed layout keeps the library, relative to the CLI's `bin/` parent.
pub const INSTALL_LIB_DIR: &str = "lib/efa-sim";
/// The environment variable that names the library to use instead of any other.
pub const OVERRIDE_VAR: &str = "EFA_SIM_LIB";
/// This efa-sim's version: the first part of a cache entry's name.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// How the library was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Named by `EFA_SIM_LIB`.
    Override,
    /// `../lib/efa-sim/` relative to the executable (tarball, wheel).
    Installed,
    /// A file next to the executable (cargo's build directory).
    BesideExecutable,
    /// Written out of the executable into the per-user cache.
    Cache,
}

/// A library to load, and how it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// The shared object.
    pub path: PathBuf,
    /// How it was found.
    pub origin: Origin,
}

/// Why no library could be provided.
#[derive(Debug)]
pub enum LocateError {
    /// `EFA_SIM_LIB` names something that is not a shared library.
    BadOverride(PathBuf, LibraryFileError),
    /// The executable's bytes are not a shared object (a broken build).
    BadEmbedded(elf::ElfError),
    /// No embedded library and none of these files exist.
    NotFound(Vec<PathBuf>),
    /// The embedded library could be written to none of the cache directories.
    Cache(Vec<(PathBuf, std::io::Error)>),
}

impl std::fmt::Display for LocateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LocateError::BadOverride(p, e) => write!(
                f,
                "{OVERRIDE_VAR}=`{}`: {e}; it must name {LIBRARY_FILE} (a 64-bit ELF shared object)",
                crate::config::shown(&p.to_string_lossy())
            ),
            LocateError::BadEmbedded(e) => write!(f, "the library inside efa-sim is broken: {e}"),
            LocateError::NotFound(paths) => {
                write!(f, "{LIBRARY_FILE} not found (looked for")?;
                for p in paths {
                    write!(f, " {}", p.display())?;
                }
                write!(f, "; set {OVERRIDE_VAR})")
            }
            LocateError::Cache(tries) => {
                write!(f, "cannot write {LIBRARY_FILE} to a cache directory:")?;
                for (dir, e) in tries {
                    write!(f, " {}: {e};", dir.display())?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for LocateError {}

/// The inputs of the library lookup; [`Lookup::from_env`] fills them from the process.
#[derive(Debug, Clone)]
pub struct Lookup<'a> {
    /// Value of `EFA_SIM_LIB`.
    pub override_path: Option<PathBuf>,
    /// The `efa-sim` executable.
    pub exe: PathBuf,
    /// The library inside the executable, if it carries one.
    pub embedded: Option<&'a [u8]>,
    /// Cache directories, most preferred first (each is created when missing).
    pub cache_roots: Vec<CacheRoot>,
    /// The efa-sim version naming cache entries.
    pub version: &'a str,
}

/// A candidate cache directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheRoot {
    /// The directory; its parent must exist, or be creatable when not `private`.
    pub dir: PathBuf,
    /// Under a shared directory (the temporary one): created with mode 0700 inside a
    /// per-user directory, and rejected unless owned by this user.
    pub private: bool,
}

impl<'a> Lookup<'a> {
    /// A lookup with no override and no cache directories.
    pub fn new(exe: PathBuf, embedded: Option<&'a [u8]>) -> Self {
        Lookup {
            override_path: None,
            exe,
            embedded,
            cache_roots: Vec::new(),
            version: VERSION,
        }
    }

    /// The lookup the CLI does: `EFA_SIM_LIB`, the XDG cache, then the runtime or
    /// temporary directory.
    pub fn from_env(exe: PathBuf, embedded: Option<&'a [u8]>) -> Self {
        let var = |name| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let mut lookup = Lookup::new(exe, embedded);
        // EFA_SIM_LIB, like every EFA_SIM_* variable, is read in `crate::config`.
        lookup.override_path = crate::config::library_override().map(PathBuf::from);
        // XDG: a relative $XDG_CACHE_HOME is invalid and ignored.
        let xdg = var("XDG_CACHE_HOME").filter(|p| p.is_absolute());
        let user_cache = xdg.or_else(|| var("HOME").map(|h| h.join(".cache")));
        if let Some(dir) = user_cache {
            lookup.cache_roots.push(CacheRoot {
                dir: dir.join("efa-sim"),
                private: false,
            });
        }
        lookup.cache_roots.push(CacheRoot {
            dir: runtime_dir().join("cache"),
            private: true,
        });
        lookup
    }

    /// Finds (or writes) the library, as the module documentation describes.
    pub fn locate(&self) -> Result<Located, LocateError> {
        if let Some(p) = &self.override_path {
            check_library_file(p).map_err(|e| LocateError::BadOverride(p.clone(), e))?;
            return Ok(Located {
                path: canonical(p),
                origin: Origin::Override,
            });
        }
        let dir = self.exe.parent().unwrap_or(Path::new("."));
        // current_exe() has symlinks resolved, so the textual parent is the real `..`.
        let prefix = dir.parent().unwrap_or(dir);
        let installed = prefix.join(INSTALL_LIB_DIR).join(LIBRARY_FILE);
        if installed.is_file() {
            return Ok(Located {
                path: canonical(&installed),
                origin: Origin::Installed,
            });
        }
        let beside = [dir.join(LIBRARY_FILE), dir.join("deps").join(LIBRARY_FILE)];
        let Some(embedded) = self.embedded else {
            return newest(&beside)
                .map(|p| Located {
                    path: canonical(&p),
                    origin: Origin::BesideExecutable,
                })
                .ok_or_else(|| {
                    LocateError::NotFound(
                        [&installed].into_iter().chain(&beside).cloned().collect(),
                    )
                });
        };
        elf::check_shared_object(embedded).map_err(LocateError::BadEmbedded)?;
        if let Some(p) = beside
            .iter()
            .find(|p| cache::same_content(p, embedded).unwrap_or(false))
        {
            return Ok(Located {
                path: canonical(p),
                origin: Origin::BesideExecutable,
            });
        }
        let mut failures = Vec::new();
        for root in &self.cache_roots {
            let stored =
                prepare_root(root).and_then(|()| cache::store(&root.dir, self.version, embedded));
            match stored {
                Ok(path) => {
                    return Ok(Located {
                        path,
                        origin: Origin::Cache,
                    })
                }
                Err(e) => failures.push((root.dir.clone(), e)),
            }
        }
        Err(LocateError::Cache(failures))
    }
}

/// Why a file named as a library cannot be one.
#[derive(Debug)]
pub enum LibraryFileError {
    /// Missing, or a directory or device.
    NotAFile,
    /// It could not be read.
    Unreadable(std::io::Error),
    /// Its bytes are not a 64-bit shared library.
    Elf(elf::ElfError),
}

impl std::fmt::Display for LibraryFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LibraryFileError::NotAFile => f.write_str("not a file"),
            LibraryFileError::Unreadable(e) => write!(f, "cannot be read ({e})"),
            LibraryFileError::Elf(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for LibraryFileError {}

/// Checks that `path` is a 64-bit little-endian ELF shared library
/// ([`elf::check_library`]), reading only its headers (the first 64 KiB).
pub fn check_library_file(path: &Path) -> Result<(), LibraryFileError> {
    use std::io::Read;
    if !path.is_file() {
        return Err(LibraryFileError::NotAFile);
    }
    let mut head = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(64 * 1024).read_to_end(&mut head))
        .map_err(LibraryFileError::Unreadable)?;
    elf::check_library(&head).map_err(LibraryFileError::Elf)
}

fn prepare_root(root: &CacheRoot) -> std::io::Result<()> {
    if !root.private {
        return std::fs::create_dir_all(&root.dir);
    }
    if let Some(user_dir) = root.dir.parent() {
        cache::private_dir(user_dir)?;
    }
    cache::private_dir(&root.dir)
}

/// The newest existing file of `paths` (cargo refreshes `target/<profile>/` on `build`
/// but only `deps/` on `test`).
fn newest(paths: &[PathBuf]) -> Option<PathBuf> {
    let modified = |p: &&PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    paths
        .iter()
        .filter(|p| p.is_file())
        .max_by_key(modified)
        .cloned()
}

fn canonical(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

/// The per-user directory for files that need no permanence: `efa-sim-<uid>` under
/// `$XDG_RUNTIME_DIR`, or under the temporary directory.
pub fn runtime_dir() -> PathBuf {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    base.join(format!("efa-sim-{}", current_uid()))
}

/// A short directory name standing for the path `p` (a hash of it).
pub fn path_key(p: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    format!("lib-{:016x}", cache::fnv1a(p.as_os_str().as_bytes()))
}

/// This process's user id (the owner of `/proc/self`), 0 when unknown.
pub fn current_uid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap_or(0)
}
