//! Reading the topology from sysfs (see the module documentation for the files).

use super::TopologyErrorKind as Kind;
use super::{CpuList, NicTopology, NumaNode, PciAddress, PciLocation, TopologyError};
use std::path::{Path, PathBuf};

/// Name of the EFA kernel driver (`<ibdev>/device/driver` points at it).
const EFA_DRIVER: &str = "efa";

/// The sysfs root rdma-core uses: `$SYSFS_PATH` without trailing slashes (ignored when
/// running set-uid), else `/sys` (`ibv_get_sysfs_path`).
pub fn sysfs_root() -> PathBuf {
    // SAFETY: getuid and geteuid only read the process credentials.
    let same_user = unsafe { libc::getuid() == libc::geteuid() };
    let env = same_user
        .then(|| std::env::var("SYSFS_PATH").ok())
        .flatten()
        .filter(|v| !v.is_empty());
    match env {
        Some(v) => {
            let trimmed = v.trim_end_matches('/');
            PathBuf::from(if trimmed.is_empty() { "/" } else { trimmed })
        }
        None => PathBuf::from("/sys"),
    }
}

fn error(path: &Path, kind: Kind) -> TopologyError {
    TopologyError {
        path: path.to_path_buf(),
        kind,
    }
}

fn io_error(path: &Path, e: std::io::Error) -> TopologyError {
    let kind = match e.kind() {
        std::io::ErrorKind::NotFound => Kind::Missing,
        k => Kind::Unreadable(k),
    };
    error(path, kind)
}

/// The content of a sysfs attribute, trimmed.
fn read(path: &Path) -> Result<String, TopologyError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| io_error(path, e))
}

fn malformed(path: &Path, content: &str, expected: &'static str) -> TopologyError {
    let mut content = content.to_string();
    if content.len() > 64 {
        let mut end = 64;
        while !content.is_char_boundary(end) {
            end -= 1;
        }
        content.truncate(end);
    }
    error(path, Kind::Malformed { content, expected })
}

/// Parses the attribute at `path` with `parse`, or names what it should have been.
fn parse<T>(
    path: &Path,
    expected: &'static str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<T, TopologyError> {
    let s = read(path)?;
    parse(&s).ok_or_else(|| malformed(path, &s, expected))
}

/// `numa_node` of a PCI function: a node number, or -1 for none.
fn numa_node(dir: &Path) -> Result<Option<u32>, TopologyError> {
    parse(
        &dir.join("numa_node"),
        "a NUMA node number or -1",
        |s| match s.parse::<i64>().ok()? {
            -1 => Some(None),
            n => u32::try_from(n).ok().map(Some),
        },
    )
}

/// The PCI functions of a canonical sysfs device path, host bridge side first.
fn pci_path(dir: &Path) -> Vec<PciAddress> {
    dir.components()
        .filter_map(|c| c.as_os_str().to_str()?.parse().ok())
        .collect()
}

/// Resolves a link to a PCI function directory, and its PCI path.
fn pci_function(link: &Path) -> Result<(PathBuf, Vec<PciAddress>), TopologyError> {
    let dir = std::fs::canonicalize(link).map_err(|e| io_error(link, e))?;
    let path = pci_path(&dir);
    let named = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if named.parse::<PciAddress>().is_err() {
        return Err(malformed(
            link,
            &dir.to_string_lossy(),
            "a link to a PCI function directory (DDDD:BB:DD.F)",
        ));
    }
    Ok((dir, path))
}

/// The EFA devices under `root/class/infiniband` (devices of other drivers are skipped).
pub(super) fn devices(root: &Path) -> Result<Vec<NicTopology>, TopologyError> {
    let class = root.join("class/infiniband");
    let entries = match std::fs::read_dir(&class) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(&class, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error(&class, e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let ib = class.join(&name);
        let link = ib.join("device");
        // Software devices (rxe, siw) may have no parent device: not EFA, which is PCI.
        if std::fs::symlink_metadata(&link).is_err() {
            continue;
        }
        // A link that leads nowhere is broken sysfs; only devices bound to the efa
        // driver are EFA devices, and those must be PCI functions.
        let parent = std::fs::canonicalize(&link).map_err(|e| io_error(&link, e))?;
        let is_efa = std::fs::read_link(parent.join("driver"))
            .ok()
            .is_some_and(|t| t.file_name().is_some_and(|n| n == EFA_DRIVER));
        if is_efa {
            let (dir, pci_path) = pci_function(&link)?;
            out.push(device(&ib, name, dir, pci_path)?);
        }
    }
    Ok(out)
}

/// One device from its `class/infiniband/<name>` directory and its PCI function `dir`.
fn device(
    ib: &Path,
    name: String,
    dir: PathBuf,
    pci_path: Vec<PciAddress>,
) -> Result<NicTopology, TopologyError> {
    let pci = *pci_path
        .last()
        .expect("pci_function checked the last component");
    let local_cpus = parse(&dir.join("local_cpulist"), "a CPU list", |s| s.parse().ok())?;
    let rate = ib.join("ports/1/rate");
    // "100 Gb/sec (4X EDR)"; "2.5 Gb/sec ..." counts as 2.
    let link_gbps = parse(&rate, "a rate in Gb/sec", |s| {
        let (num, unit) = s.split_once(' ')?;
        unit.starts_with("Gb/sec")
            .then(|| num.split('.').next()?.parse().ok())
            .flatten()
    })?;
    Ok(NicTopology {
        name,
        pci,
        pci_path,
        numa_node: numa_node(&dir)?,
        local_cpus,
        link_gbps,
        counters: counters(ib)?,
    })
}

/// Port 1's `hw_counters` of the device at `ib` (none when the directory is absent),
/// sorted by name; `lifespan` is a setting, not a counter.
pub(super) fn counters(ib: &Path) -> Result<Vec<(String, u64)>, TopologyError> {
    let dir = ib.join("ports/1/hw_counters");
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && ib.exists() => return Ok(Vec::new()),
        Err(e) => return Err(io_error(&dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error(&dir, e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if name == "lifespan" || name.starts_with('.') {
            continue;
        }
        let value = parse(&entry.path(), "a counter value", |s| s.parse().ok())?;
        out.push((name, value));
    }
    out.sort();
    Ok(out)
}

/// The NUMA nodes under `root/devices/system/node` (none when the directory is absent).
pub(super) fn numa_nodes(root: &Path) -> Result<Vec<NumaNode>, TopologyError> {
    let dir = root.join("devices/system/node");
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(&dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error(&dir, e))?;
        let name = entry.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_prefix("node"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let cpus: CpuList = parse(&entry.path().join("cpulist"), "a CPU list", |s| {
            s.parse().ok()
        })?;
        out.push(NumaNode { id, cpus });
    }
    Ok(out)
}

/// Where PCI function `pci` sits (`root/bus/pci/devices/<pci>`), if sysfs shows it.
pub(super) fn locate(root: &Path, pci: PciAddress) -> Result<Option<PciLocation>, TopologyError> {
    let link = root.join("bus/pci/devices").join(pci.to_string());
    if std::fs::symlink_metadata(&link).is_err() {
        return Ok(None);
    }
    let (dir, pci_path) = pci_function(&link)?;
    Ok(Some(PciLocation {
        pci_path,
        numa_node: numa_node(&dir)?,
    }))
}
