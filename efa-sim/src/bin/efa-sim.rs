//! `efa-sim`: run programs on the software EFA device.
//!
//! * `efa-sim run [--gpus N] -- CMD [ARGS]` runs CMD with `LD_LIBRARY_PATH` selecting the
//!   stand-in `libibverbs.so.1` / `libefa.so.1` (one shared object, `libefa_sim.so`), and
//!   with `--gpus N` also the software GPU (`libefa_sim_gpu.so` as `libcuda.so.1`, N
//!   devices).
//! * `efa-sim env [--gpus N]` prints the shell lines that select them.
//! * `efa-sim info` shows the software devices and their attributes (from the model).

use efa_sim::model::{profile, Device, Sim};
use efa_sim::{config, install, sysfs};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const USAGE: &str = "usage:
  efa-sim run [--gpus N] -- CMD [ARGS...]   run CMD on the software EFA device
  efa-sim env [--gpus N]                    print the shell lines that select it
  efa-sim info                              show the software devices and their attributes

run/env also point SYSFS_PATH (unless set) at a generated sysfs tree for the devices
(libfabric's EFA provider reads it). --gpus N also selects the software GPU (efa-sim-gpu,
a stand-in libcuda.so.1 for tests) with N devices.
environment: EFA_SIM_LIB=/path/to/libefa_sim.so overrides where the shared object is found,
EFA_SIM_GPU_LIB=/path/to/libefa_sim_gpu.so the software GPU's;
EFA_SIM_SHAPE (p5.48xlarge, p5en.48xlarge, p6-b200.48xlarge, 2nic: devices, link speed,
PCIe switches and NUMA nodes of an instance type), EFA_SIM_DEVICES, EFA_SIM_PROFILE,
EFA_SIM_ADDR, EFA_SIM_READ_OPCODE configure the device (see the efa-sim README).";

/// Most software GPUs `--gpus` asks for (the software GPU's own limit).
const MAX_GPUS: u32 = 64;

/// The stand-in shared object: `$EFA_SIM_LIB`, the install layout next to this
/// executable, or the copy this executable carries (see `efa_sim::install`).
fn find_library() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate this executable: {e}"))?;
    install::Lookup::from_env(exe, Some(embedded_library()))
        .locate()
        .map(|found| found.path)
        .map_err(|e| e.to_string())
}

/// The `libefa_sim.so` linked into this executable as data (`embed_cdylib_in_bins` in
/// build.rs names the two ends).
fn embedded_library() -> &'static [u8] {
    extern "C" {
        static efa_sim_embedded_start: [u8; 0];
        static efa_sim_embedded_end: [u8; 0];
    }
    // SAFETY: the linker defines both symbols at the two ends of one blob of initialised
    // data in this executable (start <= end), which nothing writes; only their addresses
    // are taken and the bytes between them are read.
    unsafe {
        let start = std::ptr::addr_of!(efa_sim_embedded_start).cast::<u8>();
        let end = std::ptr::addr_of!(efa_sim_embedded_end).cast::<u8>();
        std::slice::from_raw_parts(start, end as usize - start as usize)
    }
}

/// A directory holding `libibverbs.so.1` and `libefa.so.1` symlinks to `so`: next to the
/// library if writable, else in the per-user runtime/temp directory.
fn selection_dir(so: &Path) -> Result<PathBuf, String> {
    let mut dirs = vec![so.parent().unwrap_or(Path::new(".")).join("efa-sim-lib")];
    // One directory per library, so that read-only installs of different versions do not
    // repoint each other's links.
    dirs.push(install::runtime_dir().join(install::path_key(so)));
    let mut last_err = String::new();
    for dir in dirs {
        match make_links(&dir, so) {
            Ok(()) => return Ok(dir),
            Err(e) => last_err = format!("{}: {e}", dir.display()),
        }
    }
    Err(format!("cannot create the library directory ({last_err})"))
}

fn make_links(dir: &Path, so: &Path) -> std::io::Result<()> {
    link_as(dir, so, &["libibverbs.so.1", "libefa.so.1"])
}

