//! `echomq`: the operator's command for EchoMQ queues.
//!
//! Every command validates its arguments before connecting, so a bad argument
//! never writes anything. Errors are one line on stderr and a non-zero exit.

mod cli;
mod commands;
mod demo;
mod style;
mod work;

use clap::Parser;

#[tokio::main]
async fn main() {
    let cli = cli::Cli::parse();
    if cli.tls_insecure {
        anstream::eprintln!(
            "{}warning:{} --tls-insecure: the server's TLS certificate is NOT verified",
            style::ERR.render(),
            style::ERR.render_reset()
        );
    }
    if let Err(e) = commands::run(cli).await {
        anstream::eprintln!(
            "{}error:{} {e}",
            style::ERR.render(),
            style::ERR.render_reset()
        );
        std::process::exit(1);
    }
}
