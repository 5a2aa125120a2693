//! One configuration value for the whole software device: every `EFA_SIM_*` environment
//! variable is read here, once, into a [`Config`] that the devices, their runtimes and
//! the transport receive. A test builds a `Config` (or edits [`Config::default`]) instead
//! of re-running itself with another environment.
//!
//! | Variable | Field | Default |
//! |---|---|---|
//! | `EFA_SIM_DEVICES=N` | [`Config::profiles`]`.len()` (≤ [`MAX_DEVICES`]) | 2 (the shape's count with `EFA_SIM_SHAPE`) |
//! | `EFA_SIM_SHAPE=p5.48xlarge\|p5en.48xlarge\|p6-b200.48xlarge\|2nic` | [`Config::shape`] (see [`crate::shape`]): device count, link speed, PCI/NUMA placement in sysfs | none |
//! | `EFA_SIM_PROFILE` | [`Config::profiles`] (inline `key=value,...` list or a file, see [`crate::model::profile`]) | [`Profile::default`] |
//! | `EFA_SIM_READ_OPCODE=send\|rdma_read` | `read_completes_as_send` of every profile | `send` |
//! | `EFA_SIM_ADDR=a.b.c.d` | [`Config::addr`] | 127.0.0.1 |
//! | `EFA_SIM_PORT_BASE` | [`Config::port_base`] | 24000 |
//! | `EFA_SIM_LOCK_DIR` | [`Config::lock_dir`] | `/tmp/efa-sim-<uid>` |
//! | `EFA_SIM_FAULTS` | [`Config::faults`] (see [`crate::transport`]) | none |
//! | `EFA_SIM_NO_PROCESS_VM=1` | [`Config::no_process_vm`] | off |
//! | `EFA_SIM_DIRECT=0` | [`Config::direct`] | on |
//! | `EFA_SIM_TRANSPORT=auto\|udp\|shm` | [`Config::transport`] | `auto` |
//! | `EFA_SIM_TRACE=1` | [`Config::trace`] | off |
//! | `EFA_SIM_LIB` | [`library_override`] (the CLI only) | — |
//! | `EFA_SIM_GPU_LIB` | [`gpu_library_override`] (the CLI's `--gpus` only) | — |
//!
//! Empty values count as unset; surrounding spaces are ignored. Switches take exactly
//! [`SWITCH_SPELLINGS`]. Any other value is an error of one line naming the variable, its
//! value and what is allowed (`EFA_SIM_DIRECT=`yes`: must be 0, 1, off, on, false or
//! true`); the library then reports zero devices (see [`crate::model::Sim`]), the CLI
//! exits 2 with it; nothing falls back to a default silently.

use crate::model::{profile, Profile};
use crate::shape::Shape;
use crate::transport::faults::FaultSpec;
use crate::transport::SLOTS;
use std::ffi::OsString;
use std::net::Ipv4Addr;
use std::path::PathBuf;

/// Most devices `EFA_SIM_DEVICES` may ask for.
pub const MAX_DEVICES: u32 = 64;
/// Devices when `EFA_SIM_DEVICES` is unset.
pub const DEFAULT_DEVICES: u32 = 2;
/// UDP port base when `EFA_SIM_PORT_BASE` is unset. Its 64 × 128 ports (24000..32192)
/// lie below Linux's ephemeral range (32768..60999 by default): a port there can be
/// handed to any process's outgoing socket, and then a device of that slot could not
/// start (it happened, to a TCP client of a test running beside the suite).
pub const DEFAULT_PORT_BASE: u16 = 24000;

/// How processes of one host reach each other (`EFA_SIM_TRANSPORT`, see
/// [`crate::transport`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// Shared-memory inboxes for peers that have one (same address, user and namespaces),
    /// UDP for every other peer.
    #[default]
    Auto,
    /// UDP only (no inboxes).
    Udp,
    /// Shared memory mandatory between processes of one address: a device that cannot
    /// create its inbox does not start, and a peer of this address without a usable
    /// inbox is unreachable. Peers of other addresses still use UDP.
    Shm,
}

