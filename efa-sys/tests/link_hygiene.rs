//! No binary of the workspace may NEED librdmacm.so.1: rdma-sys asks for `-lrdmacm`, rustc's
//! `--as-needed` drops it unless an `rdma_*` function is called, and the real librdmacm cannot
//! load against the software device's stand-in libibverbs.

use std::path::{Path, PathBuf};
use std::process::Command;

const RDMACM: &str = "librdmacm.so.1";

/// `NEEDED` entries of an ELF file, from `readelf -d`.
fn needed(path: &Path) -> Vec<String> {
    let out = Command::new("readelf")
        .arg("-d")
        .arg("-W")
        .arg(path)
        .output()
        .expect("running readelf (binutils) failed");
    assert!(
        out.status.success(),
        "readelf -d {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| {
            let start = l.find('[')? + 1;
            let end = l.rfind(']')?;
            Some(l[start..end].to_owned())
        })
        .collect()
}

/// ELF type (`e_type`) of `path`, or `None` if it is not an ELF file.
fn elf_type(path: &Path) -> Option<u16> {
    let bytes = std::fs::read(path).ok()?;
    (bytes.len() >= 18 && bytes[..4] == *b"\x7fELF")
        .then(|| u16::from_le_bytes([bytes[16], bytes[17]]))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Executables and shared objects of this workspace in `dir`: every executable (test, bench and
/// example binaries, `efa-sim`) and the `libefa*` shared objects (cdylibs). Proc-macro `.so`
/// files of third-party crates are skipped.
fn workspace_binaries(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let shared_object = name.contains(".so");
            let wanted = if shared_object {
                name.starts_with("libefa")
            } else {
                is_executable(p) && !name.ends_with(".d") && !name.ends_with(".rlib")
            };
            // ET_EXEC = 2, ET_DYN = 3 (PIE executables and shared objects).
            wanted && matches!(elf_type(p), Some(2 | 3))
        })
        .collect();
    found.sort();
    found
}

#[test]
fn no_workspace_binary_needs_librdmacm() {
    let me = std::env::current_exe().unwrap();
    let deps = me
        .parent()
        .expect("test binary lives in target/<profile>/deps");
    let profile_dir = deps.parent().expect("deps has a parent");
    let mut files = workspace_binaries(deps);
    files.extend(workspace_binaries(profile_dir));
    files.extend(workspace_binaries(&profile_dir.join("examples")));
    let me = me.canonicalize().unwrap();
    assert!(
        files
            .iter()
            .any(|f| f.canonicalize().is_ok_and(|f| f == me)),
        "the scan did not find this test binary {} among {files:?}",
        me.display()
    );
    let offenders: Vec<String> = files
        .iter()
        .filter(|f| needed(f).iter().any(|n| n == RDMACM))
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        offenders.is_empty(),
        "these binaries NEED {RDMACM}: {offenders:#?}"
    );
    println!("checked {} binaries: {files:#?}", files.len());
}

#[test]
fn this_test_binary_links_verbs_and_efa_but_not_librdmacm() {
    // Reference a verbs and an efadv entry point so both libraries are really linked in.
    let used = [
        efa_sys::verbs::ibv_get_device_list as *const () as usize,
        efa_sys::efadv::efadv_query_device as *const () as usize,
        efa_sys::verbs_ext::_ibv_query_gid_ex as *const () as usize,
    ];
    // black_box: an optimised build would fold the non-null test away, drop the
    // references, and link neither library (--as-needed).
    assert!(std::hint::black_box(used).iter().all(|&a| a != 0));
    let needs = needed(&std::env::current_exe().unwrap());
    assert!(
        needs.iter().any(|n| n == "libibverbs.so.1"),
        "NEEDED: {needs:?}"
    );
    assert!(
        needs.iter().any(|n| n == "libefa.so.1"),
        "NEEDED: {needs:?}"
    );
    assert!(!needs.iter().any(|n| n == RDMACM), "NEEDED: {needs:?}");
}
