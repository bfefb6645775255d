//! The `troupe` binary: parse the command line, set up logging, run, exit with the code.

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
    let code = runtime.block_on(troupe::run_command_line());
    // What was traced goes out before the process ends (a stuck collector waits a moment only).
    troupe::observability::shutdown();
    std::process::exit(code);
}
