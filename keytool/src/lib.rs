//! Command-line tool to mint keys, capabilities and delegations and to edit security contexts.
//!
//! Not built yet: this crate is a placeholder in the workspace so that the layout of
//! `../shared/DESIGN.md` is visible from the start. Its work is tracked in issue #4 and it
//! deliberately exports nothing until then.
