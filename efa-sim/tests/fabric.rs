//! The deployed stack on the software device, unmodified as Debian installs it:
//! libfabric 1.17's EFA provider (`fi_info`, `fi_pingpong` over `rdm` and `dgram`)
//! librdmacm (a C client built with `-lrdmacm -libverbs`) and ibverbs-utils'
//! `ibv_*_pingpong`, all started through `efa-sim run`, which selects the stand-in
//! libraries and the generated sysfs tree.
//!
//! `FI_EFA_ENABLE_SHM_TRANSFER=0` keeps libfabric from moving same-host traffic
//! through its shared-memory provider, so every byte crosses the software device.
//! Every child runs under `timeout`; a failure shows both sides' stdout and stderr.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Seconds any one child may run.
const CHILD_TIMEOUT_S: u32 = 90;
/// Iterations per message size (`fi_pingpong -I`).
const ITERATIONS: u32 = 10;
/// libfabric 1.17 default of `FI_EFA_INTER_MIN_READ_MESSAGE_SIZE`: messages of at least
/// this size go by the long-read protocol (the receiver RDMA-reads the payload).
const MIN_READ_MESSAGE_SIZE: usize = 1 << 20;

/// The stand-in built for this test run: `target/<profile>/deps/libefa_sim.so`, next to
/// the test binary. (`cargo test` does not refresh `target/<profile>/libefa_sim.so`, which
/// the CLI would otherwise prefer, so an older `cargo build` could be tested instead.)
fn built_library() -> PathBuf {
    let so = support::deps_dir().join("libefa_sim.so");
    assert!(
        so.is_file(),
        "{} not built (cargo builds the cdylib for integration tests)",
        so.display()
    );
    so
}

/// `efa-sim` with a clean environment: default devices/profile, the CLI's own sysfs
/// tree, libfabric's EFA provider on the device path only.
fn efa_sim() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_efa-sim"));
    for k in [
        "EFA_SIM_PROFILE",
        "EFA_SIM_DEVICES",
        "EFA_SIM_READ_OPCODE",
        "EFA_SIM_FAULTS",
        "EFA_SIM_NO_PROCESS_VM",
        "EFA_SIM_DIRECT",
        "EFA_SIM_TRACE",
        "SYSFS_PATH",
        "FI_PROVIDER",
        "FI_LOG_LEVEL",
        "FI_EFA_INTER_MIN_READ_MESSAGE_SIZE",
        "FI_EFA_USE_DEVICE_RDMA",
        "LD_PRELOAD",
    ] {
        c.env_remove(k);
    }
    c.env("EFA_SIM_LIB", built_library());
    c.env("FI_EFA_ENABLE_SHM_TRANSFER", "0");
    c
}

/// `efa-sim run -- <args>`.
fn on_sim(args: &[&str]) -> Command {
    let mut c = efa_sim();
    c.arg("run").arg("--").args(args);
    c
}

fn require_tool(name: &str, package: &str) {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {name}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(found, "{name} is not installed (Debian package {package})");
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn describe(what: &str, out: &Output) -> String {
    format!(
        "--- {what}: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// Starts `cmd` under `timeout` with piped output.
fn spawn_with_timeout(cmd: &Command, secs: u32) -> Child {
    let mut t = Command::new("timeout");
    t.args(["-k", "5", &secs.to_string()])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => t.env(k, v),
            None => t.env_remove(k),
        };
    }
    t.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn timeout")
}

/// Asks a child started by [`spawn_with_timeout`] to stop (`timeout` forwards the signal
/// and escalates to SIGKILL after 5 s).
fn terminate(child: &Child) {
    let pid = libc::pid_t::try_from(child.id()).expect("pid fits pid_t");
    // SAFETY: kill(2) on our own child's pid (not yet reaped, so not reused).
    unsafe { libc::kill(pid, libc::SIGTERM) };
}

/// A TCP port nobody listens on right now (for fi_pingpong's control connection).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral port")
}

/// Whether some socket listens on TCP `port` (per /proc/net/tcp{,6}). Probing by
/// connecting would consume fi_pingpong's one accepted control connection.
fn listening(port: u16) -> bool {
    let needle = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|s| {
            s.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && format!("{} ", cols[1]).ends_with(&needle) && cols[3] == "0A"
            })
        })
    })
}

