//! `keytool`: the command line of Twizzler's capability security. Mints keys, capabilities and
//! delegations, edits security contexts, verifies and inspects records, and simulates the
//! kernel's decision. `keytool --help` describes it all.

#![forbid(unsafe_code)]

mod cli;
mod cmd;
mod env;
mod error;
mod files;
mod output;
mod parse;
mod upstream;

use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;

use crate::error::Status;
use crate::output::Out;

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return usage_error(&e),
    };
    let out = Out { json: cli.json };
    match cmd::run(cli.store, out, cli.cmd) {
        Ok(Status::Yes) => ExitCode::SUCCESS,
        Ok(Status::No) => ExitCode::from(1),
        Err(e) => {
            eprintln!("keytool: {}", one_line(&e.0));
            ExitCode::from(2)
        }
    }
}

/// Help and version go to stdout with exit 0; a usage error is one line with exit 2.
fn usage_error(e: &clap::Error) -> ExitCode {
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            }
        }
        _ => {
            // The message is everything before the usage block, without clap's tips.
            let text = e.render().to_string();
            let msg: Vec<&str> = text
                .lines()
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more"))
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("tip:"))
                .collect();
            let msg = msg.join(" ");
            let msg = msg.strip_prefix("error: ").unwrap_or(&msg);
            eprintln!("keytool: {msg} (see --help)");
            ExitCode::from(2)
        }
    }
}

/// Joins the lines of a message, so every error is one line.
fn one_line(s: &str) -> String {
    s.split(['\n', '\r'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}
