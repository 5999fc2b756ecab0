//! Links the kernel with its own linker script, at a fixed physical address, not as a PIE,
//! and embeds the user programs `cargo xtask` built (`KERNEL_HOOKS_USER_BIN_DIR`).

/// The user programs the kernel embeds (binaries of `kernel-hooks/user`).
const PROGRAMS: [&str; 7] = [
    "policy",
    "hostile",
    "scenarios",
    "bench",
    "owner",
    "reader",
    "labels",
];

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".to_owned());
    println!("cargo:rerun-if-changed=link.ld");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=KERNEL_HOOKS_USER_BIN_DIR");
    println!("cargo:rustc-check-cfg=cfg(user_programs)");
    // Only the bare-metal target links with the script; a host `cargo check` stays usable.
    if std::env::var("TARGET").as_deref() == Ok("x86_64-unknown-none") {
        println!("cargo:rustc-link-arg-bins=-T{dir}/link.ld");
        // The target defaults to a static PIE whose relocations nothing would apply: QEMU loads
        // the image at its link address, so link a plain static executable instead.
        println!("cargo:rustc-link-arg-bins=--no-pie");
    }
    // The user programs, when xtask built them: without the variable the kernel runs without
    // them (and says so); with it, every program must be there.
    if let Ok(bin_dir) = std::env::var("KERNEL_HOOKS_USER_BIN_DIR") {
        for name in PROGRAMS {
            let path = std::path::Path::new(&bin_dir).join(name);
            if !path.is_file() {
                panic!(
                    "KERNEL_HOOKS_USER_BIN_DIR is set but {} is missing (build kernel-hooks/user first)",
                    path.display()
                );
            }
            println!("cargo:rerun-if-changed={}", path.display());
            println!(
                "cargo:rustc-env=KERNEL_HOOKS_USER_{}={}",
                name.to_uppercase(),
                path.display()
            );
        }
        println!("cargo:rustc-cfg=user_programs");
    }
}
