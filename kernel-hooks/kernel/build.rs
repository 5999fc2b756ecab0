//! Links the kernel with its own linker script, at a fixed physical address, not as a PIE.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".to_owned());
    println!("cargo:rerun-if-changed=link.ld");
    println!("cargo:rerun-if-changed=build.rs");
    // Only the bare-metal target links with the script; a host `cargo check` stays usable.
    if std::env::var("TARGET").as_deref() == Ok("x86_64-unknown-none") {
        println!("cargo:rustc-link-arg-bins=-T{dir}/link.ld");
        // The target defaults to a static PIE whose relocations nothing would apply: QEMU loads
        // the image at its link address, so link a plain static executable instead.
        println!("cargo:rustc-link-arg-bins=--no-pie");
    }
}
