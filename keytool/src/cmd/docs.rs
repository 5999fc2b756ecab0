//! `completions` and `man`: documents generated from the clap definitions of the command line.
//! They need no store: `cmd::run` handles them before opening it.

use std::io::Write;
use std::path::Path;

use clap::{Command, CommandFactory};
use clap_complete::Shell;
use clap_mangen::Man;
use clap_mangen::roff::{Roff, roman};
use serde_json::json;

use crate::cli::Cli;
use crate::error::{Result, Status, io};
use crate::fail;
use crate::files;
use crate::output::Out;

/// `keytool completions SHELL`: the completion script on stdout.
pub(crate) fn completions(shell: Shell) -> Result<Status> {
    let mut cmd = Cli::command();
    let mut script = Vec::new();
    // Written to memory first: clap_complete panics on a failed write, which stdout can be.
    clap_complete::generate(shell, &mut cmd, "keytool", &mut script);
    print(&script);
    Ok(Status::Yes)
}

/// `keytool man [--out DIR]`: one page on stdout (keytool(1) with a section per command), or
/// keytool.1 and a page per command written to `dir`.
pub(crate) fn man(out: Out, dir: Option<&Path>) -> Result<Status> {
    let mut top = Cli::command().disable_help_subcommand(true);
    // Building gives every subcommand its full name (`keytool ctx add`, page `keytool-ctx-add`)
    // and its copy of the global options.
    top.build();
    let Some(dir) = dir else {
        let page = page(&top, true).map_err(|e| fail!("render the man page: {e}"))?;
        print(&page);
        return Ok(Status::Yes);
    };
    std::fs::create_dir_all(dir).map_err(|e| io("create directory", dir, e))?;
    let mut written = Vec::new();
    for cmd in std::iter::once(&top).chain(commands(&top)) {
        let name = format!("{}.1", display_name(cmd));
        let bytes = page(cmd, false).map_err(|e| fail!("render {name}: {e}"))?;
        // Generated pages are replaced, so the command can be rerun (e.g. by a packaging script).
        files::write_new(&dir.join(&name), &bytes, files::PUBLIC, true)?;
        written.push(name);
    }
    out.emit(json!({ "out": dir, "pages": written }), || {
        format!(
            "wrote {} man pages to {}: {}",
            written.len(),
            dir.display(),
            written.join(" ")
        )
    });
    Ok(Status::Yes)
}

/// Prints `bytes` on stdout. A closed stdout (`keytool man | head`) is not an error, as for
/// the other commands' output.
fn print(bytes: &[u8]) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(bytes).and_then(|()| stdout.flush());
}

/// Every visible command under `cmd`, depth first (`obj`, `obj new`, `obj show`, `mint`, ...).
fn commands(cmd: &Command) -> Vec<&Command> {
    let mut all = Vec::new();
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        all.push(sub);
        all.extend(commands(sub));
    }
    all
}

/// The page name of a built command: `keytool`, `keytool-ctx-add`.
fn display_name(cmd: &Command) -> &str {
    cmd.get_display_name().unwrap_or_else(|| cmd.get_name())
}

/// A roff document assembled from parts that each begin with the same preamble (roff's
/// apostrophe definition, which every `Roff::to_writer` writes): kept once, at the top.
struct Page {
    buf: Vec<u8>,
    preamble: Vec<u8>,
}

impl Page {
    fn new() -> std::io::Result<Self> {
        let mut preamble = Vec::new();
        Roff::new().to_writer(&mut preamble)?;
        Ok(Self {
            buf: preamble.clone(),
            preamble,
        })
    }

    /// Appends what `render` writes, less the preamble; with `subsection`, its `.SH` section
    /// headings become `.SS` subsection headings.
    fn add(
        &mut self,
        subsection: bool,
        render: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let mut part = Vec::new();
        render(&mut part)?;
        let part = part.strip_prefix(&self.preamble[..]).unwrap_or(&part);
        if !subsection {
            self.buf.extend_from_slice(part);
            return Ok(());
        }
        // Text lines that begin with a dot are escaped (`\&.`), so a line that begins with
        // `.SH ` is a heading.
        for line in part.split_inclusive(|&b| b == b'\n') {
            match line.strip_prefix(b".SH ") {
                Some(rest) => {
                    self.buf.extend_from_slice(b".SS ");
                    self.buf.extend_from_slice(rest);
                }
                None => self.buf.extend_from_slice(line),
            }
        }
        Ok(())
    }
}

