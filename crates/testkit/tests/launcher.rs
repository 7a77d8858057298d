//! The launcher every test and benchmark server starts through (`crates/launcher`, which
//! testkit re-exports): servers started at once each get a port of their own, read back
//! from their own port file, so a client reaches the server it started and no other;
//! failures to start are bounded and say what the server printed.

use std::path::Path;
use std::time::Duration;

use testkit::launcher::{Launch, Output};
use testkit::{skip, stat, PortReservation, RawClient, ServerProcess};

const MEMCACHED: &str = "/usr/bin/memcached";

/// What a started server says its pid is, over the port the launcher read.
fn pid_over_the_wire(server: &ServerProcess) -> anyhow::Result<String> {
    let mut client = RawClient::connect(server.addr())?;
    let stats = client.stats("")?;
    stat(&stats, "pid")
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("no pid in stats"))
}

#[test]
fn servers_started_at_once_each_get_a_port_of_their_own_and_answer_on_it() -> anyhow::Result<()> {
    const FOGCACHED_SERVERS: usize = 12;
    const MEMCACHED_SERVERS: usize = 4;
    let with_memcached = Path::new(MEMCACHED).exists();
    if !with_memcached {
        skip!(
            "servers_started_at_once_each_get_a_port_of_their_own_and_answer_on_it",
            "memcached half: {MEMCACHED} is not installed"
        );
    }
    // All started together, from threads of their own, so that their start-ups overlap.
    let starters: Vec<_> = (0..FOGCACHED_SERVERS + MEMCACHED_SERVERS)
        .filter(|&i| i < FOGCACHED_SERVERS || with_memcached)
        .map(|i| {
            std::thread::spawn(move || {
                if i < FOGCACHED_SERVERS {
                    ServerProcess::fogcached(&["-m", "16", "-t", "1", "--slow-size", "0"])
                } else {
                    ServerProcess::memcached(&["-m", "16", "-t", "1"])
                }
            })
        })
        .collect();
    let servers = starters
        .into_iter()
        .map(|starter| {
            starter
                .join()
                .map_err(|_| anyhow::anyhow!("a starting thread panicked"))?
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut ports: Vec<u16> = servers.iter().map(ServerProcess::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), servers.len(), "shared ports: {ports:?}");
    // Each port is its own server's: the process that answers there is the one started.
    for server in &servers {
        let pid = server.pid().expect("running").to_string();
        assert_eq!(
            pid_over_the_wire(server)?,
            pid,
            "port {} answered for another process",
            server.port()
        );
    }
    for server in servers {
        server.stop()?;
    }
    Ok(())
}

/// The same, where collisions are certain for a launcher that picks a port before the
/// server binds it: in a network namespace of its own whose kernel hands out only 40
/// ports (20 of them to a bind of port 0), the test above runs again. Probing a free
/// port and then starting the server on it gave 16 servers 7 or 8 ports there (readiness
/// probes reached another server; one start failed with "Address already in use").
#[test]
fn servers_started_at_once_get_ports_of_their_own_even_when_the_kernel_has_few(
) -> anyhow::Result<()> {
    const TEST: &str =
        "servers_started_at_once_get_ports_of_their_own_even_when_the_kernel_has_few";
    let tools = ["/usr/bin/unshare", "/usr/sbin/ip", "/usr/sbin/sysctl"];
    if !testkit::launcher::is_root() || tools.iter().any(|tool| !Path::new(tool).exists()) {
        skip!(TEST, "needs root and {tools:?} for a network namespace");
        return Ok(());
    }
    let exe = std::env::current_exe()?;
    let script = format!(
        "ip link set lo up && sysctl -q -w net.ipv4.ip_local_port_range='40000 40039' && \
         exec '{}' --exact servers_started_at_once_each_get_a_port_of_their_own_and_answer_on_it",
        exe.display()
    );
    let mut command = std::process::Command::new("/usr/bin/unshare");
    command
        .args(["-n", "sh", "-c", &script])
        .env("FOGCACHED_BIN", testkit::fogcached_binary()?);
    let run = testkit::run_bounded(&mut command, Duration::from_secs(120))?;
    assert!(
        run.success && run.output.contains("1 passed"),
        "{}",
        run.output
    );
    Ok(())
}

/// A server that exits during start-up is reported at once, with what it printed.
#[test]
fn a_server_that_exits_at_start_up_says_why() -> anyhow::Result<()> {
    let started = ServerProcess::fogcached(&["--no-such-flag"]);
    let error = format!("{:#}", started.err().expect("fogcached started"));
    assert!(error.contains("exited during start-up"), "{error}");
    // fogcached's own words, not the command line the error names too.
    assert!(error.contains("unexpected argument"), "{error}");
    Ok(())
}

/// A program that never writes its port file is given up on after the start-up timeout,
/// killed, and what it printed is in the error.
#[test]
fn a_server_that_never_listens_is_given_up_on_and_killed() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("launcher-silent-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let script = dir.join("silent-server");
    let pid_file = dir.join("pid");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho $$ > {}\necho 'still thinking' >&2\nexec sleep 60\n",
            pid_file.display()
        ),
    )?;
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let mut launch = Launch::new(&script)?;
    launch.startup_timeout(Duration::from_secs(1));
    let error = format!("{:#}", launch.start().err().expect("a script listened"));
    assert!(error.contains("did not write its port file"), "{error}");
    assert!(error.contains("still thinking"), "{error}");
    let pid = std::fs::read_to_string(&pid_file)?;
    assert!(
        !Path::new(&format!("/proc/{}", pid.trim())).exists(),
        "the silent server was left running"
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// A server on a reserved port gets exactly that port, and, killed, comes back on it.
#[test]
fn a_reserved_port_is_the_servers_across_a_restart() -> anyhow::Result<()> {
    let reservation = PortReservation::new()?;
    for _ in 0..2 {
        let mut launch = testkit::fogcached_launch(&["-m", "16", "-t", "1", "--slow-size", "0"])?;
        launch.on_port(&reservation);
        let server = ServerProcess::launched(launch)?;
        assert_eq!(server.port(), reservation.port());
        assert_eq!(
            pid_over_the_wire(&server)?,
            server.pid().expect("running").to_string()
        );
        // Dropped: SIGKILL, as a crash would leave the port.
    }
    Ok(())
}

/// Output to a file: the error of a failed start quotes this server's lines only, not
/// what an earlier server appended to the same file.
#[test]
fn an_appended_log_is_quoted_from_where_this_server_began() -> anyhow::Result<()> {
    let log = std::env::temp_dir().join(format!("launcher-log-{}", std::process::id()));
    std::fs::write(&log, "an earlier server's line\n")?;
    let mut launch = testkit::fogcached_launch(&["--no-such-flag"])?;
    launch.output(Output::File {
        path: log.clone(),
        append: true,
    });
    let error = format!("{:#}", launch.start().err().expect("fogcached started"));
    std::fs::remove_file(&log)?;
    assert!(error.contains("unexpected argument"), "{error}");
    assert!(!error.contains("an earlier server's line"), "{error}");
    Ok(())
}
