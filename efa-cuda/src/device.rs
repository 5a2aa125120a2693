//! CUDA devices and their attributes.

use core::ffi::c_char;

use crate::driver::Driver;
use crate::error::{Error, Result};
use crate::sys::{attr, CUdevice};

/// One CUDA device of a [`Driver`].
#[derive(Clone, Copy, Debug)]
pub struct Device {
    driver: &'static Driver,
    ordinal: i32,
    raw: CUdevice,
}

impl Driver {
    /// Device `ordinal` (`cuInit` first, then `cuDeviceGet`).
    pub fn device(&'static self, ordinal: i32) -> Result<Device> {
        let count = self.device_count()?;
        if count == 0 {
            return Err(Error::NoDevice);
        }
        if ordinal < 0 || ordinal >= count {
            return Err(Error::InvalidDevice { ordinal, count });
        }
        let f = self.api().device_get()?;
        let mut raw = 0;
        // SAFETY: valid out pointer; ordinal checked against the count.
        self.check("cuDeviceGet", unsafe { f(&mut raw, ordinal) })?;
        Ok(Device {
            driver: self,
            ordinal,
            raw,
        })
    }
}

impl Device {
    /// The process-wide driver's device `ordinal` ([`Driver::get`]).
    pub fn get(ordinal: i32) -> Result<Device> {
        Driver::get()?.device(ordinal)
    }

    /// The driver this device belongs to.
    pub fn driver(&self) -> &'static Driver {
        self.driver
    }

    /// Its ordinal.
    pub fn ordinal(&self) -> i32 {
        self.ordinal
    }

    pub(crate) fn raw(&self) -> CUdevice {
        self.raw
    }

    /// `cuDeviceGetName`.
    pub fn name(&self) -> Result<String> {
        let f = self.driver.api().device_get_name()?;
        let mut buf = [0 as c_char; 256];
        // SAFETY: the buffer is writable for its length; the driver NUL-terminates.
        let rc = unsafe { f(buf.as_mut_ptr(), buf.len() as i32, self.raw) };
        self.driver.check("cuDeviceGetName", rc)?;
        let bytes: Vec<u8> = buf
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// `cuDeviceGetAttribute` for a `CUdevice_attribute` value (see [`crate::sys::attr`]).
    pub fn attribute(&self, attribute: i32) -> Result<i32> {
        let f = self.driver.api().device_get_attribute()?;
        let mut v = 0;
        // SAFETY: valid out pointer.
        let rc = unsafe { f(&mut v, attribute, self.raw) };
        self.driver.check("cuDeviceGetAttribute", rc)?;
        Ok(v)
    }

    /// Its PCI address (function 0), from the PCI domain, bus and device attributes (the
    /// parts of `cuDeviceGetPCIBusId`'s `DDDD:BB:DD.F`).
    pub fn pci_address(&self) -> Result<efa_typestate::PciAddress> {
        let (domain, bus, device) = self.pci_location()?;
        Ok(efa_typestate::PciAddress::new(
            domain as u16,
            bus as u8,
            device as u8,
        ))
    }

    /// PCI (domain, bus, device), to match the device with a NIC on the same switch.
    pub fn pci_location(&self) -> Result<(i32, i32, i32)> {
        Ok((
            self.attribute(attr::PCI_DOMAIN_ID)?,
            self.attribute(attr::PCI_BUS_ID)?,
            self.attribute(attr::PCI_DEVICE_ID)?,
        ))
    }

    /// Whether the driver can export this device's memory as dma-buf: it has
    /// `cuMemGetHandleForAddressRange` and reports `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`.
    pub fn dmabuf_supported(&self) -> Result<bool> {
        if self.driver.api().mem_get_handle_for_address_range.is_none() {
            return Ok(false);
        }
        // Drivers older than 11.7 do not know the attribute: treat "invalid" as "no".
        Ok(self.attribute(attr::DMA_BUF_SUPPORTED).unwrap_or(0) == 1)
    }
}