/// Everything that configures the software devices of a process.
#[derive(Clone, Debug)]
pub struct Config {
    /// One profile per device `efa_0..efa_{N-1}`.
    pub profiles: Vec<Profile>,
    /// IPv4 address the devices bind to (encoded in their GIDs).
    pub addr: Ipv4Addr,
    /// First UDP port: device `d` of slot `s` uses `port_base + d * SLOTS + s`.
    pub port_base: u16,
    /// Directory of the per-host process-slot locks and owner records.
    pub lock_dir: PathBuf,
    /// Fault injection on every datagram the devices send.
    pub faults: FaultSpec,
    /// Never copy with `process_vm_readv`, as RDMA responder (bulk writes) or as
    /// requester (pulled bulk reads): bulk RDMA moves in datagram chunks, as between hosts.
    pub no_process_vm: bool,
    /// Same-process requests may execute in the posting call (only without faults).
    pub direct: bool,
    /// Shared memory or UDP between processes of one host.
    pub transport: Transport,
    /// Print a line on stderr for every WR that times out.
    pub trace: bool,
    /// The instance shape the devices (and the sysfs tree) model, if any.
    pub shape: Option<&'static Shape>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            profiles: vec![Profile::default(); DEFAULT_DEVICES as usize],
            addr: Ipv4Addr::LOCALHOST,
            port_base: DEFAULT_PORT_BASE,
            lock_dir: default_lock_dir(),
            faults: FaultSpec::default(),
            no_process_vm: false,
            direct: true,
            transport: Transport::Auto,
            trace: false,
            shape: None,
        }
    }
}

/// `/tmp/efa-sim-<uid>`.
fn default_lock_dir() -> PathBuf {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    PathBuf::from(format!("/tmp/efa-sim-{uid}"))
}

impl Config {
    /// Reads every `EFA_SIM_*` variable of this process's environment.
    pub fn from_env() -> Result<Config, String> {
        Config::from_vars(|k| std::env::var(k).ok())
    }

    /// Builds a configuration from `var(name)` (the environment's values, or a test's).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        let get = |k: &str| var(k).filter(|v| !v.trim().is_empty());
        let mut c = Config::default();
        if let Some(v) = get("EFA_SIM_SHAPE") {
            c.shape = Some(Shape::by_name(&v).map_err(|known| bad("EFA_SIM_SHAPE", &v, &known))?);
        }
        let count = match get("EFA_SIM_DEVICES") {
            None => c.shape.map_or(DEFAULT_DEVICES, Shape::devices),
            Some(v) => v
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n <= MAX_DEVICES)
                .ok_or_else(|| {
                    bad(
                        "EFA_SIM_DEVICES",
                        &v,
                        &format!("a number 0..={MAX_DEVICES}"),
                    )
                })?,
        };
        if let Some(shape) = c.shape.filter(|s| s.devices() != count) {
            return Err(format!(
                "EFA_SIM_DEVICES={count} contradicts EFA_SIM_SHAPE={} ({} devices); set one of them",
                shape.name,
                shape.devices()
            ));
        }
        let overrides = match get("EFA_SIM_PROFILE") {
            None => profile::Overrides::default(),
            Some(v) => profile::Overrides::from_env_value(&v)
                .map_err(|m| format!("EFA_SIM_PROFILE: {m}"))?,
        };
        if let Some(max) = overrides.max_device() {
            if max >= count {
                return Err(format!(
                    "EFA_SIM_PROFILE: names efa_{max}, but there are only {count} devices (EFA_SIM_DEVICES)"
                ));
            }
        }
        let mut base = Profile::default();
        if let Some(shape) = c.shape {
            base.link_gbps = shape.link_gbps;
        }
        if let Some(v) = get("EFA_SIM_READ_OPCODE") {
            base.read_completes_as_send = profile::parse_read_opcode(&v)
                .map_err(|_| bad("EFA_SIM_READ_OPCODE", &v, "send or rdma_read"))?;
        }
        c.profiles = (0..count)
            .map(|i| {
                overrides
                    .profile_for(i, &base)
                    .map_err(|m| format!("EFA_SIM_PROFILE: {m}"))
            })
            .collect::<Result<_, _>>()?;
        if let Some(a) = get("EFA_SIM_ADDR") {
            c.addr = a
                .trim()
                .parse::<Ipv4Addr>()
                .ok()
                .filter(|ip| !ip.is_unspecified() && !ip.is_multicast() && !ip.is_broadcast())
                .ok_or_else(|| {
                    bad(
                        "EFA_SIM_ADDR",
                        &a,
                        "an IPv4 address a.b.c.d of this host (not 0.0.0.0, broadcast or multicast)",
                    )
                })?;
        }
        if let Some(p) = get("EFA_SIM_PORT_BASE") {
            let top = 65536 - MAX_DEVICES * SLOTS;
            c.port_base = p
                .trim()
                .parse::<u16>()
                .ok()
                .filter(|b| *b > 0 && u32::from(*b) <= top)
                .ok_or_else(|| {
                    bad(
                        "EFA_SIM_PORT_BASE",
                        &p,
                        &format!(
                            "a port 1..={top} (room for {MAX_DEVICES} x {SLOTS} ports from it)"
                        ),
                    )
                })?;
        }
        if let Some(d) = get("EFA_SIM_LOCK_DIR") {
            if !d.starts_with('/') {
                return Err(bad(
                    "EFA_SIM_LOCK_DIR",
                    &d,
                    "an absolute path (processes with other working directories must find the same one)",
                ));
            }
            c.lock_dir = PathBuf::from(d);
        }
        if let Some(f) = get("EFA_SIM_FAULTS") {
            c.faults = FaultSpec::parse(&f).map_err(|m| format!("EFA_SIM_FAULTS: {m}"))?;
        }
        c.no_process_vm = flag(get("EFA_SIM_NO_PROCESS_VM"), "EFA_SIM_NO_PROCESS_VM", false)?;
        c.direct = flag(get("EFA_SIM_DIRECT"), "EFA_SIM_DIRECT", true)?;
        if let Some(t) = get("EFA_SIM_TRANSPORT") {
            c.transport = match t.trim() {
                "auto" => Transport::Auto,
                "udp" => Transport::Udp,
                "shm" => Transport::Shm,
                _ => return Err(bad("EFA_SIM_TRANSPORT", &t, "auto, udp or shm")),
            };
        }
        c.trace = flag(get("EFA_SIM_TRACE"), "EFA_SIM_TRACE", false)?;
        Ok(c)
    }

    /// Number of devices.
    pub fn devices(&self) -> u32 {
        self.profiles.len() as u32
    }

    /// Whether same-process requests may skip the datagram path: on unless disabled or
    /// faults are injected (faults only act on datagrams).
    pub fn direct_path(&self) -> bool {
        self.direct && !self.faults.active()
    }
}

