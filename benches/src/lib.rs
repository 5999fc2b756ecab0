//! Criterion benchmarks for the workspace live in `benches/benches/`; this library is empty.