/// One `fi_pingpong` server/client pair over the software device.
struct PingPong {
    server: Output,
    client: Output,
}

impl PingPong {
    fn report(&self) -> String {
        format!(
            "{}\n{}",
            describe("server", &self.server),
            describe("client", &self.client)
        )
    }

    /// The result rows (`bytes #sent #ack ...`) a side printed.
    fn rows(out: &Output) -> Vec<(String, u32, String)> {
        text(&out.stdout)
            .lines()
            .skip_while(|l| !l.starts_with("bytes"))
            .skip(1)
            .filter_map(|l| {
                let c: Vec<&str> = l.split_whitespace().collect();
                Some((
                    c.first()?.to_string(),
                    c.get(1)?.parse().ok()?,
                    c.get(2)?.to_string(),
                ))
            })
            .collect()
    }

    /// Both sides exited 0 and completed `ITERATIONS` exchanges of every size in `sizes`
    /// (as fi_pingpong labels them: `64`, `4k`, `1m`, ...).
    fn assert_completed(&self, sizes: &[&str]) {
        for (side, out) in [("server", &self.server), ("client", &self.client)] {
            assert!(out.status.success(), "{side} failed\n{}", self.report());
            support::assert_no_loader_warnings(side, out);
            let rows = Self::rows(out);
            for size in sizes {
                let row = rows.iter().find(|r| r.0 == *size).unwrap_or_else(|| {
                    panic!("{side}: no result row for size {size}\n{}", self.report())
                });
                assert_eq!(
                    (row.1, row.2.as_str()),
                    (ITERATIONS, format!("={ITERATIONS}").as_str()),
                    "{side}: size {size} did not complete every exchange\n{}",
                    self.report()
                );
            }
        }
    }
}

/// Variations of a [`pingpong`] run.
#[derive(Default)]
struct Opts<'a> {
    /// More fi_pingpong options for both sides (e.g. `-m tagged`).
    extra: &'a [&'a str],
    /// Environment for both sides.
    env: &'a [(&'a str, &'a str)],
    /// Environment for the server only (applied after `env`).
    server_env: &'a [(&'a str, &'a str)],
    /// Variables removed from both sides' environment.
    unset: &'a [&'a str],
    /// Prefix of the server command (e.g. strace).
    server_wrap: &'a [&'a str],
}

/// Runs `fi_pingpong -p efa -e <ep> -c -I ITERATIONS -S <size>` as server and client,
/// both on the software device.
fn pingpong(ep: &str, size: &str, opts: &Opts) -> PingPong {
    require_tool("fi_pingpong", "libfabric-bin");
    let port = free_port().to_string();
    let iters = ITERATIONS.to_string();
    let mut common = vec!["-p", "efa", "-e", ep, "-c", "-I", &iters, "-S", size];
    common.extend(opts.extra);
    let mut server_args: Vec<&str> = opts.server_wrap.to_vec();
    server_args.push("fi_pingpong");
    server_args.extend(&common);
    server_args.extend(["-B", &port]);
    let mut server_cmd = on_sim(&server_args);
    let mut client_args = vec!["fi_pingpong"];
    client_args.extend(&common);
    client_args.extend(["-P", &port, "127.0.0.1"]);
    let mut client_cmd = on_sim(&client_args);
    for (k, v) in opts.env {
        server_cmd.env(k, v);
        client_cmd.env(k, v);
    }
    for (k, v) in opts.server_env {
        server_cmd.env(k, v);
    }
    for k in opts.unset {
        server_cmd.env_remove(k);
        client_cmd.env_remove(k);
    }

    run_pair(&server_cmd, &mut client_cmd, port.parse().unwrap())
}

