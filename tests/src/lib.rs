//! Cross-crate integration tests live in `tests/tests/`. This library is empty.
