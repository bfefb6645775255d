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
    let cli = troupe::cli::Cli::parse();
    std::process::exit(troupe::cli::run(cli).await);
}
