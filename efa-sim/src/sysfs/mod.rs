//! The sysfs view of the software devices.
//!
//! On a real machine rdma-core finds devices in sysfs and fills every `ibv_device`'s
//! `dev_path` / `ibdev_path` with paths below the sysfs root (`$SYSFS_PATH`, else
//! `/sys`). Consumers read more there: libfabric's EFA provider resolves
//! `<ibdev_path>/device` (a PCI-DBDF-named directory), `<ibdev_path>/device/driver`
//! (a directory named `efa`) and reads `$SYSFS_PATH/class/infiniband_verbs/abi_version`
//! (model §6.2); without them it reports no EFA device.
//!
//! A software device has no kernel behind it, so [`Tree`] describes the entries the EFA
//! kernel driver and the RDMA core would show for the model's devices, [`prepare`]
//! writes them once per distinct content under a cache directory, and `efa-sim run`
//! points `SYSFS_PATH` at the result. The library builds its device paths with
//! [`dev_path`] / [`ibdev_path`], which follow `SYSFS_PATH` exactly like rdma-core's
//! `ibv_get_sysfs_path`.

use crate::model::Device;
use crate::shape::Shape;
use std::collections::hash_map::DefaultHasher;
use std::ffi::{CStr, CString};
use std::hash::{Hash, Hasher};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The sysfs root when `SYSFS_PATH` is unset.
pub const DEFAULT_ROOT: &str = "/sys";
/// Longest root rdma-core keeps from `SYSFS_PATH` (`IBV_SYSFS_PATH_MAX`).
pub const ROOT_MAX: usize = 256;
/// `class/infiniband_verbs/abi_version`: the kernel's `IB_USER_VERBS_ABI_VERSION`.
pub const UVERBS_ABI_VERSION: u32 = 6;
/// `class/infiniband_verbs/uverbsN/abi_version`: the EFA driver's `EFA_UVERBS_ABI_VERSION`.
pub const EFA_UVERBS_ABI_VERSION: u32 = 1;
/// Character-device major of `/dev/infiniband/uverbsN` (`IB_UVERBS_MAJOR`).
pub const UVERBS_MAJOR: u32 = 231;
/// First minor of the uverbs devices (`IB_UVERBS_BASE_MINOR`).
pub const UVERBS_BASE_MINOR: u32 = 192;
/// PCI class of an EFA function: network controller, Ethernet (0x0200), prog-if 0.
pub const EFA_PCI_CLASS: u32 = 0x020000;
/// Name of the EFA kernel driver (the last component of `<ibdev_path>/device/driver`).
pub const DRIVER_NAME: &str = "efa";
pub mod counters;
mod topology;

/// Marker file written last: a directory without it is incomplete and never used.
const COMPLETE_MARKER: &str = ".efa-sim-complete";

/// The sysfs root this process uses: `SYSFS_PATH` without trailing slashes (only when
/// not running set-uid, and cut to [`ROOT_MAX`] bytes), else `/sys` — the rules of
/// rdma-core's `ibv_get_sysfs_path`. Read once, like rdma-core.
pub fn root() -> &'static CStr {
    static ROOT: OnceLock<CString> = OnceLock::new();
    ROOT.get_or_init(|| {
        // SAFETY: getuid/geteuid only read the process credentials.
        let same_user = unsafe { libc::getuid() == libc::geteuid() };
        let env = same_user
            .then(|| std::env::var_os("SYSFS_PATH"))
            .flatten()
            .map(std::os::unix::ffi::OsStringExt::into_vec);
        match env {
            Some(mut bytes) => {
                // strndup stops at the first NUL; the environment has none.
                bytes.truncate(ROOT_MAX);
                while bytes.last() == Some(&b'/') {
                    bytes.pop();
                }
                CString::new(bytes).unwrap_or_else(|_| CString::from(c"/sys"))
            }
            None => CString::from(c"/sys"),
        }
    })
}

fn root_str() -> String {
    root().to_string_lossy().into_owned()
}

/// `ibv_device.dev_path` of device `index`: `<root>/class/infiniband_verbs/uverbs<index>`.
pub fn dev_path(index: u32) -> String {
    format!("{}/class/infiniband_verbs/uverbs{index}", root_str())
}

/// `ibv_device.ibdev_path` of device `name`: `<root>/class/infiniband/<name>`.
pub fn ibdev_path(name: &str) -> String {
    format!("{}/class/infiniband/{name}", root_str())
}

/// The PCI address (`DDDD:BB:DD.F`) a device of this index shows in sysfs without a
/// shape. Real EFA functions sit on bus 0 from slot 6 on; later indexes continue on the
/// next buses.
pub fn pci_address(index: u32) -> String {
    let slot = 6 + index;
    format!("0000:{:02x}:{:02x}.0", slot / 32, slot % 32)
}

/// One entry of a sysfs tree, relative to its root.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Entry {
    /// A regular file and its content.
    File {
        /// Path relative to the root.
        path: String,
        /// Content (sysfs attributes end with a newline).
        content: String,
    },
    /// A symbolic link with a relative target, as sysfs uses.
    Link {
        /// Path relative to the root.
        path: String,
        /// Link target, relative to the link's directory.
        target: String,
    },
}

