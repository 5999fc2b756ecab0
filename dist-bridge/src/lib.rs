//! Owner-hosted, versioned, revocable guards that carry signed capabilities across machines.
//!
//! Not built yet: this crate is a placeholder in the workspace so that the layout of
//! `../shared/DESIGN.md` is visible from the start. Its work is tracked in issue #5 and it
//! deliberately exports nothing until then.
