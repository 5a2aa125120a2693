//! Staging memory on a NIC's NUMA node (`NumaBuffer::for_nic`): for a p5.48xlarge device on
//! NUMA node 1 (its topology read from efa-sim's sysfs tree of the shape), allocated,
//! registered on efa-sim and RDMA-written, every byte checked. The placement is checked
//! against the real kernel's nodes (`/sys/devices/system/node`): this machine may have
//! one node only, so node 1 may not exist; then the policy must be reported refused and
//! the memory still usable.

mod common;
use std::path::Path;
use std::time::Duration;

use common::*;
use efa_sim::config::Config;
use efa_sim::model::Sim;
use efa_sim::shape::P5;
use efa_sim::sysfs::{self, Tree};
use efa_typestate::*;

/// Whether the running kernel has NUMA node `n` with memory.
fn kernel_has_node(n: u32) -> bool {
    let has = std::fs::read_to_string("/sys/devices/system/node/has_memory").unwrap_or_default();
    has.trim().parse::<CpuList>().is_ok_and(|l| l.contains(n))
        || (n == 0 && !Path::new("/sys/devices/system/node").exists())
}

#[test]
fn staging_memory_for_a_p5_nic_on_node_1_takes_an_rdma_write() {
    let cache = std::env::temp_dir().join(format!("efa-numa-p5-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let config =
        Config::from_vars(|k| (k == "EFA_SIM_SHAPE").then(|| P5.name.to_string())).unwrap();
    let tree = Tree::for_devices(Sim::from_config(config).devices(), Some(&P5));
    let topo = Topology::from_sysfs(&sysfs::prepare(&cache, &tree).unwrap()).unwrap();
    std::fs::remove_dir_all(&cache).unwrap();
    let nic = topo
        .devices
        .iter()
        .find(|d| d.numa_node == Some(1))
        .expect("a p5 has NICs on node 1");

    const LEN: usize = 3 * 4096 + 100;
    let buf = NumaBuffer::for_nic(nic, LEN).unwrap();
    let placement = buf.placement();
    assert_eq!(placement.requested, Some(1), "asked for the NIC's node");
    assert_eq!(buf.as_slice().as_ptr() as usize % 4096, 0, "page-aligned");
    if !kernel_has_node(1) {
        // One-node machine: the kernel refuses a policy for node 1 (EINVAL).
        assert_eq!(placement.bind_errno, Some(libc::EINVAL), "{placement:?}");
        assert!(!placement.honoured());
    } else if placement.bind_errno.is_none() {
        assert!(placement.honoured(), "{placement:?}");
    }
    eprintln!("placement for {}: {placement:?}", nic.name);
    // Node 0, which every Linux machine has: honoured where mbind is allowed at all.
    let on0 = NumaBuffer::new(LEN, Some(0)).unwrap().placement();
    eprintln!("placement on node 0: {on0:?}");
    assert!(kernel_has_node(0));
    assert!(
        on0.honoured() || matches!(on0.bind_errno, Some(libc::EPERM | libc::ENOSYS)),
        "{on0:?}"
    );

    // Registered as host memory and written over the (default) efa-sim device.
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A);
    let b = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let target = pd.register_remote_write(buf, AccessFlags::empty()).unwrap();
    let pattern: Vec<u8> = (0..LEN - 50).map(|i| (i * 7 % 253) as u8 + 1).collect();
    let src = pd.register(pattern.clone(), AccessFlags::empty()).unwrap();
    a.write_all(
        &cq,
        &to_b,
        &src,
        target.remote().slice(50, pattern.len() as u64).unwrap(),
        Transfer::new(Duration::from_secs(20)),
        |c| panic!("unexpected {c:?}"),
    )
    .unwrap();
    let got = target.to_vec();
    assert!(got[..50].iter().all(|&x| x == 0), "before the write");
    assert!(got[50..] == pattern[..], "every byte arrived");

    // Deregistered, it is the same buffer with the same report.
    let buf = target.close().map_err(|(_, e)| e).unwrap();
    assert_eq!(buf.placement(), placement);
    assert_eq!(&buf.as_slice()[50..], &pattern[..]);
}

#[test]
fn a_nic_without_a_node_gets_memory_without_a_policy() {
    let nic = NicTopology {
        name: "efa_9".into(),
        pci: PciAddress::new(0, 0x20, 0),
        pci_path: vec![PciAddress::new(0, 0x20, 0)],
        numa_node: None,
        local_cpus: CpuList::new(vec![]),
        link_gbps: 100,
        counters: vec![],
    };
    let buf = NumaBuffer::for_nic(&nic, 10).unwrap();
    assert_eq!(buf.placement().requested, None);
    assert_eq!(buf.placement().bind_errno, None);
    assert!(!buf.placement().honoured());
    assert_eq!(buf.as_slice(), &[0u8; 10]);
    assert!(matches!(
        NumaBuffer::for_nic(&nic, 0),
        Err(NumaError::Empty)
    ));
}
