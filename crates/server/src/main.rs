//! `fogcached`: parse the command line, start the server, stop it cleanly on SIGTERM,
//! SIGINT or the `shutdown` command.

use std::process::ExitCode;

use server::config::{self, CliExit, StorageError, EXIT_USAGE};
use server::runtime::Server;
use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
use signal_hook::iterator::Signals;

/// sysexits.h `EX_OSERR`: memcached's exit code when it cannot listen.
const EXIT_OS_ERROR: u8 = 71;

fn main() -> ExitCode {
    let config = match config::parse(std::env::args_os()) {
        Ok(config) => config,
        Err(CliExit::Info(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(CliExit::Usage(message)) => {
            eprintln!("fogcached: {message}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // Before anything starts: the default pool file needs its data directory, and a
    // NUMA node that does not exist is the operator's mistake, reported as such.
    match config::prepare_storage(&config) {
        Ok(()) => {}
        Err(StorageError::Usage(message)) => {
            eprintln!("fogcached: {message}");
            return ExitCode::from(EXIT_USAGE);
        }
        Err(StorageError::Os(message)) => {
            eprintln!("fogcached: {message}");
            return ExitCode::from(EXIT_OS_ERROR);
        }
    }
    if config.user.is_some() && config.verbosity > 0 {
        eprintln!("fogcached: -u is accepted for compatibility; fogcached does not switch user");
    }
    // Signals are caught before any thread starts, so every thread inherits the mask
    // state signal-hook expects and no SIGTERM can arrive unhandled.
    // SIGUSR1 is memcached's graceful stop (for its warm restart): the same clean stop.
    let mut signals = match Signals::new([SIGTERM, SIGINT, SIGUSR1]) {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("fogcached: cannot install signal handlers: {e}");
            return ExitCode::from(EXIT_OS_ERROR);
        }
    };
    let server = match Server::start(config) {
        Ok(server) => server,
        Err(e) => {
            eprintln!("fogcached: {e:#}");
            return ExitCode::from(EXIT_OS_ERROR);
        }
    };
    let shutdown = server.shutdown_handle();
    let signal_thread = std::thread::Builder::new()
        .name("fogcached-signals".to_owned())
        .spawn(move || {
            if signals.forever().next().is_some() {
                shutdown.request();
            }
        });
    if let Err(e) = signal_thread {
        eprintln!("fogcached: cannot start the signal thread: {e}");
        server.stop();
        return ExitCode::from(EXIT_OS_ERROR);
    }
    server.wait();
    ExitCode::SUCCESS
}
