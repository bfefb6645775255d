//! The `troupe` binary: parse the command line, set up logging, run, exit with the code.

use clap::Parser;

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TROUPE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    // troupe holds API keys in its environment and memory: programs it runs (and anything else
    // of the same user) must not read them through /proc or ptrace.
    if let Err(err) = troupe_tools::builtin::privileges::make_non_dumpable() {
        tracing::warn!(%err, "could not make troupe's process non-dumpable");
    }
    let cli = troupe::cli::Cli::parse();
    std::process::exit(troupe::cli::run(cli).await);
}