/// Starts `server_cmd`, waits until it listens on TCP `port` (its out-of-band channel),
/// then runs `client_cmd`; both bounded by [`CHILD_TIMEOUT_S`].
fn run_pair(server_cmd: &Command, client_cmd: &mut Command, port: u16) -> PingPong {
    let mut server = spawn_with_timeout(server_cmd, CHILD_TIMEOUT_S);
    let port_n = port;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !listening(port_n) {
        if Instant::now() > deadline || server.try_wait().ok().flatten().is_some() {
            terminate(&server);
            let out = server.wait_with_output().expect("collect server");
            panic!(
                "fi_pingpong server never listened on port {port}\n{}",
                describe("server", &out)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let client = support::run_with_timeout(client_cmd, CHILD_TIMEOUT_S);
    if !client.status.success() {
        // Don't wait out the server's timeout: it would wait for a peer that is gone.
        // SIGTERM to `timeout` reaches the server too (SIGKILL would orphan it, and the
        // orphan would hold the output pipes open).
        terminate(&server);
    }
    let server = server.wait_with_output().expect("collect server");
    PingPong { server, client }
}

#[test]
fn fi_info_lists_rdm_and_dgram_endpoints_of_every_device() {
    require_tool("fi_info", "libfabric-bin");
    let out = support::run_with_timeout(&mut on_sim(&["fi_info", "-p", "efa"]), CHILD_TIMEOUT_S);
    assert!(out.status.success(), "{}", describe("fi_info -p efa", &out));
    support::assert_no_loader_warnings("fi_info", &out);
    let s = text(&out.stdout);
    // fi_info prints one block per (domain, endpoint type).
    let blocks: Vec<(&str, &str)> = s
        .split("provider: ")
        .skip(1)
        .filter_map(|b| {
            let field = |k: &str| {
                b.lines()
                    .find_map(|l| l.trim().strip_prefix(k).map(str::trim))
            };
            Some((field("domain:")?, field("type:")?))
        })
        .collect();
    for dev in ["efa_0", "efa_1"] {
        for (suffix, ty) in [("rdm", "FI_EP_RDM"), ("dgrm", "FI_EP_DGRAM")] {
            let domain = format!("{dev}-{suffix}");
            assert!(
                blocks.contains(&(domain.as_str(), ty)),
                "no {ty} endpoint in domain {domain}:\n{s}"
            );
        }
    }
    assert_eq!(
        blocks.len(),
        4,
        "exactly 2 devices x 2 endpoint types:\n{s}"
    );
}

#[test]
fn fi_info_nic_attributes_come_from_the_device_and_its_sysfs() {
    require_tool("fi_info", "libfabric-bin");
    let out = support::run_with_timeout(
        &mut on_sim(&["fi_info", "-p", "efa", "-v", "-d", "efa_1-rdm"]),
        CHILD_TIMEOUT_S,
    );
    assert!(out.status.success(), "{}", describe("fi_info -v", &out));
    let s = text(&out.stdout);
    // The NIC block (the domain block before it has its own `name:`).
    let nic = s
        .split_once("fi_device_attr:")
        .map(|(_, n)| n)
        .unwrap_or_else(|| panic!("no fi_device_attr in fi_info -v output:\n{s}"));
    let field = |k: &str| -> String {
        nic.lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix(&format!("{k}:"))
                    .map(|v| v.trim().to_string())
            })
            .unwrap_or_else(|| panic!("no `{k}` in fi_info -v output:\n{s}"))
    };
    // From verbs (ibv_query_device / ibv_query_port / ibv_query_gid).
    assert_eq!(field("name"), "efa_1");
    assert_eq!(field("vendor_id"), "0x1d0f");
    assert_eq!(field("device_id"), "0xefa2");
    assert!(field("firmware").starts_with("efa-sim"), "{s}");
    assert_eq!(field("state"), "FI_LINK_UP");
    // From sysfs: class/infiniband_verbs/abi_version, <ibdev_path>/device/driver and
    // the DBDF name of <ibdev_path>/device.
    assert_eq!(field("device_version"), "6");
    assert_eq!(field("driver"), "efa");
    assert_eq!(field("bus_type"), "FI_BUS_PCI");
    let pci = efa_sim::sysfs::pci_address(1);
    let dbdf: Vec<u32> = pci
        .split([':', '.'])
        .map(|p| u32::from_str_radix(p, 16).unwrap())
        .collect();
    for (k, want) in ["domain_id", "bus_id", "device_id", "function_id"]
        .iter()
        .zip(&dbdf)
    {
        // `device_id` appears twice (fi_device_attr, fi_pci_attr): read the PCI block's.
        let pci_block = s.split("fi_pci_attr:").nth(1).expect("fi_pci_attr block");
        let v = pci_block
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{k}:")).map(str::trim))
            .unwrap_or_else(|| panic!("no {k} in fi_pci_attr:\n{s}"));
        assert_eq!(v, want.to_string(), "{k} of {pci}:\n{s}");
    }
}

#[test]
fn fi_pingpong_rdm_sweep_eager_medium_and_long_read() {
    // -S all: 64 B .. 4 KiB eager, 64 KiB medium, 1 MiB (>= MIN_READ_MESSAGE_SIZE) long-read.
    let pp = pingpong("rdm", "all", &Opts::default());
    pp.assert_completed(&["64", "256", "1k", "4k", "64k", "1m"]);
    // The same protocols carry tagged messages.
    let tagged = Opts {
        extra: &["-m", "tagged"],
        ..Opts::default()
    };
    let pp = pingpong("rdm", "all", &tagged);
    pp.assert_completed(&["64", "256", "1k", "4k", "64k", "1m"]);
}

#[test]
fn fi_pingpong_rdm_long_cts_and_multi_mib_read() {
    // 256 KiB: above the medium limit, below the read threshold → long-CTS (sends).
    pingpong("rdm", "262144", &Opts::default()).assert_completed(&["256k"]);
    // 4 MiB: long-read.
    pingpong("rdm", "4194304", &Opts::default()).assert_completed(&["4m"]);
}

#[test]
fn fi_pingpong_dgram_sweep_up_to_the_mtu() {
    pingpong("dgram", "all", &Opts::default()).assert_completed(&["64", "256", "1k", "4k"]);
    // The largest datagram payload: the port's max_msg_sz (the model's MTU).
    pingpong("dgram", "8192", &Opts::default()).assert_completed(&["8k"]);
}

/// Smallest copy counted as device RDMA: the software device moves bulk RDMA (over
/// 16 KiB) between processes with process_vm_writev/readv, while libfabric itself probes
/// cross-memory attach with a 4-byte process_vm_writev.
const BULK_COPY_MIN: u64 = 64 * 1024;

/// Bytes the traced process moved in bulk with process_vm_writev/readv.
fn bulk_rdma_bytes(trace: &Path) -> u64 {
    let s = std::fs::read_to_string(trace).unwrap_or_default();
    s.lines()
        .filter(|l| l.contains("process_vm_writev(") || l.contains("process_vm_readv("))
        .filter_map(|l| l.rsplit_once("= ")?.1.trim().parse::<u64>().ok())
        .filter(|n| *n >= BULK_COPY_MIN)
        .sum()
}

/// Runs a pingpong whose server is traced for the device's bulk copies.
fn traced_pingpong(size: usize, env: &[(&str, &str)]) -> (PingPong, u64) {
    require_tool("strace", "strace");
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let trace =
        support::scratch_dir().join(format!("pingpong-{size}-{}-{n}.strace", std::process::id()));
    let trace_s = trace.to_string_lossy().into_owned();
    let wrap = [
        "strace",
        "-f",
        "-qq",
        "-e",
        "trace=process_vm_writev,process_vm_readv",
        "-o",
        &trace_s,
    ];
    let opts = Opts {
        env,
        server_wrap: &wrap,
        ..Opts::default()
    };
    let pp = pingpong("rdm", &size.to_string(), &opts);
    let bytes = bulk_rdma_bytes(&trace);
    let _ = std::fs::remove_file(&trace);
    (pp, bytes)
}

#[test]
fn rdm_messages_from_the_read_threshold_on_travel_by_rdma_read() {
    // Below the threshold (long-CTS): no RDMA at all.
    let (pp, bytes) = traced_pingpong(262_144, &[]);
    pp.assert_completed(&["256k"]);
    assert_eq!(
        bytes,
        0,
        "no RDMA expected below the read threshold\n{}",
        pp.report()
    );

    // At the threshold: every message the server sends is RDMA-read by the client, so
    // the server's device copies at least ITERATIONS messages' worth.
    let (pp, bytes) = traced_pingpong(MIN_READ_MESSAGE_SIZE, &[]);
    pp.assert_completed(&["1m"]);
    let want = ITERATIONS as u64 * MIN_READ_MESSAGE_SIZE as u64;
    assert!(
        bytes >= want,
        "RDMA-read bytes {bytes} < {want}\n{}",
        pp.report()
    );

    // Lowering libfabric's threshold moves 256 KiB messages onto RDMA read too.
    let (pp, bytes) = traced_pingpong(262_144, &[("FI_EFA_INTER_MIN_READ_MESSAGE_SIZE", "65536")]);
    pp.assert_completed(&["256k"]);
    assert!(
        bytes >= ITERATIONS as u64 * 262_144,
        "RDMA-read bytes {bytes}\n{}",
        pp.report()
    );
}

/// Compiles `tests/conformance/<name>.c` against librdmacm + libibverbs.
fn compile_rdmacm(name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/conformance")
        .join(format!("{name}.c"));
    let bin = support::scratch_dir().join(format!("{name}-{}", std::process::id()));
    let out = Command::new("gcc")
        .args([
            "-std=gnu11",
            "-O1",
            "-g",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-o",
        ])
        .arg(&bin)
        .arg(&src)
        .args(["-lrdmacm", "-libverbs"])
        .output()
        .expect("run gcc");
    assert!(out.status.success(), "{}", describe("gcc", &out));
    bin
}

/// A program linked with a provider library (`-lmlx5 -libverbs`): libmlx5 imports rdma-core's
/// `IBVERBS_PRIVATE_34` node, so efa-sim must export all of it for the program to load at
/// all under `LD_BIND_NOW=1`; then only the software devices are listed and libmlx5 claims
/// none of them.
#[test]
fn a_program_linked_with_libmlx5_loads_and_lists_only_efa_devices() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/mlx5_loads.c");
    let bin = support::scratch_dir().join(format!("mlx5_loads-{}", std::process::id()));
    let out = Command::new("gcc")
        .args(["-std=gnu11", "-Wall", "-Werror", "-o"])
        .arg(&bin)
        .arg(&src)
        // --no-as-needed: libmlx5 stays a dependency although main calls one function.
        .args(["-Wl,--no-as-needed", "-lmlx5", "-libverbs"])
        .output()
        .expect("run gcc");
    assert!(out.status.success(), "{}", describe("gcc", &out));
    let mut cmd = support::on_sim(&bin);
    cmd.env("LD_BIND_NOW", "1");
    let out = support::run_with_timeout(&mut cmd, CHILD_TIMEOUT_S);
    let _ = std::fs::remove_file(&bin);
    assert!(out.status.success(), "{}", describe("mlx5_loads", &out));
    support::assert_no_loader_warnings("mlx5_loads", &out);
    let s = text(&out.stdout);
    assert!(
        s.lines()
            .any(|l| l == "devices 2 efa_0:mlx5=0 efa_1:mlx5=0"),
        "{}",
        describe("mlx5_loads", &out)
    );
    assert!(
        s.contains("PASS mlx5_loads"),
        "{}",
        describe("mlx5_loads", &out)
    );
}

