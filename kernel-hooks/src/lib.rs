//! Page-fault decision engine and verification cache for Twizzler's security contexts.
//!
//! Not built yet: this crate is a placeholder in the workspace so that the layout of
//! `../shared/DESIGN.md` is visible from the start. Its work is tracked in issue #3 and it
//! deliberately exports nothing until then.