impl Entry {
    fn file(path: impl Into<String>, content: impl std::fmt::Display) -> Entry {
        Entry::File {
            path: path.into(),
            content: format!("{content}\n"),
        }
    }

    fn link(path: impl Into<String>, target: impl Into<String>) -> Entry {
        Entry::Link {
            path: path.into(),
            target: target.into(),
        }
    }

    /// A link at `path` to `target` (both relative to the root), written relative to
    /// the link's directory as sysfs writes its links.
    fn link_to(path: impl Into<String>, target: impl AsRef<str>) -> Entry {
        let path = path.into();
        let depth = path.matches('/').count();
        let target = format!("{}{}", "../".repeat(depth), target.as_ref());
        Entry::link(path, target)
    }

    /// The entry's path relative to the tree root.
    pub fn path(&self) -> &str {
        match self {
            Entry::File { path, .. } | Entry::Link { path, .. } => path,
        }
    }
}

/// The sysfs entries for a set of devices.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tree {
    entries: Vec<Entry>,
}

/// `xxxx:xxxx:xxxx:xxxx`, how the RDMA core prints GUIDs.
fn guid_string(guid: u64) -> String {
    let b = guid.to_be_bytes();
    b.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// Eight groups of four hex digits, how the RDMA core prints GIDs (`%pI6`).
fn gid_string(gid: &[u8; 16]) -> String {
    gid.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

impl Tree {
    /// The entries the kernel (RDMA core + EFA driver) shows for `devices`, placed as
    /// `shape` places them (PCIe switches, NUMA nodes, GPUs; see [`crate::shape`]) or,
    /// without a shape, on bus 0 with no NUMA node.
    pub fn for_devices(devices: &[std::sync::Arc<Device>], shape: Option<&Shape>) -> Tree {
        let mut e = vec![Entry::file(
            "class/infiniband_verbs/abi_version",
            UVERBS_ABI_VERSION,
        )];
        let place = topology::Placement::new(shape);
        place.system_entries(&mut e);
        for d in devices {
            let p = &d.profile;
            let (pci, dev) = place.device_dir(d.index);
            let ib = format!("{dev}/infiniband/{}", d.name);
            let uverbs_name = format!("uverbs{}", d.index);
            let uverbs = format!("{dev}/infiniband_verbs/{uverbs_name}");

            // The PCI function, bound to the efa driver.
            place.function_entries(&mut e, &dev, d.index, (p.vendor_id, p.vendor_part_id));
            e.push(Entry::file(
                format!("{dev}/class"),
                format!("0x{EFA_PCI_CLASS:06x}"),
            ));
            e.push(Entry::file(
                format!("{dev}/uevent"),
                format!(
                    "DRIVER={DRIVER_NAME}\nPCI_CLASS={EFA_PCI_CLASS:X}\nPCI_ID={:04X}:{:04X}\nPCI_SLOT_NAME={pci}",
                    p.vendor_id, p.vendor_part_id
                ),
            ));
            e.push(Entry::link_to(
                format!("{dev}/driver"),
                format!("bus/pci/drivers/{DRIVER_NAME}"),
            ));
            e.push(Entry::link_to(
                format!("bus/pci/drivers/{DRIVER_NAME}/{pci}"),
                &dev,
            ));

            // The RDMA device.
            e.push(Entry::link_to(format!("{ib}/device"), &dev));
            e.push(Entry::file(format!("{ib}/node_type"), "7: unspecified"));
            e.push(Entry::file(
                format!("{ib}/node_guid"),
                guid_string(p.node_guid),
            ));
            e.push(Entry::file(
                format!("{ib}/sys_image_guid"),
                guid_string(p.node_guid),
            ));
            e.push(Entry::file(format!("{ib}/fw_ver"), &p.fw_ver));
            e.push(Entry::file(
                format!("{ib}/hw_rev"),
                format!("0x{:x}", p.hw_ver),
            ));
            let port = format!("{ib}/ports/1");
            e.push(Entry::file(format!("{port}/state"), "4: ACTIVE"));
            e.push(Entry::file(format!("{port}/phys_state"), "5: LinkUp"));
            e.push(Entry::file(
                format!("{port}/rate"),
                topology::rate(p.link_gbps),
            ));
            e.push(Entry::file(format!("{port}/lid"), "0x0"));
            e.push(Entry::file(format!("{port}/sm_lid"), "0x0"));
            e.push(Entry::file(format!("{port}/link_layer"), "Unknown"));
            e.push(Entry::file(format!("{port}/gids/0"), gid_string(&d.gid)));
            e.push(Entry::file(
                format!("{port}/gid_attrs/types/0"),
                "IB/RoCE v1",
            ));
            e.push(Entry::file(format!("{port}/pkeys/0"), "0xffff"));
            counters::entries(&mut e, &ib);
            e.push(Entry::link_to(format!("class/infiniband/{}", d.name), &ib));

            // Its uverbs character device.
            e.push(Entry::link_to(format!("{uverbs}/device"), &dev));
            e.push(Entry::file(format!("{uverbs}/ibdev"), &d.name));
            e.push(Entry::file(
                format!("{uverbs}/abi_version"),
                EFA_UVERBS_ABI_VERSION,
            ));
            e.push(Entry::file(
                format!("{uverbs}/dev"),
                format!("{UVERBS_MAJOR}:{}", UVERBS_BASE_MINOR + d.index),
            ));
            e.push(Entry::link_to(
                format!("class/infiniband_verbs/{uverbs_name}"),
                &uverbs,
            ));
        }
        Tree { entries: e }
    }

    /// The entries, in creation order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// A stable name for this content, used as the cache directory name.
    pub fn content_key(&self) -> String {
        let mut h = DefaultHasher::new();
        self.hash(&mut h);
        format!("sysfs-{:016x}", h.finish())
    }

    /// Writes the entries below `dir` (created; must not hold other entries of the
    /// same names).
    pub fn write_to(&self, dir: &Path) -> io::Result<()> {
        for entry in &self.entries {
            let path = dir.join(entry.path());
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            match entry {
                Entry::File { content, .. } => std::fs::write(&path, content)?,
                Entry::Link { target, .. } => std::os::unix::fs::symlink(target, &path)?,
            }
        }
        Ok(())
    }
}

/// Makes sure `cache/<content key>` holds `tree` and returns that directory.
///
/// An existing complete copy is reused; otherwise the tree is written to a private
/// directory and renamed into place, so concurrent callers never see a partial tree.
pub fn prepare(cache: &Path, tree: &Tree) -> io::Result<PathBuf> {
    let key = tree.content_key();
    let dir = cache.join(&key);
    if dir.join(COMPLETE_MARKER).is_file() {
        return Ok(dir);
    }
    std::fs::create_dir_all(cache)?;
    // Unique per call: threads of one process may prepare concurrently.
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let staging = cache.join(format!(".{key}.{}.{seq}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir(&staging)?;
    let written = tree
        .write_to(&staging)
        .and_then(|()| std::fs::write(staging.join(COMPLETE_MARKER), b""));
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    if dir.exists() && !dir.join(COMPLETE_MARKER).is_file() {
        // A leftover from an interrupted writer that could not rename: replace it.
        let _ = std::fs::remove_dir_all(&dir);
    }
    match std::fs::rename(&staging, &dir) {
        Ok(()) => Ok(dir),
        // Another process installed the same content first.
        Err(_) if dir.join(COMPLETE_MARKER).is_file() => {
            let _ = std::fs::remove_dir_all(&staging);
            Ok(dir)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Sim;

    fn tree(n: &str) -> Tree {
        Tree::for_devices(&Sim::build(Some(n), None, None, None).unwrap(), None)
    }

    #[test]
    fn pci_addresses_are_distinct_and_parse_as_dbdf() {
        let all: Vec<String> = (0..crate::model::MAX_DEVICES).map(pci_address).collect();
        let mut unique = all.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), all.len());
        assert_eq!(all[0], "0000:00:06.0");
        for a in &all {
            let parts: Vec<&str> = a.split([':', '.']).collect();
            assert_eq!(parts.len(), 4, "{a}");
            assert!(u8::from_str_radix(parts[2], 16).unwrap() < 32, "{a}");
        }
    }

    #[test]
    fn written_tree_resolves_like_the_kernel_s() {
        let base = std::env::temp_dir().join(format!("efa-sim-sysfs-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let t = tree("2");
        let dir = prepare(&base, &t).unwrap();
        // Same content → same directory, reused.
        assert_eq!(prepare(&base, &t).unwrap(), dir);
        let read = |p: &str| std::fs::read_to_string(dir.join(p)).unwrap();
        assert_eq!(read("class/infiniband_verbs/abi_version"), "6\n");
        for i in 0..2 {
            let ib = dir.join(format!("class/infiniband/efa_{i}"));
            let pci = std::fs::canonicalize(ib.join("device")).unwrap();
            assert_eq!(
                pci.file_name().unwrap().to_str().unwrap(),
                pci_address(i),
                "device link of efa_{i}"
            );
            let drv = std::fs::canonicalize(ib.join("device/driver")).unwrap();
            assert_eq!(drv.file_name().unwrap(), "efa");
            assert!(drv.join(pci_address(i)).is_dir());
            assert_eq!(
                read(&format!("class/infiniband/efa_{i}/device/vendor")),
                "0x1d0f\n"
            );
            assert_eq!(
                read(&format!("class/infiniband_verbs/uverbs{i}/ibdev")),
                format!("efa_{i}\n")
            );
            let uv =
                std::fs::canonicalize(dir.join(format!("class/infiniband_verbs/uverbs{i}/device")))
                    .unwrap();
            assert_eq!(uv, pci);
        }
        assert!(!dir.join("class/infiniband/efa_2").exists());
        // Different content → a different directory.
        assert_ne!(tree("3").content_key(), t.content_key());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