#[test]
fn librdmacm_programs_start_and_rdma_cm_calls_fail_cleanly() {
    let bin = compile_rdmacm("rdmacm_client");
    let bin_s = bin.to_string_lossy().into_owned();
    // LD_BIND_NOW: every libibverbs symbol librdmacm and the program import must resolve
    // at start (Debian's librdmacm is linked that way anyway).
    let runs = [
        ("efa-sim run", {
            let mut c = on_sim(&[&bin_s]);
            c.env("LD_BIND_NOW", "1");
            c
        }),
        ("LD_LIBRARY_PATH only", {
            let mut c = support::on_sim(&bin);
            c.env("LD_BIND_NOW", "1").env_remove("SYSFS_PATH");
            c
        }),
    ];
    let outputs: Vec<(&str, Output)> = runs
        .into_iter()
        .map(|(how, mut cmd)| (how, support::run_with_timeout(&mut cmd, CHILD_TIMEOUT_S)))
        .collect();
    let _ = std::fs::remove_file(&bin);
    let rdma_cm_dev = Path::new("/dev/infiniband/rdma_cm").exists();
    for (how, out) in outputs {
        let what = format!("rdmacm_client ({how})");
        assert!(out.status.success(), "{}", describe(&what, &out));
        support::assert_no_loader_warnings(&what, &out);
        let s = text(&out.stdout);
        let e = text(&out.stderr);
        assert!(
            !e.contains("symbol lookup error"),
            "{}",
            describe(&what, &out)
        );
        assert!(
            s.contains("PASS rdmacm_client"),
            "{}",
            describe(&what, &out)
        );
        // Device discovery goes through verbs: the software devices, in order.
        assert!(
            s.lines()
                .any(|l| l == "rdma_get_devices ok n=2 efa_0 efa_1"),
            "{}",
            describe(&what, &out)
        );
        if !rdma_cm_dev {
            // No RDMA-CM character device (as on an EFA host without rdma_ucm): the
            // event channel cannot open, and the synchronous endpoint path fails too.
            assert!(
                s.lines()
                    .any(|l| l.starts_with("rdma_create_event_channel fail errno=")),
                "{}",
                describe(&what, &out)
            );
            assert!(
                s.lines()
                    .any(|l| l.starts_with("rdma_create_ep fail errno=")),
                "{}",
                describe(&what, &out)
            );
        }
        // A connection over EFA never comes up: EFA has no RDMA-CM transport.
        assert!(
            !s.contains("rdma_create_ep ok"),
            "{}",
            describe(&what, &out)
        );
    }
}

