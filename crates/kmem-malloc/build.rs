//! libkmem.so's SONAME: `libkmem.so.0` (major version 0 of the C ABI in
//! include/kmem.h), so programs linked against it record that name, and a later
//! incompatible ABI can be `libkmem.so.1` beside it.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libkmem.so.0");
    println!("cargo:rerun-if-changed=build.rs");
}
