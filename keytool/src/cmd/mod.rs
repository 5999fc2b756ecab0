//! One module per command group.

pub(crate) mod check;
pub(crate) mod ctx;
pub(crate) mod difc;
pub(crate) mod docs;
pub(crate) mod keys;
pub(crate) mod obj;
pub(crate) mod records;
pub(crate) mod revoke;
pub(crate) mod store;
pub(crate) mod upstream;

use std::path::{Path, PathBuf};

use secctx::DbStore;

use crate::cli::{Cmd, CtxCmd, LabelCmd, ObjCmd, StoreAccess, StoreCmd, TagCmd};
use crate::env;
use crate::error::{Result, Status};
use crate::output::Out;
use crate::parse::IdRef;

/// Runs a parsed command: those that need no store first; then the store is opened with what
/// the command needs ([`Cmd::store_access`]: read-only, which never creates a store, for
/// commands that only read) and names are resolved to ids.
pub(crate) fn run(flag: Option<PathBuf>, out: Out, cmd: Cmd) -> Result<Status> {
    match cmd.store_access() {
        StoreAccess::Read => with_store(&env::open_store_read_only(flag)?, out, cmd),
        StoreAccess::Write => with_store(&env::open_store(flag)?, out, cmd),
        StoreAccess::None => match cmd {
            Cmd::Completions { shell } => docs::completions(shell),
            Cmd::Man { out: dir } => docs::man(out, dir.as_deref()),
            // Opens the store itself: its directory may hold old-format objects.
            Cmd::Store(StoreCmd::Migrate { from }) => {
                store::migrate(&env::store_dir(flag)?, from.as_deref(), out)
            }
            // A record file: no store needed.
            Cmd::Inspect {
                what,
                signed_message_out,
                signature_out,
                force,
            } => records::inspect_file(
                out,
                Path::new(&what),
                signed_message_out,
                signature_out,
                force,
            ),
            _ => Err(crate::fail!("this command needs a store")),
        },
    }
}