/// How a switch (`EFA_SIM_DIRECT`, a profile's `dmabuf_mr`, ...) may be spelled.
pub const SWITCH_SPELLINGS: &str = "0, 1, off, on, false or true";

/// A switch value: exactly `0`/`off`/`false` or `1`/`on`/`true` (surrounding spaces
/// ignored); anything else is `None`.
pub fn parse_switch(v: &str) -> Option<bool> {
    match v.trim() {
        "1" | "on" | "true" => Some(true),
        "0" | "off" | "false" => Some(false),
        _ => None,
    }
}

fn flag(v: Option<String>, name: &str, default: bool) -> Result<bool, String> {
    match v {
        None => Ok(default),
        Some(v) => parse_switch(&v).ok_or_else(|| bad(name, &v, SWITCH_SPELLINGS)),
    }
}

/// `value` for an error line: trimmed, control characters (a newline) escaped, so that
/// every configuration error is exactly one line.
pub fn shown(value: &str) -> String {
    value
        .trim()
        .chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

/// The error line of a malformed variable: `NAME=`value`: must be ALLOWED`.
fn bad(name: &str, value: &str, allowed: &str) -> String {
    format!("{name}=`{}`: must be {allowed}", shown(value))
}

/// `EFA_SIM_LIB`: which `libefa_sim.so` the `efa-sim` CLI runs programs on.
pub fn library_override() -> Option<OsString> {
    std::env::var_os(crate::install::OVERRIDE_VAR).filter(|v| !v.is_empty())
}

/// `EFA_SIM_GPU_LIB`: which `libefa_sim_gpu.so` (the software GPU) `efa-sim run --gpus N`
/// puts on the library path as `libcuda.so.1`.
pub fn gpu_library_override() -> Option<OsString> {
    std::env::var_os("EFA_SIM_GPU_LIB").filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(list: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = list
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn defaults_when_nothing_is_set() {
        let c = Config::from_vars(vars(&[])).unwrap();
        assert_eq!(c.devices(), 2);
        assert_eq!(c.addr, Ipv4Addr::LOCALHOST);
        assert_eq!(c.port_base, DEFAULT_PORT_BASE);
        // Every device of every slot below Linux's default ephemeral range.
        let top = DEFAULT_PORT_BASE as u32 + MAX_DEVICES * crate::transport::SLOTS;
        assert!(top <= 32768, "{top}");
        assert!(c.direct_path() && !c.no_process_vm && !c.trace);
        assert_eq!(c.transport, Transport::Auto);
        assert!(c.profiles[0].read_completes_as_send);
    }

    #[test]
    fn every_variable_is_read_and_checked() {
        let c = Config::from_vars(vars(&[
            ("EFA_SIM_DEVICES", "3"),
            ("EFA_SIM_PROFILE", "efa_2.max_rdma_size=7"),
            ("EFA_SIM_READ_OPCODE", "rdma_read"),
            ("EFA_SIM_ADDR", "10.0.0.2"),
            ("EFA_SIM_PORT_BASE", "20000"),
            ("EFA_SIM_LOCK_DIR", "/tmp/x"),
            ("EFA_SIM_FAULTS", "loss=0.5"),
            ("EFA_SIM_NO_PROCESS_VM", "1"),
            ("EFA_SIM_DIRECT", "0"),
            ("EFA_SIM_TRANSPORT", "shm"),
            ("EFA_SIM_TRACE", "1"),
        ]))
        .unwrap();
        assert_eq!(c.devices(), 3);
        assert_eq!(c.profiles[2].max_rdma_size, 7);
        assert_ne!(c.profiles[1].max_rdma_size, 7);
        assert!(!c.profiles[0].read_completes_as_send);
        assert_eq!(c.addr, Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(c.port_base, 20000);
        assert_eq!(c.lock_dir, PathBuf::from("/tmp/x"));
        assert!(c.faults.active() && c.no_process_vm && c.trace && !c.direct);
        assert_eq!(c.transport, Transport::Shm);
        // Faults alone also turn the direct path off.
        let f = Config::from_vars(vars(&[("EFA_SIM_FAULTS", "dup=0.1")])).unwrap();
        assert!(f.direct && !f.direct_path());
    }

    #[test]
    fn malformed_values_name_their_variable() {
        for (k, v) in [
            ("EFA_SIM_DEVICES", "x"),
            ("EFA_SIM_DEVICES", "65"),
            ("EFA_SIM_READ_OPCODE", "maybe"),
            ("EFA_SIM_ADDR", "::1"),
            ("EFA_SIM_PORT_BASE", "65000"),
            ("EFA_SIM_FAULTS", "loss=2"),
            ("EFA_SIM_DIRECT", "sometimes"),
            ("EFA_SIM_TRANSPORT", "carrier-pigeon"),
            ("EFA_SIM_SHAPE", "p4d.24xlarge"),
        ] {
            let e = Config::from_vars(vars(&[(k, v)])).unwrap_err();
            assert!(e.contains(k), "{k}={v}: {e}");
        }
        let e = Config::from_vars(vars(&[("EFA_SIM_PROFILE", "efa_5.max_qp=3")])).unwrap_err();
        assert!(e.contains("efa_5"), "{e}");
    }

    #[test]
    fn a_shape_sets_the_device_count_and_link_speed() {
        let c = Config::from_vars(vars(&[("EFA_SIM_SHAPE", "p5.48xlarge")])).unwrap();
        assert_eq!(c.devices(), 32);
        assert!(c.profiles.iter().all(|p| p.link_gbps == 100));
        let c = Config::from_vars(vars(&[
            ("EFA_SIM_SHAPE", "p6-b200.48xlarge"),
            ("EFA_SIM_DEVICES", "8"),
            ("EFA_SIM_PROFILE", "efa_7.link_gbps=200"),
        ]))
        .unwrap();
        assert_eq!(c.shape.unwrap().name, "p6-b200.48xlarge");
        assert_eq!(
            (c.profiles[0].link_gbps, c.profiles[7].link_gbps),
            (400, 200)
        );
        let e = Config::from_vars(vars(&[("EFA_SIM_SHAPE", "2nic"), ("EFA_SIM_DEVICES", "3")]))
            .unwrap_err();
        assert!(e.contains("EFA_SIM_SHAPE=2nic"), "{e}");
        let e = Config::from_vars(vars(&[("EFA_SIM_SHAPE", "p4d")])).unwrap_err();
        assert!(e.contains("p5en.48xlarge") && e.contains("2nic"), "{e}");
    }
}
