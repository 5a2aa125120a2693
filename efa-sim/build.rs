//! Links the cdylib as the stand-in `libibverbs.so.1` (also exposed as `libefa.so.1`):
//! sets the soname and hands the linker a version script that declares the rdma-core
//! version nodes. Which symbol belongs to which node is decided by the `.symver`
//! trampolines in `src/abi/export.rs`; this script only makes the nodes exist.
use std::fmt::Write as _;
use std::path::PathBuf;

/// libibverbs.so.1 nodes, oldest first (rdma-core libibverbs.map.in).
const IBVERBS_NODES: &[&str] = &[
    "IBVERBS_1.0",
    "IBVERBS_1.1",
    "IBVERBS_1.5",
    "IBVERBS_1.6",
    "IBVERBS_1.7",
    "IBVERBS_1.8",
    "IBVERBS_1.9",
    "IBVERBS_1.10",
    "IBVERBS_1.11",
    "IBVERBS_1.12",
    "IBVERBS_1.13",
    "IBVERBS_1.14",
    "IBVERBS_1.15",
    "IBVERBS_1.16",
    "IBVERBS_1.17",
    "IBVERBS_1.18",
];
/// The provider-private node of the system rdma-core (v44). Debian's `ibv_devinfo`
/// imports `ibv_query_gid_type@IBVERBS_PRIVATE_34`, so it must exist for that tool to load.
const PRIVATE_NODES: &[&str] = &["IBVERBS_PRIVATE_34"];
/// libefa.so.1 nodes (providers/efa/libefa.map).
const EFA_NODES: &[&str] = &[
    "EFA_1.0", "EFA_1.1", "EFA_1.2", "EFA_1.3", "EFA_1.4", "EFA_1.5", "EFA_1.6", "EFA_1.7",
];

/// efa-sim's own calls (src/abi/direct_hooks.rs), apart from rdma-core's nodes.
const SIM_NODES: &[&str] = &["EFA_SIM_1.0"];

/// GNU ld refuses to combine rustc's anonymous version script with the named nodes; LLVM's
/// lld accepts both. rustc links x86_64 Linux with its bundled rust-lld already. Elsewhere
/// (aarch64) the C compiler driver is told to use lld too: rustc's own, through the `gcc-ld`
/// wrapper directory every toolchain ships, or else the system's `ld.lld`.
fn use_lld() {
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64") {
        return;
    }
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let host = std::env::var("HOST").expect("cargo sets HOST");
    let sysroot = std::process::Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if let Some(gcc_ld) = sysroot.map(|s| s.join("lib/rustlib").join(&host).join("bin/gcc-ld")) {
        if gcc_ld.join("ld.lld").exists() {
            println!("cargo:rustc-link-arg=-B{}", gcc_ld.display());
        }
    }
    println!("cargo:rustc-link-arg=-fuse-ld=lld");
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let mut script = String::new();
    for nodes in [IBVERBS_NODES, PRIVATE_NODES, EFA_NODES, SIM_NODES] {
        let mut prev: Option<&str> = None;
        for node in nodes {
            match prev {
                None => writeln!(script, "{node} {{ }};").unwrap(),
                Some(p) => writeln!(script, "{node} {{ }} {p};").unwrap(),
            }
            prev = Some(node);
        }
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let path = out.join("efa_sim_nodes.map");
    std::fs::write(&path, script).expect("write version script");
    use_lld();
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    // The trampolines carry versioned names, so every binary that links this crate's
    // code (the cdylib, the CLI, tests) must know the nodes.
    println!(
        "cargo:rustc-link-arg=-Wl,--version-script={}",
        path.display()
    );
    // The CLI and the model tests link this crate's rlib; keep the verbs symbols the rlib
    // also carries out of their dynamic symbol tables.
    // (cargo rejects link args for a kind of target the package lacks: the published
    // crate ships without tests/ and benches/.)
    let manifest_dir =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    for (kind, dir) in [
        ("bins", "src/bin"),
        ("tests", "tests"),
        ("benches", "benches"),
    ] {
        if manifest_dir.join(dir).is_dir() {
            println!("cargo:rustc-link-arg-{kind}=-Wl,--exclude-libs,ALL");
        }
    }
    embed_cdylib_in_bins(&out);
}

/// Links this package's cdylib into the `efa-sim` CLI as data, so an installed CLI
/// (`cargo install` copies only binaries) carries its library (`src/install/`).
///
/// The cdylib is not built yet when this script runs, so the bytes cannot be handed to
/// rustc (`include_bytes!` would also break `cargo check`, which never writes the
/// cdylib). They are handed to the linker instead: a binary links this crate's rlib,
/// cargo starts it only after the library's rustc (which writes the rlib and the cdylib
/// together) has exited, and `check`/`clippy`/`doc` never link. The linker reads the file
/// as raw data (`--format=binary`) and names it by its path; `--defsym` gives the two
/// ends the fixed names the CLI declares.
fn embed_cdylib_in_bins(out: &std::path::Path) {
    // OUT_DIR = <target>/[<triple>/]<profile>/build/efa-sim-<hash>/out; rustc writes
    // the cdylib to <target>/[<triple>/]<profile>/deps.
    let deps = out.ancestors().nth(3).map(|p| p.join("deps"));
    let Some(deps) = deps.filter(|d| d.is_dir()) else {
        panic!(
            "efa-sim: no deps/ directory three levels above OUT_DIR={}: cargo's build \
             directory layout is not the one this build script knows, so the CLI cannot \
             embed libefa_sim.so",
            out.display()
        );
    };
    let so = deps.join("libefa_sim.so");
    let path = so.to_str().expect("target directory path is not UTF-8");
    // The linker derives the data symbols from the path, every non-alphanumeric byte
    // becoming '_'.
    let mangled: String = path
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                b as char
            } else {
                '_'
            }
        })
        .collect();
    for arg in [
        "-Wl,--format=binary",
        path,
        "-Wl,--format=default",
        &format!("-Wl,--defsym=efa_sim_embedded_start=_binary_{mangled}_start"),
        &format!("-Wl,--defsym=efa_sim_embedded_end=_binary_{mangled}_end"),
    ] {
        println!("cargo:rustc-link-arg-bins={arg}");
    }
}
