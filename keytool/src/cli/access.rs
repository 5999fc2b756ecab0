//! What each command needs of the store.

use std::path::Path;

use super::{Cmd, CtxCmd, LabelCmd, ObjCmd, StoreCmd};

/// What a command needs of the store: it is opened with no more than that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreAccess {
    /// No store (`completions`, `man`, `inspect FILE`), or one the command opens itself
    /// (`store migrate`).
    None,
    /// Reads only: opened read-only, which never waits for a writer in another process, never
    /// writes, and never creates a store (a missing one is an error naming its path).
    Read,
    /// Reads and writes: opened read-write, and created (with its directory) if missing.
    Write,
}

impl Cmd {
    /// What the command needs of the store. Every command is listed: a new one must say.
    pub(crate) fn store_access(&self) -> StoreAccess {
        match self {
            Cmd::Completions { .. } | Cmd::Man { .. } | Cmd::Store(StoreCmd::Migrate { .. }) => {
                StoreAccess::None
            }
            // A record file needs no store; anything else is an object of the store.
            Cmd::Inspect { what, .. } if Path::new(what).exists() => StoreAccess::None,
            Cmd::Verify { .. }
            | Cmd::Inspect { .. }
            | Cmd::Check { .. }
            | Cmd::Export { .. }
            | Cmd::Mint { .. }
            | Cmd::Delegate { .. }
            | Cmd::Obj(ObjCmd::Show { .. })
            | Cmd::Ctx(CtxCmd::Show { .. })
            | Cmd::Label(LabelCmd::Show { .. })
            | Cmd::Revoke { list: true, .. }
            | Cmd::Store(StoreCmd::Info)
            | Cmd::ConvertUpstreamCap { add_to: None, .. } => StoreAccess::Read,
            Cmd::ConvertUpstreamCap {
                add_to: Some(_), ..
            } => StoreAccess::Write,
            Cmd::Keygen { .. }
            | Cmd::Import { .. }
            | Cmd::Revoke { list: false, .. }
            | Cmd::Obj(ObjCmd::New { .. })
            | Cmd::Tag(_)
            | Cmd::Ctx(CtxCmd::Relabel { .. } | CtxCmd::Register { .. })
            | Cmd::Ctx(
                CtxCmd::New { .. }
                | CtxCmd::Add { .. }
                | CtxCmd::Rm { .. }
                | CtxCmd::Mask { .. }
                | CtxCmd::Flags { .. },
            ) => StoreAccess::Write,
        }
    }
}
