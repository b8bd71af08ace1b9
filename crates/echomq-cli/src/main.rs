//! `echomq`: the operator's command for EchoMQ queues.
//!
//! Every command validates its arguments before connecting, so a bad
//! argument never writes anything. Errors are one line on stderr and a
//! non-zero exit: 2 for a configuration error, 3 when Redis cannot be
//! reached, 4 when it refuses us or does not suit a queue, 5 when a write's
//! outcome is unknown, 1 for anything else (`docs/deployment.md §Running as
//! a service`). One module per subcommand, under `commands/`.

mod capacity;
mod chunked;
mod cli;
mod codec;
mod commands;
mod style;
mod target;

use clap::{CommandFactory, FromArgMatches};

#[tokio::main]
async fn main() {
    let matches = cli::Cli::command().get_matches();
    let cli = cli::Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if cli.tls_insecure {
        style::print_warning("--tls-insecure: the server's TLS certificate is NOT verified");
    }
    let target = cli.target(&matches);
    std::process::exit(cli.command.run(&target).await);
}
