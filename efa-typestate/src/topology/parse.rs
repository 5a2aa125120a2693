//! The text formats of sysfs that topology reads: PCI addresses and CPU lists.

use core::fmt;
use core::str::FromStr;

/// A PCI function address, `DDDD:BB:DD.F` as sysfs names PCI devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    /// PCI domain (segment).
    pub domain: u16,
    /// Bus number.
    pub bus: u8,
    /// Device (slot) number, 0..32.
    pub device: u8,
    /// Function number, 0..8.
    pub function: u8,
}

impl PciAddress {
    /// The address from its parts (function 0: GPUs and EFA devices are function 0 of
    /// their slot).
    pub const fn new(domain: u16, bus: u8, device: u8) -> PciAddress {
        PciAddress {
            domain,
            bus,
            device,
            function: 0,
        }
    }
}

impl FromStr for PciAddress {
    type Err = ();

    /// `DDDD:BB:DD.F` in hex (the form of sysfs names and of `cuDeviceGetPCIBusId`, which
    /// may use upper case and a longer domain: `00000000:53:00.0`).
    fn from_str(s: &str) -> Result<PciAddress, ()> {
        let (domain, rest) = s.split_once(':').ok_or(())?;
        let (bus, rest) = rest.split_once(':').ok_or(())?;
        let (device, function) = rest.split_once('.').ok_or(())?;
        let hex = |x: &str, max: u32| {
            let ok = !x.is_empty() && x.bytes().all(|b| b.is_ascii_hexdigit());
            ok.then(|| u32::from_str_radix(x, 16).ok())
                .flatten()
                .filter(|v| *v <= max)
                .ok_or(())
        };
        Ok(PciAddress {
            domain: hex(domain, 0xffff)? as u16,
            bus: hex(bus, 0xff)? as u8,
            device: hex(device, 0x1f)? as u8,
            function: hex(function, 7)? as u8,
        })
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// A set of logical CPUs, read from the kernel's list format (`0-47,96-143`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CpuList {
    /// Sorted, without duplicates.
    cpus: Vec<u32>,
}

/// Most CPUs a list may name (Linux's `NR_CPUS` is at most 8192).
const MAX_CPUS: u32 = 8192;

impl CpuList {
    /// The set of `cpus` (sorted and deduplicated here).
    pub fn new(mut cpus: Vec<u32>) -> CpuList {
        cpus.sort_unstable();
        cpus.dedup();
        CpuList { cpus }
    }

    /// CPUs `first..=last`.
    pub fn range(first: u32, last: u32) -> CpuList {
        CpuList::new((first..=last).collect())
    }

    /// The CPUs, in increasing order.
    pub fn cpus(&self) -> &[u32] {
        &self.cpus
    }

    /// Whether `cpu` is in the set.
    pub fn contains(&self, cpu: u32) -> bool {
        self.cpus.binary_search(&cpu).is_ok()
    }

    /// Number of CPUs.
    pub fn len(&self) -> usize {
        self.cpus.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.cpus.is_empty()
    }
}

impl FromStr for CpuList {
    type Err = ();

    /// The kernel's list format: comma-separated CPUs or ranges `a-b`; an empty list is
    /// the empty set.
    fn from_str(s: &str) -> Result<CpuList, ()> {
        let s = s.trim();
        let mut cpus = Vec::new();
        if s.is_empty() {
            return Ok(CpuList::default());
        }
        for part in s.split(',') {
            let num = |x: &str| {
                x.parse::<u32>()
                    .ok()
                    .filter(|v| *v < MAX_CPUS && !x.starts_with('+'))
                    .ok_or(())
            };
            let (first, last) = match part.split_once('-') {
                Some((a, b)) => (num(a)?, num(b)?),
                None => (num(part)?, num(part)?),
            };
            if first > last {
                return Err(());
            }
            cpus.extend(first..=last);
        }
        Ok(CpuList::new(cpus))
    }
}

impl fmt::Display for CpuList {
    /// The kernel's list format, ranges merged (`0-3,8`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut i = 0;
        let mut first = true;
        while i < self.cpus.len() {
            let start = self.cpus[i];
            let mut end = start;
            while i + 1 < self.cpus.len() && self.cpus[i + 1] == end + 1 {
                i += 1;
                end += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addresses_parse_and_print_as_sysfs_names_them() {
        let a: PciAddress = "0000:53:00.0".parse().unwrap();
        assert_eq!(a, PciAddress::new(0, 0x53, 0));
        assert_eq!(a.to_string(), "0000:53:00.0");
        let long: PciAddress = "00000000:CA:1F.7".parse().unwrap();
        assert_eq!((long.bus, long.device, long.function), (0xca, 0x1f, 7));
        for bad in [
            "",
            "0000:53:00",
            "0000:53:20.0",
            "0000:153:00.0",
            "x:53:00.0",
            "0000:5 :00.0",
        ] {
            assert!(bad.parse::<PciAddress>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn cpu_lists_parse_the_kernel_format() {
        let l: CpuList = "0-47,96-143\n".parse().unwrap();
        assert_eq!(l.len(), 96);
        assert!(l.contains(47) && l.contains(96) && !l.contains(48));
        assert_eq!(l.to_string(), "0-47,96-143");
        assert_eq!("".parse::<CpuList>().unwrap().len(), 0);
        assert_eq!("3,1,2".parse::<CpuList>().unwrap().to_string(), "1-3");
        for bad in ["a", "1-", "5-2", "1,,2", "-1", "99999"] {
            assert!(bad.parse::<CpuList>().is_err(), "{bad:?}");
        }
    }
}
