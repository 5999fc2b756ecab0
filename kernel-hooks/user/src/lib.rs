//! The userspace of the QEMU reference kernel: what a ring-3 Rust program links against.
//!
//! - [`abi`]: the system-call numbers and error codes (the kernel includes the same file);
//! - [`sys`]: the system calls, with typed wrappers;
//! - [`ctx`]: editing a context object in place with `SecCtxEditor`;
//! - [`heap`]: the global allocator, over the heap object the loader made for the program;
//! - [`own`]: the program's own objects and the key that signs for them, to put
//!   capabilities for its code, stack and heap into every context it switches to;
//! - [`mailbox`]: words two programs running at once share through an object;
//! - [`rt`]: the entry point, the panic handler, and the probes whose denied accesses come
//!   back as errors instead of ending the task.
//!
//! A program is `#![no_std]` and `#![no_main]`, depends on this crate, and names its main
//! function with [`entry!`]. The kernel loads its code and data into objects, gives it a stack
//! and a heap object (all with no default protections, keyed by a key of the program's own),
//! and runs it in ring 3 under a context granting exactly those: every page it touches (code,
//! data, stack, heap) is a page fault the engine decides.

#![no_std]
#![warn(missing_docs)]

extern crate alloc;

pub mod abi;
pub mod ctx;
pub mod heap;
pub mod mailbox;
pub mod own;
pub mod rt;
pub mod sys;

pub use abi::Error;
