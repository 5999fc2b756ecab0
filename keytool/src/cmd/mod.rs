//! One module per command group.

pub mod check;
pub mod ctx;
pub mod keys;
pub mod obj;
pub mod records;
pub mod revoke;

use std::path::PathBuf;

use crate::cli::{Cmd, CtxCmd, ObjCmd};
use crate::env;
use crate::error::{Result, Status};
use crate::output::Out;

/// Runs a parsed command.
pub fn run(store: Option<PathBuf>, out: Out, cmd: Cmd) -> Result<Status> {
    let store = env::open_store(store)?;
    let s = &store;
    match cmd {
        Cmd::Keygen { scheme, pass, kdf } => keys::keygen(s, out, scheme, &pass, &kdf),
        Cmd::Export {
            key,
            out: file,
            secret,
            force,
            pass,
        } => keys::export(s, out, key, file, secret, force, &pass),
        Cmd::Import {
            file,
            id,
            pass,
            kdf,
        } => keys::import(s, out, &file, id, &pass, &kdf),
        Cmd::Obj(ObjCmd::New {
            id,
            kuid,
            default,
            unchecked,
        }) => obj::new(s, out, id, kuid, default, unchecked),
        Cmd::Obj(ObjCmd::Show { id }) => obj::show(s, out, id),
        Cmd::Mint {
            key,
            target,
            accessor,
            grant,
            pass,
        } => records::mint(s, out, key, target, accessor, &grant, &pass),
        Cmd::Delegate {
            parent,
            key,
            receiver,
            grant,
            pass,
        } => records::delegate(s, out, &parent, key, receiver, &grant, &pass),
        Cmd::Verify { file, at } => records::verify(s, out, &file, at),
        Cmd::Inspect {
            what,
            signed_message_out,
            signature_out,
            force,
        } => records::inspect(s, out, &what, signed_message_out, signature_out, force),
        Cmd::Ctx(c) => match c {
            CtxCmd::New {
                id,
                kuid,
                unchecked,
            } => ctx::new(s, out, id, kuid, unchecked),
            CtxCmd::Add { ctx, file } => ctx::add(s, out, ctx, &file),
            CtxCmd::Rm {
                ctx,
                target,
                record,
                mask,
            } => ctx::rm(s, out, ctx, target, record, mask),
            CtxCmd::Mask {
                ctx,
                target,
                perm,
                ovr,
                global,
            } => ctx::mask(s, out, ctx, target, perm, ovr, global),
            CtxCmd::Flags { ctx, undetachable } => ctx::flags(s, out, ctx, undetachable),
            CtxCmd::Show { ctx } => ctx::show(s, out, ctx),
        },
        Cmd::Check {
            ctx,
            target,
            offset,
            access,
            at,
        } => check::check(s, out, &ctx, target, offset, access, at),
        Cmd::Revoke { key, record, list } => revoke::revoke(s, out, key, record, list),
    }
}

/// Prints a warning on stderr, in the error format.
pub fn warn(msg: impl std::fmt::Display) {
    eprintln!("keytool: warning: {msg}");
}
