//! Userspace object store, key-pair objects, security-context editing and an access simulator.
//!
//! Not built yet: this crate is a placeholder in the workspace so that the layout of
//! `../shared/DESIGN.md` is visible from the start. Its work is tracked in issue #4 and it
//! deliberately exports nothing until then.