#[test]
fn fi_pingpong_between_two_simulated_hosts_with_libfabric_defaults() {
    // Server devices on 127.0.0.2, client devices on 127.0.0.1: different GIDs, so
    // libfabric sees a remote peer and, with its default settings (shm transfer on),
    // sends everything through the device.
    let opts = Opts {
        server_env: &[("EFA_SIM_ADDR", "127.0.0.2"), ("FI_LOG_LEVEL", "info")],
        unset: &["FI_EFA_ENABLE_SHM_TRANSFER"],
        ..Opts::default()
    };
    let pp = pingpong("rdm", "all", &opts);
    pp.assert_completed(&["64", "256", "1k", "4k", "64k", "1m"]);
    let log = text(&pp.server.stderr);
    assert!(
        log.contains("efa_av_insert_one") && !log.contains("The peer is local"),
        "libfabric should have inserted the client as a remote peer\n{}",
        pp.report()
    );
    pingpong("dgram", "all", &opts).assert_completed(&["64", "256", "1k", "4k"]);
}

#[test]
fn ibverbs_utils_ud_pingpong_runs_and_connected_types_are_refused() {
    // rdma-core's own UD example (ibverbs-utils 44) between two processes, addressing
    // by GID (`-g 0`): EFA's UD QPs need a GRH address.
    require_tool("ibv_ud_pingpong", "ibverbs-utils");
    let port = free_port();
    let p = port.to_string();
    let server_args = [
        "ibv_ud_pingpong",
        "-d",
        "efa_0",
        "-g",
        "0",
        "-n",
        "200",
        "-p",
        &p,
    ];
    let mut client_args = server_args.to_vec();
    client_args.push("127.0.0.1");
    let pp = run_pair(&on_sim(&server_args), &mut on_sim(&client_args), port);
    for (side, out) in [("server", &pp.server), ("client", &pp.client)] {
        assert!(out.status.success(), "{side} failed\n{}", pp.report());
        assert!(
            text(&out.stdout).contains("200 iters in"),
            "{side} did not complete 200 iterations\n{}",
            pp.report()
        );
    }
    // EFA has no RC/UC QPs and no SRQs: the examples for them stop at creation.
    for (tool, msg) in [
        ("ibv_rc_pingpong", "Couldn't create QP"),
        ("ibv_uc_pingpong", "Couldn't create QP"),
        ("ibv_srq_pingpong", "Couldn't create SRQ"),
    ] {
        let p = free_port().to_string();
        let out = support::run_with_timeout(
            &mut on_sim(&[tool, "-d", "efa_0", "-g", "0", "-p", &p]),
            CHILD_TIMEOUT_S,
        );
        assert!(
            !out.status.success() && text(&out.stderr).contains(msg),
            "{}",
            describe(tool, &out)
        );
    }
}

