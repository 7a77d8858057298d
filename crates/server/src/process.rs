//! Process-level start-up that memcached's command line offers: `-d` (daemonize), `-P`
//! (PID file), `-u` (drop root), `-r` (core limit), `-k` (lock memory) and the port file
//! named by `MEMCACHED_PORT_FILENAME`, which test harnesses and scripts read.
//!
//! Order matters, and `main` follows it: daemonize before any thread exists (a fork
//! copies only the calling thread); then start the server (ports bound, pool open);
//! then lock memory, write the PID and port files, drop root; and only then tell the
//! waiting parent of a daemon that the server is up, so `fogcached -d` returns 0 exactly
//! when the server listens and a failure to start is its exit status and message.

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

/// The environment variable naming memcached's port file.
pub const PORT_FILE_ENV: &str = "MEMCACHED_PORT_FILENAME";
/// The environment variable systemd sets for a `Type=notify` service: the datagram
/// socket that readiness and stopping messages go to (sd_notify(3)).
pub const NOTIFY_SOCKET_ENV: &str = "NOTIFY_SOCKET";

/// sysexits.h `EX_NOUSER`: memcached's exit code when `-u` names no user.
pub const EXIT_NO_USER: u8 = 67;

/// The daemon's end of the pipe its parent waits on.
pub struct Readiness {
    pipe: File,
}

impl Readiness {
    /// Tells the waiting parent the outcome: it exits 0, or prints `message` and exits
    /// with `code`.
    pub fn report(mut self, outcome: Result<(), (u8, String)>) {
        let message = match outcome {
            Ok(()) => "0\n".to_owned(),
            Err((code, message)) => format!("{code} {message}\n"),
        };
        // The parent may be gone (killed); the daemon runs on regardless.
        let _ = self.pipe.write_all(message.as_bytes());
    }
}

/// What a failed step of start-up returns: an exit code and a message for stderr.
pub type StartupError = (u8, String);

/// Forks into the background (memcached's `daemon(3)` call: a child in a new session,
/// stdin/stdout/stderr on /dev/null unless `keep_stdio`, the working directory `/`
/// unless `keep_cwd`). In the parent this never returns: it waits for the child's
/// [`Readiness::report`] and exits with it. Call it before any thread is started.
pub fn daemonize(keep_cwd: bool, keep_stdio: bool) -> Result<Readiness, StartupError> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe(2) to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(os_error("cannot create the daemon's start-up pipe"));
    }
    // SAFETY: pipe2 returned two new descriptors that nothing else owns.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fork(2) in a process with one thread (the caller's contract): the child
    // continues with a copy of this thread only, which is all there is.
    match unsafe { libc::fork() } {
        -1 => Err(os_error("cannot fork the daemon")),
        0 => {
            drop(read_end);
            // SAFETY: setsid(2) has no memory-safety preconditions.
            if unsafe { libc::setsid() } == -1 {
                return Err(os_error("setsid"));
            }
            if !keep_cwd {
                std::env::set_current_dir("/")
                    .map_err(|e| (crate::cli::EXIT_OS_ERROR, format!("chdir /: {e}")))?;
            }
            if !keep_stdio {
                redirect_stdio_to_dev_null()?;
            }
            Ok(Readiness {
                pipe: File::from(write_end),
            })
        }
        _child => {
            drop(write_end);
            let mut answer = String::new();
            let read = File::from(read_end).read_to_string(&mut answer);
            let answer = answer.trim_end();
            match (read, answer.split_once(' ')) {
                (Ok(_), None) if answer == "0" => std::process::exit(0),
                (Ok(_), Some((code, message))) => {
                    eprintln!("fogcached: {message}");
                    std::process::exit(code.parse().unwrap_or(1));
                }
                _ => {
                    eprintln!("fogcached: the daemon exited before it was ready");
                    std::process::exit(i32::from(crate::cli::EXIT_OS_ERROR));
                }
            }
        }
    }
}

fn redirect_stdio_to_dev_null() -> Result<(), StartupError> {
    let null = File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| (crate::cli::EXIT_OS_ERROR, format!("/dev/null: {e}")))?;
    use std::os::fd::AsRawFd;
    for target in [libc::STDIN_FILENO, libc::STDOUT_FILENO, libc::STDERR_FILENO] {
        // SAFETY: dup2(2) on a descriptor we own onto the standard ones; Rust's std
        // holds no buffered state for them that this would break (stdout is flushed
        // per line, and nothing was printed yet).
        if unsafe { libc::dup2(null.as_raw_fd(), target) } == -1 {
            return Err(os_error("cannot redirect stdio to /dev/null"));
        }
    }
    Ok(())
}

/// `-r`: raises the core file size limit as far as allowed (unlimited if the hard
/// limit is), as memcached does.
pub fn raise_core_limit() -> Result<(), StartupError> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit for getrlimit(2) to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut limit) } != 0 {
        return Err(os_error("getrlimit(RLIMIT_CORE)"));
    }
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    let as_far_as_allowed = libc::rlimit {
        rlim_cur: limit.rlim_max,
        rlim_max: limit.rlim_max,
    };
    // SAFETY: valid rlimit structures, read by setrlimit(2) only.
    let raised = unsafe {
        libc::setrlimit(libc::RLIMIT_CORE, &unlimited) == 0
            || libc::setrlimit(libc::RLIMIT_CORE, &as_far_as_allowed) == 0
    };
    if raised {
        Ok(())
    } else {
        Err(os_error("failed to ensure corefile creation (setrlimit)"))
    }
}

