//! The per-user cache of libraries written out of `efa-sim` executables.
//!
//! Each library lives in its own directory, `<root>/<version>-<content id>/libefa_sim.so`,
//! so any number of efa-sim versions (and builds of one version) sit side by side. A file
//! is written under a temporary name and renamed into place: a reader sees either no file
//! or a complete one, and when two processes write at once both write the same bytes and
//! the last rename wins. An existing file is used only after its bytes were compared with
//! the embedded ones, so a damaged entry is rewritten instead of loaded.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{elf, LIBRARY_FILE};

/// The name of a library's cache directory: the efa-sim version and the library's GNU
/// build-id (a hash of the whole file the linker computes), or, for a library without
/// one, a hash computed here.
pub fn entry_name(version: &str, library: &[u8]) -> String {
    match elf::build_id(library) {
        Ok(Some(id)) if !id.is_empty() => format!("{version}-{}", hex(id)),
        _ => format!("{version}-fnv{:016x}", fnv1a(library)),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// FNV-1a, 64-bit: names, not integrity (a cached library's content is compared byte
/// for byte before use).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// True when the file at `path` holds exactly `bytes`.
pub fn same_content(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    let mut file = File::open(path)?;
    if file.metadata()?.len() != bytes.len() as u64 {
        return Ok(false);
    }
    let mut buf = vec![0u8; 1 << 16];
    let mut rest = bytes;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(rest.is_empty());
        }
        if n > rest.len() || buf[..n] != rest[..n] {
            return Ok(false);
        }
        rest = &rest[n..];
    }
}

/// Makes sure `<root>/<entry_name>/libefa_sim.so` holds `library` and returns its path.
pub fn store(root: &Path, version: &str, library: &[u8]) -> io::Result<PathBuf> {
    let dir = root.join(entry_name(version, library));
    fs::create_dir_all(&dir)?;
    let path = dir.join(LIBRARY_FILE);
    match same_content(&path, library) {
        Ok(true) => return Ok(path),
        Ok(false) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let tmp = dir.join(temp_name());
    let written = write_new(&tmp, library).and_then(|()| fs::rename(&tmp, &path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written.map(|()| path)
}

/// A name no other writer (thread or process) uses at the same time.
fn temp_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!(".{LIBRARY_FILE}.{}.{n}.tmp", std::process::id())
}

fn write_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o755)
        .open(path)?;
    f.write_all(bytes)?;
    f.flush()
}

/// Creates `dir` (mode 0700 when new) and makes sure it is a directory of this user that
/// nobody else can write: a cache under a shared temporary directory must not be one
/// another user created in advance. A directory of ours that group or others may write
/// (made under a umask of 002) loses those bits; one that is not ours, or a symlink, is
/// refused.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    match fs::create_dir(dir) {
        Ok(()) => fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = fs::symlink_metadata(dir)?;
    let uid = fs::metadata("/proc/self")?.uid();
    if !meta.is_dir() || meta.uid() != uid {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} is not a directory owned by uid {uid}", dir.display()),
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(mode & !0o022))?;
    }
    Ok(())
}