#[test]
fn fi_pingpong_rdm_over_a_lossy_reordering_fabric() {
    // SRD is reliable but unordered: the device retransmits lost datagrams and
    // delivers out of order; libfabric's RDM protocol reorders (its receive window)
    // and the data checks (-c) must still pass, long-read included.
    let opts = Opts {
        env: &[("EFA_SIM_FAULTS", "seed=7,loss=0.05,reorder=0.2,dup=0.05")],
        ..Opts::default()
    };
    pingpong("rdm", "all", &opts).assert_completed(&["64", "256", "1k", "4k", "64k", "1m"]);
}

#[test]
fn without_the_rdma_read_cap_libfabric_falls_back_to_sends() {
    // libfabric reads EFADV_DEVICE_ATTR_CAPS_RDMA_READ from efadv_query_device: a device
    // without it gets 1 MiB messages by long-CTS (datagrams), never by RDMA read.
    let (pp, bytes) = traced_pingpong(
        MIN_READ_MESSAGE_SIZE,
        &[("EFA_SIM_PROFILE", "caps=-rdma_read")],
    );
    pp.assert_completed(&["1m"]);
    assert_eq!(
        bytes,
        0,
        "RDMA read without the capability\n{}",
        pp.report()
    );
}

/// `(name, version)` of the dynamic symbols `objdump -T` lists for `lib`, keeping the
/// lines `keep` accepts (e.g. undefined ones, or defined in `.text`).
fn dynamic_symbols(lib: &Path, keep: impl Fn(&str) -> bool) -> Vec<(String, String)> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(lib)
        .output()
        .expect("run objdump (binutils)");
    assert!(out.status.success(), "{}", describe("objdump -T", &out));
    text(&out.stdout)
        .lines()
        .filter(|l| keep(l))
        .filter_map(|l| {
            let mut words = l.split_whitespace().rev();
            let name = words.next()?.to_string();
            let version = words.next()?.trim_matches(['(', ')']).to_string();
            Some((name, version))
        })
        .collect()
}

