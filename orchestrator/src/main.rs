//! The `troupe` binary: parse the command line, set up logging, run, exit with the code.

use std::sync::Mutex;

use clap::Parser;

fn main() {
    // SAFETY: the first thing the process does; no other thread exists yet.
    unsafe { troupe_tools::search::semantic::settle_encoder_threads() };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("troupe: cannot start its async runtime: {err}");
            std::process::exit(1);
        }
    };
    let code = runtime.block_on(run());
    // What was traced goes out before the process ends (a stuck collector waits a moment only).
    troupe::observability::shutdown();
    std::process::exit(code);
}

async fn run() -> i32 {
    let cli = troupe::cli::Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("TROUPE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let log_file = cli.log_file().and_then(|path| {
        std::fs::create_dir_all(path.parent()?).ok()?;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok()
    });
    match log_file {
        Some(file) => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(Mutex::new(file))
            .init(),
        None => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init(),
    }
    // troupe holds API keys in its environment and memory: programs it runs (and anything else
    // of the same user) must not read them through /proc or ptrace.
    if let Err(err) = troupe_tools::builtin::privileges::make_non_dumpable() {
        tracing::warn!(%err, "could not make troupe's process non-dumpable");
    }
    troupe::cli::run(cli).await
}
