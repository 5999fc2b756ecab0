//! Links each program at its own fixed user address: its code object's slot and, one slot up,
//! its data object's (see `src/layout.rs`). The kernel reads the slots back from the ELF's
//! program headers and creates the objects there.

use std::fmt::Write as _;
use std::path::PathBuf;

/// Bytes per object slot (the kernel's `SLOT_SIZE`).
const SLOT_SIZE: u64 = 1 << 30;
/// Bytes per page; an object's first page is its null page, never mapped.
const PAGE: u64 = 4096;

/// Each program and the slot of its code object (its data object is in the next slot).
const PROGRAMS: [(&str, u64); 7] = [
    ("policy", 130),
    ("hostile", 132),
    ("scenarios", 134),
    ("bench", 136),
    ("owner", 138),
    ("reader", 140),
    ("labels", 142),
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_else(|_| ".".to_owned()));
    let bare = std::env::var("TARGET").as_deref() == Ok("x86_64-unknown-none");
    for (name, code_slot) in PROGRAMS {
        let code = code_slot * SLOT_SIZE + PAGE;
        let data = (code_slot + 1) * SLOT_SIZE + PAGE;
        let mut script = String::new();
        let _ = write!(
            script,
            "/* {name}: code object in slot {code_slot}, data object in slot {}. */\n\
             ENTRY(_start)\n\
             PHDRS {{ text PT_LOAD FLAGS(5); data PT_LOAD FLAGS(6); }}\n\
             SECTIONS {{\n\
             \x20 . = {code:#x};\n\
             \x20 .text : {{ KEEP(*(.text.start)) *(.text .text.*) }} :text\n\
             \x20 .rodata : ALIGN(16) {{ *(.rodata .rodata.*) }} :text\n\
             \x20 . = {data:#x};\n\
             \x20 .data : {{ *(.data .data.*) *(.got .got.*) }} :data\n\
             \x20 .bss : ALIGN(16) {{ *(.bss .bss.*) *(COMMON) }} :data\n\
             \x20 /DISCARD/ : {{ *(.eh_frame .eh_frame_hdr .eh_frame.*) *(.comment) *(.note.*) }}\n\
             }}\n",
            code_slot + 1
        );
        let path = out.join(format!("{name}.ld"));
        if let Err(e) = std::fs::write(&path, script) {
            panic!("cannot write {}: {e}", path.display());
        }
        if bare {
            println!("cargo:rustc-link-arg-bin={name}=-T{}", path.display());
            // A plain static executable at its link address: nothing would apply a PIE's
            // relocations.
            println!("cargo:rustc-link-arg-bin={name}=--no-pie");
        }
    }
}