fn with_store(s: &DbStore, out: Out, cmd: Cmd) -> Result<Status> {
    let r = |x: &IdRef| env::resolve(s, x);
    let r_opt = |x: &Option<IdRef>| env::resolve_opt(s, x);
    let r_kuid = |x: &Option<IdRef>| x.as_ref().map(|k| env::resolve_kuid(s, k)).transpose();
    match cmd {
        Cmd::Keygen {
            scheme,
            name,
            pass,
            kdf,
        } => keys::keygen(s, out, scheme, name.as_deref(), &pass, &kdf),
        Cmd::Export {
            key,
            out: file,
            secret,
            force,
            pass,
        } => keys::export(s, out, r(&key)?, file, secret, force, &pass),
        Cmd::Import {
            file,
            raw_p256,
            id,
            name,
            pass,
            kdf,
        } => keys::import(
            s,
            out,
            keys::ImportFile {
                path: &file,
                raw_p256,
            },
            id,
            name.as_deref(),
            &pass,
            &kdf,
        ),
        Cmd::ConvertUpstreamCap {
            file,
            upstream_key,
            key,
            out: out_file,
            force,
            add_to,
            unchecked,
            pass,
        } => upstream::convert_cap(
            s,
            out,
            &upstream::Request {
                file: &file,
                upstream_key: &upstream_key,
                key: r(&key)?,
                out: out_file.as_deref(),
                force,
                add_to: r_opt(&add_to)?,
                unchecked,
                pass: &pass,
            },
        ),
        Cmd::Obj(ObjCmd::New {
            id,
            name,
            kuid,
            default,
            unchecked,
            label,
            as_ctx,
        }) => {
            let l = if label.is_empty() {
                None
            } else {
                Some(difc::resolve_label(s, &label)?)
            };
            obj::new(
                s,
                out,
                id,
                name.as_deref(),
                r_kuid(&kuid)?,
                default,
                unchecked,
                l.as_ref(),
                r_opt(&as_ctx)?,
            )
        }
        Cmd::Obj(ObjCmd::Show { id }) => obj::show(s, out, r(&id)?),
        Cmd::Mint {
            key,
            target,
            accessor,
            grant,
            pass,
        } => records::mint(s, out, r(&key)?, r(&target)?, r(&accessor)?, &grant, &pass),
        Cmd::Delegate {
            parent,
            key,
            receiver,
            grant,
            pass,
        } => records::delegate(s, out, &parent, r(&key)?, r(&receiver)?, &grant, &pass),
        Cmd::Verify { file, at } => records::verify(s, out, &file, at),
        Cmd::Inspect {
            what,
            signed_message_out,
            signature_out,
            ..
        } => records::inspect_object(s, out, &what, signed_message_out, signature_out),
        Cmd::Ctx(c) => match c {
            CtxCmd::New {
                id,
                name,
                kuid,
                unchecked,
                label,
                as_ctx,
            } => ctx::new(
                s,
                out,
                id,
                name.as_deref(),
                r_kuid(&kuid)?,
                unchecked,
                &difc::resolve_label(s, &label)?,
                r_opt(&as_ctx)?,
            ),
            CtxCmd::Register { ctx, as_ctx } => difc::register(s, out, r(&ctx)?, r_opt(&as_ctx)?),
            CtxCmd::Relabel { ctx, label, at } => {
                difc::relabel(s, out, r(&ctx)?, &difc::resolve_label(s, &label)?, at)
            }
            CtxCmd::Add { ctx, file } => ctx::add(s, out, r(&ctx)?, &file),
            CtxCmd::Rm {
                ctx,
                target,
                record,
                mask,
            } => ctx::rm(s, out, r(&ctx)?, r_opt(&target)?, record, r_opt(&mask)?),
            CtxCmd::Mask {
                ctx,
                target,
                perm,
                ovr,
                global,
            } => ctx::mask(s, out, r(&ctx)?, r_opt(&target)?, perm, ovr, global),
            CtxCmd::Flags { ctx, undetachable } => ctx::flags(s, out, r(&ctx)?, undetachable),
            CtxCmd::Show { ctx } => ctx::show(s, out, r(&ctx)?),
        },
        Cmd::Check {
            ctx,
            target,
            offset,
            access,
            at,
        } => {
            let ctx = ctx.iter().map(r).collect::<Result<Vec<_>>>()?;
            check::check(s, out, &ctx, r(&target)?, offset, access, at)
        }
        Cmd::Tag(TagCmd::Create {
            name,
            key,
            integrity,
            id,
        }) => difc::tag_create(s, out, &name, env::resolve_kuid(s, &key)?, integrity, id),
        Cmd::Tag(TagCmd::Grant {
            tag,
            to,
            rights,
            expires,
            public,
            out: file,
            force,
            key,
            pass,
        }) => difc::tag_grant(
            s,
            out,
            r(&tag)?,
            r_opt(&to)?,
            rights,
            expires,
            public,
            file.as_deref(),
            force,
            r_opt(&key)?,
            &pass,
        ),
        Cmd::Tag(TagCmd::Delegate {
            tag,
            from,
            to,
            rights,
            expires,
            key,
            out: file,
            force,
            pass,
        }) => difc::tag_delegate(
            s,
            out,
            r(&tag)?,
            r(&from)?,
            r(&to)?,
            rights,
            expires,
            r_opt(&key)?,
            file.as_deref(),
            force,
            &pass,
        ),
        Cmd::Label(LabelCmd::Show { id }) => difc::show(s, out, r(&id)?),
        Cmd::Revoke { key, record, list } => revoke::revoke(s, out, r_opt(&key)?, record, list),
        Cmd::Store(StoreCmd::Info) => store::info(s, out),
        Cmd::Completions { .. } | Cmd::Man { .. } | Cmd::Store(StoreCmd::Migrate { .. }) => {
            Err(crate::fail!("this command does not use an open store"))
        }
    }
}

/// Prints a warning on stderr, in the error format.
pub(crate) fn warn(msg: impl std::fmt::Display) {
    eprintln!("keytool: warning: {msg}");
}
