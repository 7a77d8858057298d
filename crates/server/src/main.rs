//! `fogcached`: parse the command line, start the server, stop it cleanly on SIGTERM,
//! SIGINT or the `shutdown` command. The process-level steps (`-d`, `-P`, `-u`, `-r`,
//! `-k`, the port file) are in `process.rs`, which says why they come in this order; what
//! a panic does (it ends the process: `crash.rs`) is set before anything else.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use server::cli::{self, CliExit, StorageError, EXIT_OS_ERROR, EXIT_USAGE};
use server::process::{self, Readiness, StartupError};
use server::runtime::Server;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
use signal_hook::iterator::Signals;

fn main() -> ExitCode {
    // First: a panic in any thread, from here on, aborts the process (`crash.rs`).
    server::crash::install_panic_hook();
    let mut config = match cli::parse(std::env::args_os()) {
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
    for warning in &config.warnings {
        eprintln!("fogcached: warning: {warning}");
    }
    // Before anything starts: the default pool file needs its data directory, and a
    // NUMA node that does not exist is the operator's mistake, reported as such.
    match cli::prepare_storage(&config) {
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
    // Credentials files are read before daemonizing, so a bad one is reported here.
    if let Err(message) = cli::load_security(&mut config) {
        eprintln!("fogcached: {message}");
        return ExitCode::from(EXIT_USAGE);
    }
    if config.enable_coredumps {
        if let Err((code, message)) = process::raise_core_limit() {
            eprintln!("fogcached: {message}");
            return ExitCode::from(code);
        }
    }
    // A daemon forks before any thread exists; its parent waits here for the outcome.
    let readiness = if config.daemonize {
        match std::env::current_dir() {
            Ok(cwd) => config.make_paths_absolute(&cwd),
            Err(e) => {
                eprintln!("fogcached: cannot read the working directory: {e}");
                return ExitCode::from(EXIT_OS_ERROR);
            }
        }
        match process::daemonize(config.enable_coredumps, config.verbosity > 0) {
            Ok(readiness) => Some(readiness),
            Err((code, message)) => {
                eprintln!("fogcached: {message}");
                return ExitCode::from(code);
            }
        }
    } else {
        None
    };
    let pid_file = config.pid_file.clone();
    let code = run(config, readiness);
    if let Some(path) = pid_file {
        // At a clean stop, as memcached does; a stop as another user may not be allowed.
        let _ = std::fs::remove_file(path);
    }
    code
}

/// Starts the server and serves until it is told to stop. Every start-up failure goes to
/// the daemon's waiting parent as well as to stderr.
fn run(config: cli::Config, readiness: Option<Readiness>) -> ExitCode {
    let fail = |readiness: Option<Readiness>, (code, message): StartupError| {
        eprintln!("fogcached: {message}");
        if let Some(readiness) = readiness {
            readiness.report(Err((code, message)));
        }
        ExitCode::from(code)
    };
    // Signals are caught before any thread starts, so every thread inherits the mask
    // state signal-hook expects and no SIGTERM can arrive unhandled.
    // SIGUSR1 is memcached's graceful stop (for its warm restart): the same clean stop.
    // SIGHUP reloads the TLS certificates (`refresh_certs`), for `systemctl reload`.
    // Test builds only: SIGUSR2 makes the thread named in the environment panic.
    #[cfg(feature = "test-hooks")]
    let panic_thread = std::env::var(server::crash::TEST_PANIC_THREAD_ENV).ok();
    #[cfg(feature = "test-hooks")]
    let test_signal = panic_thread.as_ref().map(|thread| {
        eprintln!("fogcached: test build: SIGUSR2 makes thread '{thread}' panic");
        signal_hook::consts::SIGUSR2
    });
    #[cfg(not(feature = "test-hooks"))]
    let test_signal: Option<i32> = None;
    let caught: Vec<i32> = [SIGTERM, SIGINT, SIGUSR1, SIGHUP]
        .into_iter()
        .chain(test_signal)
        .collect();
    let mut signals = match Signals::new(&caught) {
        Ok(signals) => signals,
        Err(e) => {
            let message = format!("cannot install signal handlers: {e}");
            return fail(readiness, (EXIT_OS_ERROR, message));
        }
    };
    let (user, lock_memory, large_pages, pid_file) = (
        config.user.clone(),
        config.lock_memory,
        config.large_pages,
        config.pid_file.clone(),
    );
    let verbose = config.verbosity > 0;
    let tls = config.tls_context.clone();
    let server = match Server::start(config) {
        Ok(server) => server,
        Err(e) => return fail(readiness, (EXIT_OS_ERROR, format!("{e:#}"))),
    };
    let started = (|| -> Result<(), StartupError> {
        if large_pages {
            if let Err(e) = server.engine().advise_dram_huge_pages() {
                eprintln!("fogcached: warning: -L: no large pages for the DRAM tier: {e}");
            }
        }
        if lock_memory {
            if let Err(e) = process::lock_memory() {
                eprintln!("fogcached: warning: -k invalid, mlockall() failed: {e}");
            }
        }
        if let Some(path) = &pid_file {
            process::write_pid_file(path)?;
        }
        if let Some(path) = std::env::var_os(process::PORT_FILE_ENV) {
            process::write_port_file(
                std::path::Path::new(&path),
                server.local_addrs(),
                server.udp_addrs(),
            )?;
        }
        if let Some(user) = &user {
            match process::switch_user(user)? {
                true if verbose => eprintln!("fogcached: running as user {user}"),
                true => {}
                false => eprintln!("fogcached: -u {user} ignored: not started as root"),
            }
        }
        Ok(())
    })();
    if let Err(error) = started {
        server.stop();
        return fail(readiness, error);
    }
    let shutdown = server.shutdown_handle();
    #[cfg(feature = "test-hooks")]
    let hooked_engine = std::sync::Arc::clone(server.engine());
    let signal_thread = std::thread::Builder::new()
        .name("fc-signals".to_owned())
        .spawn(move || {
            for signal in signals.forever() {
                #[cfg(feature = "test-hooks")]
                if signal == signal_hook::consts::SIGUSR2 {
                    if let Some(thread) = &panic_thread {
                        engine::fault::arm_panic(thread);
                        // After the arming: a test pokes the thread once it reads this.
                        eprintln!("fogcached: test build: panic armed for thread '{thread}'");
                        hooked_engine.wake_background();
                    }
                    engine::fault::panic_point();
                    continue;
                }
                if signal != SIGHUP {
                    shutdown.request();
                    break;
                }
                match &tls {
                    Some(tls) => match tls.refresh() {
                        Ok(()) => eprintln!("fogcached: SIGHUP: TLS certificates reloaded"),
                        Err(e) => eprintln!("fogcached: SIGHUP: certificates kept: {e}"),
                    },
                    None => eprintln!("fogcached: SIGHUP ignored: TLS (-Z) is off"),
                }
            }
        });
    if let Err(e) = signal_thread {
        server.stop();
        return fail(
            readiness,
            (
                EXIT_OS_ERROR,
                format!("cannot start the signal thread: {e}"),
            ),
        );
    }
    if let Some(readiness) = readiness {
        readiness.report(Ok(()));
    }
    // Every listener accepts now: tell systemd (`Type=notify`).
    let ready = format!("READY=1\nMAINPID={}\n", std::process::id());
    if let Err(e) = process::notify_systemd(&ready) {
        eprintln!("fogcached: warning: cannot notify systemd of readiness: {e}");
    }
    server.wait_then(|| {
        // The stop (and a clean stop's write-down) may take a while.
        let _ = process::notify_systemd("STOPPING=1\n");
    });
    ExitCode::SUCCESS
}
