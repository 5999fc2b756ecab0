//! Errors and exit statuses.
//!
//! Exit codes: 0 success (granted, valid); 1 a negative answer (`check`: denied, `verify`:
//! invalid); 2 an error (bad usage, a missing or corrupt file or object, a wrong passphrase).

use std::fmt;
use std::path::Path;

/// A command failed: one line, exit status 2.
#[derive(Debug)]
pub(crate) struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The result of a command.
pub(crate) type Result<T> = std::result::Result<T, Error>;

/// What a command that ran to the end answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// Done, granted, valid: exit 0.
    Yes,
    /// Denied, invalid: exit 1.
    No,
}

/// Builds an [`Error`] from a format string.
#[macro_export]
macro_rules! fail {
    ($($t:tt)*) => { $crate::error::Error(format!($($t)*)) };
}

macro_rules! from_display {
    ($($t:ty),* $(,)?) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Self {
                Error(e.to_string())
            }
        }
    )*};
}

from_display!(
    secctx::StoreError,
    secctx::keypair::KeyError,
    secctx::context::ContextError,
    twizzler_capsec::PemError,
);

/// An I/O error about `path`, as one line.
pub(crate) fn io(op: &str, path: &Path, e: std::io::Error) -> Error {
    fail!("{op} {}: {}", path.display(), e)
}