/// `-k`: locks every current and future mapping in memory. memcached warns and runs on
/// when it cannot; so does the caller.
pub fn lock_memory() -> std::io::Result<()> {
    // SAFETY: mlockall(2) has no memory-safety preconditions.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `-P`: writes the PID, as memcached does (the number and a newline).
pub fn write_pid_file(path: &Path) -> Result<(), StartupError> {
    std::fs::write(path, format!("{}\n", std::process::id())).map_err(|e| {
        (
            crate::cli::EXIT_OS_ERROR,
            format!(
                "could not open the pid file {} for writing: {e}",
                path.display()
            ),
        )
    })
}

/// memcached's port file: one `TCP INET: <port>` (or `INET6`) line per listening
/// socket, then one `UDP INET: <port>` line per UDP socket (`-U`), written to
/// `<name>.lck` and renamed into place so a reader never sees half.
pub fn write_port_file(
    path: &Path,
    tcp_addrs: &[SocketAddr],
    udp_addrs: &[SocketAddr],
) -> Result<(), StartupError> {
    let mut text = String::new();
    for (transport, addrs) in [("TCP", tcp_addrs), ("UDP", udp_addrs)] {
        for addr in addrs {
            let family = if addr.is_ipv4() { "INET" } else { "INET6" };
            text.push_str(&format!("{transport} {family}: {}\n", addr.port()));
        }
    }
    let mut staging = path.as_os_str().to_owned();
    staging.push(".lck");
    let failed = |e: std::io::Error| {
        (
            crate::cli::EXIT_OS_ERROR,
            format!("cannot write the port file {}: {e}", path.display()),
        )
    };
    std::fs::write(&staging, text).map_err(failed)?;
    std::fs::rename(&staging, path).map_err(failed)
}

/// `-u`: when running as root, becomes `user` (its uid, its primary gid, no
/// supplementary groups), as memcached does. Not root: nothing to do. Every thread
/// changes (glibc's set*id apply process-wide).
pub fn switch_user(user: &str) -> Result<bool, StartupError> {
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(false);
    }
    let name = CString::new(user).map_err(|_| {
        (
            EXIT_NO_USER,
            format!("can't find the user {user:?} to switch to"),
        )
    })?;
    // SAFETY: a zeroed passwd is a valid out-parameter for getpwnam_r.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; 16 * 1024];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the call; `buffer`'s length is passed.
    let rc = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            &mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() {
        return Err((
            EXIT_NO_USER,
            format!("can't find the user {user:?} to switch to"),
        ));
    }
    // SAFETY: plain syscalls; order: groups and gid while still root, uid last.
    let switched = unsafe {
        libc::setgroups(0, std::ptr::null()) == 0
            && libc::setgid(entry.pw_gid) == 0
            && libc::setuid(entry.pw_uid) == 0
    };
    if switched {
        Ok(true)
    } else {
        Err(os_error(&format!(
            "failed to assume the identity of user {user:?}"
        )))
    }
}

fn os_error(what: &str) -> StartupError {
    (
        crate::cli::EXIT_OS_ERROR,
        format!("{what}: {}", std::io::Error::last_os_error()),
    )
}

/// Sends `state` (e.g. `READY=1`) to systemd's notification socket, as sd_notify(3)
/// does, without libsystemd: one datagram to the unix socket named by `$NOTIFY_SOCKET`
/// (a path, or an abstract name when it starts with `@`). Returns false when the
/// variable is not set (not started by systemd as `Type=notify`).
pub fn notify_systemd(state: &str) -> std::io::Result<bool> {
    let Some(target) = std::env::var_os(NOTIFY_SOCKET_ENV) else {
        return Ok(false);
    };
    let socket = std::os::unix::net::UnixDatagram::unbound()?;
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str());
    match bytes.strip_prefix(b"@") {
        Some(abstract_name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name)?;
            socket.send_to_addr(state.as_bytes(), &addr)?;
        }
        None => {
            socket.send_to(state.as_bytes(), Path::new(&target))?;
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_port_file_names_each_socket_as_memcached_does() {
        let dir = std::env::temp_dir().join(format!("fc-portfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ports");
        let addrs: Vec<SocketAddr> = vec![
            "127.0.0.1:11311".parse().unwrap(),
            "[::1]:11312".parse().unwrap(),
        ];
        let udp: Vec<SocketAddr> = vec!["127.0.0.1:11411".parse().unwrap()];
        write_port_file(&path, &addrs, &udp).unwrap();
        // memcached 1.6.18's file for -p -1 -U -1 on both families: TCP lines first.
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "TCP INET: 11311\nTCP INET6: 11312\nUDP INET: 11411\n"
        );
        assert!(
            !dir.join("ports.lck").exists(),
            "the staging file is renamed away"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