/// Symlinks `dir/<name>` → `so` for every name.
fn link_as(dir: &Path, so: &Path, names: &[&str]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for name in names {
        let link = dir.join(name);
        if std::fs::read_link(&link).ok().as_deref() == Some(so) {
            continue;
        }
        // Replace atomically so concurrent runs never see a missing link.
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(so, &tmp)?;
        std::fs::rename(&tmp, &link)?;
    }
    Ok(())
}

/// The software GPU's library: `$EFA_SIM_GPU_LIB`, else `libefa_sim_gpu.so` next to
/// efa-sim's library or this executable (or in their `deps/`, where cargo builds it as a
/// dependency).
fn find_gpu_library(sim_lib: &Path) -> Result<PathBuf, String> {
    if let Some(p) = config::gpu_library_override() {
        let p = PathBuf::from(p);
        return match install::check_library_file(&p) {
            Ok(()) => Ok(p),
            Err(e) => Err(format!(
                "EFA_SIM_GPU_LIB=`{}`: {e}; it must name libefa_sim_gpu.so (a 64-bit ELF shared object)",
                config::shown(&p.to_string_lossy())
            )),
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate this executable: {e}"))?;
    let dirs = [sim_lib.parent(), exe.parent()];
    dirs.iter()
        .flatten()
        .flat_map(|d| {
            [
                d.join("libefa_sim_gpu.so"),
                d.join("deps/libefa_sim_gpu.so"),
            ]
        })
        .find(|p| p.is_file())
        .ok_or_else(|| {
            "--gpus: no libefa_sim_gpu.so (the software GPU) next to efa-sim's library or \
             this executable; build it with `cargo build -p efa-sim-gpu` or name it with \
             EFA_SIM_GPU_LIB"
                .to_string()
        })
}

/// A directory holding a `libcuda.so.1` link to the software GPU `so`.
fn gpu_selection_dir(so: &Path) -> Result<PathBuf, String> {
    let dirs = [
        so.parent()
            .unwrap_or(Path::new("."))
            .join("efa-sim-gpu-lib"),
        install::runtime_dir().join(install::path_key(so)),
    ];
    let mut last_err = String::new();
    for dir in dirs {
        match link_as(&dir, so, &["libcuda.so.1"]) {
            Ok(()) => return Ok(dir),
            Err(e) => last_err = format!("{}: {e}", dir.display()),
        }
    }
    Err(format!(
        "cannot create the software GPU's library directory ({last_err})"
    ))
}

/// `--gpus N` at the start of `args`: N and the rest.
fn gpus_option(args: &[OsString]) -> Result<(Option<u32>, &[OsString]), String> {
    match args.first().and_then(|a| a.to_str()) {
        Some("--gpus") => {
            let value = args.get(1).map(|v| v.to_string_lossy());
            let n = value
                .as_deref()
                .and_then(|v| v.parse::<u32>().ok())
                .filter(|n| *n <= MAX_GPUS)
                .ok_or_else(|| {
                    let shown = config::shown(value.as_deref().unwrap_or(""));
                    format!("--gpus `{shown}`: must be a number of devices 0..={MAX_GPUS}")
                })?;
            Ok((Some(n), &args[2..]))
        }
        _ => Ok((None, args)),
    }
}

/// Environment variables for the child.
type Vars = Vec<(&'static str, OsString)>;

/// What a program needs in its environment to run on the software devices (and GPU): the
/// directories to put first on `LD_LIBRARY_PATH`, and other variables.
fn selection(gpus: Option<u32>) -> Result<(OsString, Vars), String> {
    let sim_lib = find_library()?;
    let dir = selection_dir(&sim_lib)?;
    let mut path = OsString::from(&dir);
    let mut vars = Vec::new();
    if let Some(n) = gpus {
        let gpu_dir = gpu_selection_dir(&find_gpu_library(&sim_lib)?)?;
        path.push(":");
        path.push(&gpu_dir);
        vars.push(("EFA_SIM_GPU_DEVICES", OsString::from(n.to_string())));
        if let Some(ids) = gpu_bus_ids(n)? {
            vars.push(("EFA_SIM_GPU_PCI_BUS_IDS", OsString::from(ids)));
        }
    }
    if let Some(sysfs) = sysfs_path(&dir)? {
        vars.push(("SYSFS_PATH", sysfs.into_os_string()));
    }
    Ok((path, vars))
}

/// With `EFA_SIM_SHAPE`, the PCI addresses of the shape's first `n` GPUs (the software
/// GPU reports them, so that they match the GPUs in the sysfs tree).
fn gpu_bus_ids(n: u32) -> Result<Option<String>, String> {
    let Some(shape) = Sim::get().config().shape else {
        return Ok(None);
    };
    if n > shape.gpus {
        return Err(format!(
            "--gpus {n}: EFA_SIM_SHAPE={} has {} GPUs",
            shape.name, shape.gpus
        ));
    }
    let ids: Vec<String> = (0..n).map(|g| shape.gpu_address(g)).collect();
    Ok(Some(ids.join(",")))
}

/// `SYSFS_PATH` for the child: the caller's if set, else the generated sysfs tree of the
/// configured devices (see `efa_sim::sysfs`; libfabric's EFA provider reads it), cached
/// next to the library links.
fn sysfs_path(dir: &Path) -> Result<Option<PathBuf>, String> {
    if std::env::var_os("SYSFS_PATH").is_some() {
        return Ok(None);
    }
    let sim = Sim::get();
    if let Some(e) = sim.error() {
        return Err(format!("configuration rejected, no devices: {e}"));
    }
    let cache = dir.join("sysfs");
    let tree = sysfs::Tree::for_devices(sim.devices(), sim.config().shape);
    sysfs::prepare(&cache, &tree)
        .map(Some)
        .map_err(|e| format!("cannot write the sysfs tree under {}: {e}", cache.display()))
}

/// Rejects a malformed `EFA_SIM_*` configuration before anything is located, created or
/// run, with the line the library prints when it is loaded with it.
fn check_config() -> Result<(), String> {
    config::Config::from_env()
        .map(drop)
        .map_err(|e| format!("configuration error, no devices: {e}"))
}

fn cmd_run(args: &[OsString]) -> Result<ExitCode, String> {
    let (gpus, args) = gpus_option(args)?;
    let args = match args.first() {
        Some(a) if a == "--" => &args[1..],
        _ => args,
    };
    let Some((program, rest)) = args.split_first() else {
        return Err("run: no command given (efa-sim run [--gpus N] -- CMD [ARGS])".into());
    };
    check_config()?;
    let (mut path, vars) = selection(gpus)?;
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let mut cmd = Command::new(program);
    cmd.args(rest).env("LD_LIBRARY_PATH", path).envs(vars);
    let err = cmd.exec();
    Err(format!("cannot run {}: {err}", program.to_string_lossy()))
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn cmd_env(args: &[OsString]) -> Result<ExitCode, String> {
    let (gpus, rest) = gpus_option(args)?;
    if let Some(extra) = rest.first() {
        let shown = config::shown(&extra.to_string_lossy());
        return Err(format!("env: unexpected argument: {shown}\n{USAGE}"));
    }
    check_config()?;
    let (path, vars) = selection(gpus)?;
    println!(
        "export LD_LIBRARY_PATH={}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}",
        shell_quote(&path.to_string_lossy())
    );
    for (k, v) in vars {
        println!("export {k}={}", shell_quote(&v.to_string_lossy()));
    }
    Ok(ExitCode::SUCCESS)
}

fn gid_string(g: &[u8; 16]) -> String {
    g.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

fn caps_string(caps: u32) -> String {
    let names = [
        (profile::CAP_RDMA_READ, "RDMA_READ"),
        (profile::CAP_RNR_RETRY, "RNR_RETRY"),
        (profile::CAP_CQ_WITH_SGID, "CQ_WITH_SGID"),
        (profile::CAP_RDMA_WRITE, "RDMA_WRITE"),
        (
            profile::CAP_UNSOLICITED_WRITE_RECV,
            "UNSOLICITED_WRITE_RECV",
        ),
    ];
    let set: Vec<&str> = names
        .iter()
        .filter(|(b, _)| caps & b != 0)
        .map(|(_, n)| *n)
        .collect();
    format!(
        "0x{caps:02x} ({})",
        if set.is_empty() {
            "none".to_string()
        } else {
            set.join("|")
        }
    )
}

fn print_device(d: &Device) {
    let p = &d.profile;
    println!("hca_id:\t{}", d.name);
    let rows: Vec<(&str, String)> = vec![
        ("transport", "unspecified (4)".into()),
        ("fw_ver", p.fw_ver.clone()),
        ("node_guid", format!("{:016x}", p.node_guid)),
        ("vendor_id", format!("0x{:04x}", p.vendor_id)),
        ("vendor_part_id", format!("0x{:04x}", p.vendor_part_id)),
        ("hw_ver", format!("0x{:X}", p.hw_ver)),
        ("device_caps", caps_string(p.device_caps)),
        ("cq_notifications", p.cq_notifications.to_string()),
        ("max_qp", p.max_qp.to_string()),
        ("max_cq", p.max_cq.to_string()),
        ("max_cqe", p.max_cqe.to_string()),
        ("max_mr", p.max_mr.to_string()),
        ("max_pd", p.max_pd.to_string()),
        ("max_ah", p.max_ah.to_string()),
        ("max_mr_size", format!("0x{:x}", p.max_mr_size)),
        ("page_size_cap", format!("0x{:x}", p.page_size_cap)),
        ("max_sq_wr", p.max_sq_wr.to_string()),
        ("max_rq_wr", p.max_rq_wr.to_string()),
        ("max_sq_sge", p.max_sq_sge.to_string()),
        ("max_rq_sge", p.max_rq_sge.to_string()),
        ("max_sge_rd", p.max_sge_rd.to_string()),
        ("inline_buf_size", p.inline_buf_size.to_string()),
        ("inline_buf_size_ex", p.inline_buf_size_ex.to_string()),
        ("max_rdma_size", p.max_rdma_size.to_string()),
        ("max_llq_size", p.max_llq_size.to_string()),
        ("min_sq_wr", p.min_sq_wr.to_string()),
        ("dmabuf_mr", p.dmabuf_mr.to_string()),
        ("peermem", p.peermem.to_string()),
        ("num_comp_vectors", p.num_comp_vectors.to_string()),
        (
            "rdma_read_opcode",
            if p.read_completes_as_send {
                "IBV_WC_SEND"
            } else {
                "IBV_WC_RDMA_READ"
            }
            .into(),
        ),
        ("port 1 state", "PORT_ACTIVE (4)".into()),
        (
            "port 1 max_msg_sz",
            format!("{} (MTU enum 4096)", p.mtu_bytes),
        ),
        ("port 1 link", format!("{} Gb/s", p.link_gbps)),
        ("GID[0]", gid_string(&d.gid)),
        ("endpoint", d.addr.to_string()),
    ];
    for (k, v) in rows {
        println!("\t{k}:\t{v}");
    }
    println!();
}

fn cmd_info() -> Result<ExitCode, String> {
    check_config()?;
    let sim = Sim::get();
    if let Some(e) = sim.error() {
        return Err(format!("configuration rejected, no devices: {e}"));
    }
    if sim.devices().is_empty() {
        println!("no software devices (EFA_SIM_DEVICES=0)");
    }
    for d in sim.devices() {
        print_device(d);
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`efa-sim info | head`) like other command-line tools
    // instead of panicking in println!.
    // SAFETY: setting a signal disposition to SIG_DFL at the start of main, before any
    // other thread exists, has no memory-safety preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let result = match args.first().and_then(|a| a.to_str()) {
        Some("run") => cmd_run(&args[1..]),
        Some("env") => cmd_env(&args[1..]),
        Some("info") => cmd_info(),
        Some("-h") | Some("--help") | Some("help") => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        Some(other) => Err(format!(
            "unknown command: {}\n{USAGE}",
            config::shown(other)
        )),
        None if !args.is_empty() => Err(format!(
            "unknown command: {}\n{USAGE}",
            config::shown(&args[0].to_string_lossy())
        )),
        None => Err(USAGE.to_string()),
    };
    match result {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("efa-sim: {msg}");
            ExitCode::from(2)
        }
    }
}