/// The man page of `cmd`: clap_mangen's title, NAME, SYNOPSIS, DESCRIPTION, OPTIONS and
/// SUBCOMMANDS; the after-help text as sections of its own; with `all`, a section for every
/// command under `cmd`; VERSION.
fn page(cmd: &Command, all: bool) -> std::io::Result<Vec<u8>> {
    let man = Man::new(cmd.clone()).title(display_name(cmd).to_uppercase());
    let mut page = Page::new()?;
    page.add(false, |w| man.render_title(w))?;
    page.add(false, |w| man.render_name_section(w))?;
    page.add(false, |w| man.render_synopsis_section(w))?;
    page.add(false, |w| man.render_description_section(w))?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        page.add(false, |w| man.render_options_section(w))?;
    }
    if cmd.has_subcommands() {
        page.add(false, |w| man.render_subcommands_section(w))?;
    }
    page.add(false, |w| after_help(cmd, "SH").to_writer(w))?;
    if all {
        for sub in commands(cmd) {
            command_section(&mut page, sub)?;
        }
    }
    if cmd.get_version().is_some() || cmd.get_long_version().is_some() {
        page.add(false, |w| man.render_version_section(w))?;
    }
    Ok(page.buf)
}

/// The section of one command in the single page: its name and description, then SYNOPSIS,
/// OPTIONS (without the global options the top of the page lists), SUBCOMMANDS and its
/// after-help text as subsections.
fn command_section(page: &mut Page, cmd: &Command) -> std::io::Result<()> {
    let full = cmd.get_bin_name().unwrap_or_else(|| cmd.get_name());
    let mut head = Roff::new();
    head.control("SH", [full.to_uppercase().as_str()]);
    if let Some(about) = cmd.get_long_about().or_else(|| cmd.get_about()) {
        head.text([roman(about.to_string())]);
    }
    page.add(false, |w| head.to_writer(w))?;
    let local = cmd
        .clone()
        .mut_args(|a| if a.is_global_set() { a.hide(true) } else { a });
    let man = Man::new(local.clone());
    page.add(true, |w| man.render_synopsis_section(w))?;
    if local.get_arguments().any(|a| !a.is_hide_set()) {
        page.add(true, |w| man.render_options_section(w))?;
    }
    if cmd.has_subcommands() {
        page.add(true, |w| man.render_subcommands_section(w))?;
    }
    page.add(false, |w| after_help(cmd, "SS").to_writer(w))
}

/// The after-help text of `cmd` (`after_long_help`, else `after_help`) as roff, keeping its
/// layout, which clap_mangen would fill into one paragraph: a short line `Heading:` at the left
/// margin starts a section (`heading` is `SH` or `SS`) titled in capitals, text before the first
/// one goes under NOTES, indented lines (examples, tables) are kept as they are, other lines
/// are filled.
fn after_help(cmd: &Command, heading: &str) -> Roff {
    let mut roff = Roff::new();
    let Some(text) = cmd.get_after_long_help().or_else(|| cmd.get_after_help()) else {
        return roff;
    };
    let text = text.to_string();
    let mut verbatim = false;
    let mut started = false;
    for line in text.lines() {
        let indented = line.starts_with([' ', '\t']);
        if verbatim && !indented {
            roff.control("fi", []);
            verbatim = false;
        }
        if let Some(title) = line
            .strip_suffix(':')
            .filter(|t| !indented && !t.is_empty() && t.len() <= 40 && !t.contains([':', '`', '.']))
        {
            roff.control(heading, [title.to_uppercase().as_str()]);
            started = true;
            continue;
        }
        if !started {
            roff.control(heading, ["NOTES"]);
            started = true;
        }
        if line.trim().is_empty() {
            roff.control("PP", []);
        } else if indented {
            if !verbatim {
                roff.control("nf", []);
                verbatim = true;
            }
            roff.text([roman(line)]);
        } else {
            roff.text([roman(line)]);
        }
    }
    if verbatim {
        roff.control("fi", []);
    }
    roff
}
