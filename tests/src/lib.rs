//! Cross-crate integration tests live in `tests/tests/`; they arrive with the crates they
//! connect (issues #3 to #5). This library is empty.
