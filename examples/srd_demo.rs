//! Main job (temporary form): lists the EFA devices and their attributes.
//! Replaced by SRD traffic once the safe API lands.
use efa::sys::verbs::*;
use std::ffi::CStr;

fn main() {
    let mut n = 0;
    // SAFETY: ibv_get_device_list writes the count and returns a NULL-terminated
    // array (or NULL) that we free below.
    let list = unsafe { ibv_get_device_list(&mut n) };
    if list.is_null() || n == 0 {
        eprintln!("no RDMA devices found");
        std::process::exit(1);
    }
    for i in 0..n as usize {
        // SAFETY: i < n, the array holds n valid device pointers.
        let dev = unsafe { *list.add(i) };
        // SAFETY: dev is a valid device; the name is a NUL-terminated string it owns.
        let name = unsafe { CStr::from_ptr(ibv_get_device_name(dev)) };
        println!("{}", name.to_string_lossy());
    }
    // SAFETY: list came from ibv_get_device_list and is freed once.
    unsafe { ibv_free_device_list(list) };
}
