// libefa is linked for the EFA_1.0..EFA_1.2 entry points; newer ones are resolved at run time
// (dlopen/dlvsym, in libdl on glibc < 2.34).
fn main() {
    println!("cargo:rustc-link-lib=dylib=efa");
    println!("cargo:rustc-link-lib=dylib=dl");
    println!("cargo:rerun-if-changed=build.rs");
}
