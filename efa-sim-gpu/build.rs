//! Links the cdylib as the stand-in `libcuda.so.1` (its soname), so a process that
//! `dlopen`s the driver by name finds this library when its directory is on the path.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
}