#[test]
fn every_verbs_symbol_librdmacm_imports_is_exported_at_its_version() {
    // The system librdmacm.so.1 (what programs linked -lrdmacm load).
    let out = Command::new("gcc")
        .arg("-print-file-name=librdmacm.so.1")
        .output()
        .expect("run gcc");
    let rdmacm = PathBuf::from(text(&out.stdout).trim());
    assert!(
        rdmacm.is_absolute() && rdmacm.exists(),
        "librdmacm.so.1 not found (Debian package librdmacm1): {}",
        rdmacm.display()
    );
    let imports = dynamic_symbols(&rdmacm, |l| l.contains("*UND*") && l.contains("IBVERBS_"));
    assert!(
        imports.len() >= 30,
        "expected librdmacm to import its verbs symbols, found {imports:?}"
    );
    let exports = dynamic_symbols(&built_library(), |l| l.contains(" .text"));
    let missing: Vec<String> = imports
        .iter()
        .filter(|i| !exports.contains(i))
        .map(|(n, v)| format!("{n}@{v}"))
        .collect();
    assert!(
        missing.is_empty(),
        "{} imports these from libibverbs.so.1, the stand-in lacks them: {missing:?}",
        rdmacm.display()
    );
}

#[test]
fn long_read_also_works_with_bulk_rdma_in_datagram_chunks() {
    // EFA_SIM_NO_PROCESS_VM: the device moves bulk RDMA in acknowledged datagram chunks,
    // as between hosts, instead of copying process to process.
    let (pp, bytes) = traced_pingpong(4 << 20, &[("EFA_SIM_NO_PROCESS_VM", "1")]);
    pp.assert_completed(&["4m"]);
    assert_eq!(
        bytes,
        0,
        "process-to-process copies despite EFA_SIM_NO_PROCESS_VM\n{}",
        pp.report()
    );
}
