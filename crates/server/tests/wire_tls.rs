//! TLS (`-Z`) on the wire, with certificates the test makes (rcgen): Debian's
//! `openssl s_client` and a rustls client talk to the real binary; client certificates
//! are required or refused per `ssl_verify_mode`; `refresh_certs` hands new connections
//! a new certificate; plaintext and garbage on a TLS port are closed and counted; large
//! pipelined batches and large values go through without stalling.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, HandshakeKind, RootCertStore, StreamOwned};
use testkit::{escape, stat, RawClient, ServerProcess};

const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// A scratch directory removed at the end of the test.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> anyhow::Result<Scratch> {
        let dir = std::env::temp_dir().join(format!(
            "fogcached-tls-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(Scratch(dir))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn write(&self, name: &str, contents: &[u8]) -> anyhow::Result<PathBuf> {
        let path = self.path(name);
        std::fs::write(&path, contents)?;
        Ok(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A certificate authority that signs server and client certificates.
struct Authority {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A leaf certificate and its key.
struct Leaf {
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    key_pem: String,
    key_der: Vec<u8>,
}

impl Authority {
    fn new(name: &str) -> anyhow::Result<Authority> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        Ok(Authority {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate()?)?,
        })
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    fn der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    fn leaf(&self, name: &str, purpose: ExtendedKeyUsagePurpose) -> anyhow::Result<Leaf> {
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![purpose];
        let key = KeyPair::generate()?;
        let issuer: &Issuer<'_, KeyPair> = &self.issuer;
        let cert = params.signed_by(&key, issuer)?;
        Ok(Leaf {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            key_pem: key.serialize_pem(),
            key_der: key.serialize_der(),
        })
    }
}

/// A server certificate signed by `ca`, written as cert.pem and key.pem.
fn server_files(scratch: &Scratch, ca: &Authority) -> anyhow::Result<(Leaf, PathBuf, PathBuf)> {
    let leaf = ca.leaf("fogcached test server", ExtendedKeyUsagePurpose::ServerAuth)?;
    let cert = scratch.write("cert.pem", leaf.cert_pem.as_bytes())?;
    let key = scratch.write("key.pem", leaf.key_pem.as_bytes())?;
    Ok((leaf, cert, key))
}

fn path_str(path: &Path) -> anyhow::Result<&str> {
    path.to_str().context("scratch path is not UTF-8")
}

fn tls_server(suboptions: &str, extra: &[&str]) -> anyhow::Result<ServerProcess> {
    let mut args = vec!["-Z", "-o", suboptions, "--slow-size", "0"];
    args.extend_from_slice(extra);
    ServerProcess::fogcached(&args)
}

/// A client configuration trusting `ca`, with `client` as its certificate if given.
fn client_config(ca: &Authority, client: Option<&Leaf>) -> anyhow::Result<Arc<ClientConfig>> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.der())?;
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some(leaf) => builder.with_client_auth_cert(
            vec![leaf.cert_der.clone()],
            PrivateKeyDer::try_from(leaf.key_der.clone()).map_err(anyhow::Error::msg)?,
        )?,
    };
    Ok(Arc::new(config))
}

/// A blocking rustls client.
struct TlsClient {
    stream: StreamOwned<ClientConnection, TcpStream>,
    pending: Vec<u8>,
}

impl TlsClient {
    /// Connects and completes the handshake (the server's verdict on a client
    /// certificate may only show at the first read, as TLS 1.3 has it).
    fn connect(
        addr: SocketAddr,
        ca: &Authority,
        client: Option<&Leaf>,
    ) -> anyhow::Result<TlsClient> {
        Self::connect_with(addr, client_config(ca, client)?)
    }

    /// Connects with a given client configuration (one shared by several connections
    /// resumes their sessions).
    fn connect_with(addr: SocketAddr, config: Arc<ClientConfig>) -> anyhow::Result<TlsClient> {
        let server_name = ServerName::try_from("localhost")?;
        let mut connection = ClientConnection::new(config, server_name)?;
        let mut tcp = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
        tcp.set_read_timeout(Some(IO_TIMEOUT))?;
        tcp.set_write_timeout(Some(IO_TIMEOUT))?;
        while connection.is_handshaking() {
            connection.complete_io(&mut tcp)?;
        }
        Ok(TlsClient {
            stream: StreamOwned::new(connection, tcp),
            pending: Vec::new(),
        })
    }

    fn peer_certificate(&self) -> Option<CertificateDer<'static>> {
        self.stream
            .conn
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|cert| cert.clone().into_owned())
    }

    fn send(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()?;
        Ok(())
    }

    /// Reads until the buffered reply ends with `terminator`; bytes after it stay.
    fn read_until(&mut self, terminator: &[u8]) -> anyhow::Result<Vec<u8>> {
        let deadline = Instant::now() + IO_TIMEOUT;
        loop {
            if let Some(at) = self
                .pending
                .windows(terminator.len())
                .position(|w| w == terminator)
            {
                let rest = self.pending.split_off(at + terminator.len());
                return Ok(std::mem::replace(&mut self.pending, rest));
            }
            if Instant::now() > deadline {
                bail!("no {:?} within {IO_TIMEOUT:?}", escape(terminator));
            }
            let mut chunk = vec![0u8; 256 * 1024];
            let read = self.stream.read(&mut chunk)?;
            if read == 0 {
                bail!(
                    "closed before {:?}; got {:?}",
                    escape(terminator),
                    escape(&self.pending)
                );
            }
            self.pending.extend_from_slice(&chunk[..read]);
        }
    }

    fn request(&mut self, bytes: &[u8], terminator: &[u8]) -> anyhow::Result<Vec<u8>> {
        self.send(bytes)?;
        self.read_until(terminator)
    }

    /// `stats [group]` as (name, value) pairs.
    fn stats(&mut self, group: &str) -> anyhow::Result<Vec<(String, String)>> {
        let command = format!("stats {group}\r\n");
        let reply = String::from_utf8(self.request(command.as_bytes(), b"END\r\n")?)?;
        Ok(reply
            .lines()
            .filter_map(|line| line.strip_prefix("STAT "))
            .map(|rest| {
                let (name, value) = rest.split_once(' ').unwrap_or((rest, ""));
                (name.to_owned(), value.to_owned())
            })
            .collect())
    }
}

/// memcached's `ssl_handshake_errors`.
fn handshake_errors(client: &mut TlsClient) -> anyhow::Result<u64> {
    let stats = client.stats("")?;
    Ok(stat(&stats, "ssl_handshake_errors")
        .context("no ssl_handshake_errors")?
        .parse()?)
}

/// Whether a client whose handshake "succeeded" is refused at its first request: the
/// server's alert (or close) shows there under TLS 1.3.
fn refused_at_first_request(addr: SocketAddr, ca: &Authority, client: Option<&Leaf>) -> bool {
    let Ok(mut connection) = TlsClient::connect(addr, ca, client) else {
        return true;
    };
    connection.request(b"version\r\n", b"\r\n").is_err()
}

#[test]
fn openssl_s_client_talks_to_fogcached() -> anyhow::Result<()> {
    if Command::new("openssl").arg("version").output().is_err() {
        testkit::skip!(
            "openssl_s_client_talks_to_fogcached",
            "no openssl CLI (Debian package openssl)"
        );
        return Ok(());
    }
    let scratch = Scratch::new("s_client")?;
    let ca = Authority::new("s_client CA")?;
    let ca_file = scratch.write("ca.pem", ca.pem().as_bytes())?;
    let (_, cert, key) = server_files(&scratch, &ca)?;
    let server = tls_server(
        &format!(
            "ssl_chain_cert={},ssl_key={}",
            path_str(&cert)?,
            path_str(&key)?
        ),
        &[],
    )?;
    let mut child = Command::new("openssl")
        .args(["s_client", "-quiet", "-verify_return_error", "-CAfile"])
        .arg(&ca_file)
        .args(["-connect", &format!("127.0.0.1:{}", server.port())])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .context("s_client stdin")?
        .write_all(b"set greeting 5 0 5\r\nhello\r\nget greeting\r\nquit\r\n")?;
    let deadline = Instant::now() + IO_TIMEOUT;
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            child.kill()?;
            bail!("openssl s_client did not finish within {IO_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        stdout,
        "STORED\r\nVALUE greeting 5 5\r\nhello\r\nEND\r\n",
        "s_client stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

#[test]
fn pipelined_batches_and_large_values_do_not_stall() -> anyhow::Result<()> {
    let scratch = Scratch::new("bulk")?;
    let ca = Authority::new("bulk CA")?;
    let (_, cert, key) = server_files(&scratch, &ca)?;
    let server = tls_server(
        &format!(
            "ssl_chain_cert={},ssl_key={}",
            path_str(&cert)?,
            path_str(&key)?
        ),
        &["-m", "256", "-I", "2m"],
    )?;
    let mut client = TlsClient::connect(server.addr(), &ca, None)?;

    // 3000 sets then 3000 gets in one write: replies span many TLS records and reads.
    const KEYS: usize = 3000;
    let value = |i: usize| format!("{i:0>96}");
    let mut batch = Vec::new();
    for i in 0..KEYS {
        batch.extend_from_slice(format!("set key{i} {i} 0 96\r\n{}\r\n", value(i)).as_bytes());
    }
    for i in 0..KEYS {
        batch.extend_from_slice(format!("get key{i}\r\n").as_bytes());
    }
    client.send(&batch)?;
    for i in 0..KEYS {
        assert_eq!(client.read_until(b"\r\n")?, b"STORED\r\n", "set {i}");
    }
    for i in 0..KEYS {
        let expected = format!("VALUE key{i} {i} 96\r\n{}\r\nEND\r\n", value(i));
        assert_eq!(
            escape(&client.read_until(b"END\r\n")?),
            escape(expected.as_bytes())
        );
    }

    // Four values of 1.5 MB pipelined both ways: the server's socket fills, so replies
    // wait in rustls as ciphertext and must go out when the socket drains.
    const LARGE_BYTES: usize = 1_500_000;
    let large = |i: usize| -> Vec<u8> {
        (0..LARGE_BYTES)
            .map(|j| (j.wrapping_mul(31).wrapping_add(i * 7) % 251) as u8)
            .collect()
    };
    let mut batch = Vec::new();
    for i in 0..4 {
        batch.extend_from_slice(format!("set large{i} 0 0 {LARGE_BYTES}\r\n").as_bytes());
        batch.extend_from_slice(&large(i));
        batch.extend_from_slice(b"\r\n");
    }
    batch.extend_from_slice(b"get large0 large1 large2 large3\r\n");
    client.send(&batch)?;
    for _ in 0..4 {
        assert_eq!(client.read_until(b"\r\n")?, b"STORED\r\n");
    }
    for i in 0..4 {
        let header = client.read_until(b"\r\n")?;
        assert_eq!(
            escape(&header),
            escape(format!("VALUE large{i} 0 {LARGE_BYTES}\r\n").as_bytes())
        );
        while client.pending.len() < LARGE_BYTES + 2 {
            let mut chunk = vec![0u8; 256 * 1024];
            let read = client.stream.read(&mut chunk)?;
            if read == 0 {
                bail!("closed inside value {i}");
            }
            client.pending.extend_from_slice(&chunk[..read]);
        }
        let rest = client.pending.split_off(LARGE_BYTES + 2);
        let body = std::mem::replace(&mut client.pending, rest);
        assert!(body[..LARGE_BYTES] == large(i)[..], "value {i} differs");
        assert_eq!(&body[LARGE_BYTES..], b"\r\n");
    }
    assert_eq!(client.read_until(b"\r\n")?, b"END\r\n");
    Ok(())
}

#[test]
fn session_cache_resumes_sessions_and_counts_them() -> anyhow::Result<()> {
    let scratch = Scratch::new("sessions")?;
    let ca = Authority::new("sessions CA")?;
    let (_, cert, key) = server_files(&scratch, &ca)?;
    let files = format!(
        "ssl_chain_cert={},ssl_key={}",
        path_str(&cert)?,
        path_str(&key)?
    );
    for (cache, expected) in [(true, HandshakeKind::Resumed), (false, HandshakeKind::Full)] {
        let suboptions = if cache {
            format!("{files},ssl_session_cache")
        } else {
            files.clone()
        };
        let server = tls_server(&suboptions, &[])?;
        let config = client_config(&ca, None)?;
        let mut first = TlsClient::connect_with(server.addr(), Arc::clone(&config))?;
        // Reading a reply also takes in the session tickets sent after the handshake.
        assert!(first
            .request(b"version\r\n", b"\r\n")?
            .starts_with(b"VERSION "));
        let mut second = TlsClient::connect_with(server.addr(), config)?;
        assert_eq!(
            second.stream.conn.handshake_kind(),
            Some(expected),
            "ssl_session_cache {cache}"
        );
        let stats = second.stats("")?;
        let new_sessions = stat(&stats, "ssl_new_sessions");
        if cache {
            let count: u64 = new_sessions.context("ssl_new_sessions")?.parse()?;
            assert!(count >= 1, "{count} sessions stored");
        } else {
            assert_eq!(
                new_sessions, None,
                "memcached prints it only with the cache"
            );
        }
    }
    Ok(())
}

/// With a TLS output buffer larger than the socket's (`ssl_wbuf_size`), one reply is
/// taken whole as plaintext while part of its ciphertext waits for the socket. The client
/// reads only after a pause, so the rest must go out at a later writable event: a
/// connection that counted only its own output as pending would never send it.
#[test]
fn a_reply_larger_than_the_socket_reaches_a_late_reader() -> anyhow::Result<()> {
    let scratch = Scratch::new("late")?;
    let ca = Authority::new("late CA")?;
    let (_, cert, key) = server_files(&scratch, &ca)?;
    let server = tls_server(
        &format!(
            "ssl_chain_cert={},ssl_key={},ssl_wbuf_size=16384",
            path_str(&cert)?,
            path_str(&key)?
        ),
        &["-I", "4m"],
    )?;
    // Two values of 3 MB: more than a loopback socket pair holds (a 4 MiB send buffer at
    // most, and a receive buffer that does not grow while its reader sleeps).
    const VALUE_BYTES: usize = 3_000_000;
    let value =
        |key: usize| -> Vec<u8> { (0..VALUE_BYTES).map(|i| ((i + key) % 249) as u8).collect() };
    let mut writer = TlsClient::connect(server.addr(), &ca, None)?;
    for key in 0..2 {
        let mut set = format!("set big{key} 0 0 {VALUE_BYTES}\r\n").into_bytes();
        set.extend_from_slice(&value(key));
        set.extend_from_slice(b"\r\n");
        assert_eq!(writer.request(&set, b"\r\n")?, b"STORED\r\n");
    }

    let mut reader = TlsClient::connect(server.addr(), &ca, None)?;
    for round in 0..2 {
        reader.send(b"get big0 big1\r\n")?;
        // The server writes what the socket takes and keeps the rest.
        std::thread::sleep(Duration::from_millis(500));
        for key in 0..2 {
            let header = reader.read_until(b"\r\n")?;
            assert_eq!(
                escape(&header),
                escape(format!("VALUE big{key} 0 {VALUE_BYTES}\r\n").as_bytes()),
                "round {round}"
            );
            while reader.pending.len() < VALUE_BYTES + 2 {
                let mut chunk = vec![0u8; 256 * 1024];
                let read = reader.stream.read(&mut chunk).with_context(|| {
                    format!("round {round}, big{key}: {} bytes in", reader.pending.len())
                })?;
                if read == 0 {
                    bail!("round {round}: closed");
                }
                reader.pending.extend_from_slice(&chunk[..read]);
            }
            let rest = reader.pending.split_off(VALUE_BYTES + 2);
            let body = std::mem::replace(&mut reader.pending, rest);
            assert!(
                body[..VALUE_BYTES] == value(key)[..],
                "round {round}: big{key} differs"
            );
            assert_eq!(&body[VALUE_BYTES..], b"\r\n", "round {round}");
        }
        assert_eq!(reader.read_until(b"\r\n")?, b"END\r\n", "round {round}");
    }
    Ok(())
}

#[test]
fn client_certificates_are_required_or_refused() -> anyhow::Result<()> {
    let scratch = Scratch::new("mtls")?;
    let ca = Authority::new("trusted CA")?;
    let rogue = Authority::new("rogue CA")?;
    let ca_file = scratch.write("ca.pem", ca.pem().as_bytes())?;
    let (_, cert, key) = server_files(&scratch, &ca)?;
    let good = ca.leaf("good client", ExtendedKeyUsagePurpose::ClientAuth)?;
    let bad = rogue.leaf("rogue client", ExtendedKeyUsagePurpose::ClientAuth)?;
    let files = format!(
        "ssl_chain_cert={},ssl_key={},ssl_ca_cert={}",
        path_str(&cert)?,
        path_str(&key)?,
        path_str(&ca_file)?
    );

    // 2: required.
    let required = tls_server(&format!("{files},ssl_verify_mode=2"), &[])?;
    let mut client = TlsClient::connect(required.addr(), &ca, Some(&good))?;
    // Counted from here: only this test's connections below are the failures to see.
    let errors_before = handshake_errors(&mut client)?;
    assert!(
        refused_at_first_request(required.addr(), &ca, None),
        "no certificate"
    );
    assert!(
        refused_at_first_request(required.addr(), &ca, Some(&bad)),
        "rogue CA"
    );
    assert!(client
        .request(b"version\r\n", b"\r\n")?
        .starts_with(b"VERSION "));
    let settings = client.stats("settings")?;
    assert_eq!(stat(&settings, "ssl_verify_mode"), Some("2"));
    assert_eq!(stat(&settings, "ssl_ca_cert"), Some(path_str(&ca_file)?));
    assert_eq!(handshake_errors(&mut client)? - errors_before, 2);

    // 1: requested, verified when sent.
    let requested = tls_server(&format!("{files},ssl_verify_mode=1"), &[])?;
    let mut anonymous = TlsClient::connect(requested.addr(), &ca, None)?;
    assert!(anonymous
        .request(b"version\r\n", b"\r\n")?
        .starts_with(b"VERSION "));
    assert!(
        refused_at_first_request(requested.addr(), &ca, Some(&bad)),
        "rogue CA"
    );
    let mut client = TlsClient::connect(requested.addr(), &ca, Some(&good))?;
    assert!(client
        .request(b"version\r\n", b"\r\n")?
        .starts_with(b"VERSION "));
    Ok(())
}

#[test]
fn refresh_certs_serves_new_certificates_to_new_connections() -> anyhow::Result<()> {
    let scratch = Scratch::new("refresh")?;
    let ca = Authority::new("refresh CA")?;
    let (first, cert, key) = server_files(&scratch, &ca)?;
    let server = tls_server(
        &format!(
            "ssl_chain_cert={},ssl_key={}",
            path_str(&cert)?,
            path_str(&key)?
        ),
        &[],
    )?;
    let mut old = TlsClient::connect(server.addr(), &ca, None)?;
    assert_eq!(old.peer_certificate(), Some(first.cert_der.clone()));
    assert_eq!(
        old.request(b"set k 0 0 2\r\nv1\r\n", b"\r\n")?,
        b"STORED\r\n"
    );

    // A new certificate and key in the same files: new connections get it.
    let (second, _, _) = server_files(&scratch, &ca)?;
    assert_ne!(second.cert_der, first.cert_der);
    assert_eq!(old.request(b"refresh_certs\r\n", b"\r\n")?, b"OK\r\n");
    let mut new = TlsClient::connect(server.addr(), &ca, None)?;
    assert_eq!(new.peer_certificate(), Some(second.cert_der.clone()));
    assert_eq!(
        new.request(b"get k\r\n", b"END\r\n")?,
        b"VALUE k 0 2\r\nv1\r\nEND\r\n"
    );
    // The established connection carries on with the old session.
    assert_eq!(
        old.request(b"get k\r\n", b"END\r\n")?,
        b"VALUE k 0 2\r\nv1\r\nEND\r\n"
    );
    let stats = new.stats("")?;
    let since: u64 = stat(&stats, "time_since_server_cert_refresh")
        .context("time_since_server_cert_refresh")?
        .parse()?;
    assert!(since <= 5, "refreshed {since} s ago");

    // A broken key file: the refresh says why and changes nothing.
    std::fs::write(&key, b"not a key")?;
    let reply = String::from_utf8(new.request(b"refresh_certs\r\n", b"\r\n")?)?;
    assert!(
        reply.starts_with(&format!("Error loading the key: {} : ", key.display())),
        "{reply}"
    );
    let third = TlsClient::connect(server.addr(), &ca, None)?;
    assert_eq!(third.peer_certificate(), Some(second.cert_der.clone()));

    // SIGHUP does the same (fogcached's addition, for `systemctl reload`).
    let (fourth, _, _) = server_files(&scratch, &ca)?;
    server.signal(libc::SIGHUP)?;
    let deadline = Instant::now() + IO_TIMEOUT;
    loop {
        let client = TlsClient::connect(server.addr(), &ca, None)?;
        if client.peer_certificate() == Some(fourth.cert_der.clone()) {
            break;
        }
        if Instant::now() > deadline {
            bail!("SIGHUP did not reload the certificate within {IO_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        new.request(b"get k\r\n", b"END\r\n")?,
        b"VALUE k 0 2\r\nv1\r\nEND\r\n"
    );
    Ok(())
}

#[test]
fn plaintext_and_garbage_on_a_tls_port_are_closed_and_counted() -> anyhow::Result<()> {
    let scratch = Scratch::new("garbage")?;
    let ca = Authority::new("garbage CA")?;
    let (_, cert, key) = server_files(&scratch, &ca)?;
    // Port 0: the kernel picks it, and the port file lists it after the TLS one.
    let server = tls_server(
        &format!(
            "ssl_chain_cert={},ssl_key={}",
            path_str(&cert)?,
            path_str(&key)?
        ),
        &["-l", "notls:127.0.0.1:0"],
    )?;
    let ports = server.tcp_ports();
    anyhow::ensure!(ports.len() == 2, "listening on {ports:?}");
    let plain_port = ports[1];
    let mut client = TlsClient::connect(server.addr(), &ca, None)?;
    assert_eq!(
        client.request(b"set k 0 0 2\r\nv1\r\n", b"\r\n")?,
        b"STORED\r\n"
    );

    // Counted from here: only this test's connections below are the failures to see.
    let errors_before = handshake_errors(&mut client)?;
    let mut plaintext = RawClient::connect(server.addr())?;
    plaintext.send(b"get k\r\n")?;
    assert!(plaintext.is_closed_by_peer(), "plaintext on the TLS port");
    let mut garbage = RawClient::connect(server.addr())?;
    garbage.send(b"\x16\x03\x01\x00\x05hello")?;
    assert!(garbage.is_closed_by_peer(), "a bogus handshake record");
    let mut binary_noise = RawClient::connect(server.addr())?;
    binary_noise.send(&[0x80; 64])?;
    assert!(binary_noise.is_closed_by_peer(), "binary noise");

    // The established client was not harmed, and the failures were counted.
    assert_eq!(
        client.request(b"get k\r\n", b"END\r\n")?,
        b"VALUE k 0 2\r\nv1\r\nEND\r\n"
    );
    assert_eq!(handshake_errors(&mut client)? - errors_before, 3);
    let settings = client.stats("settings")?;
    assert_eq!(stat(&settings, "ssl_enabled"), Some("yes"));
    assert_eq!(stat(&settings, "ssl_chain_cert"), Some(path_str(&cert)?));
    assert_eq!(stat(&settings, "ssl_min_version"), Some("tlsv1.2"));

    // The notls: address speaks plain text to the same cache.
    let plain_addr: SocketAddr = format!("127.0.0.1:{plain_port}").parse()?;
    let mut plain = RawClient::connect(plain_addr)?;
    assert_eq!(
        plain.request(b"get k\r\n", b"END\r\n")?,
        b"VALUE k 0 2\r\nv1\r\nEND\r\n"
    );
    Ok(())
}

#[test]
fn tls_options_rustls_cannot_honour_are_refused_at_start_up() -> anyhow::Result<()> {
    let scratch = Scratch::new("refused")?;
    let ca = Authority::new("refused CA")?;
    let (_, cert, key) = server_files(&scratch, &ca)?;
    let files = format!(
        "ssl_chain_cert={},ssl_key={}",
        path_str(&cert)?,
        path_str(&key)?
    );
    let missing = scratch.path("missing.pem");
    let cases = [
        (vec!["-Z".to_owned()], "-Z needs a certificate"),
        (
            vec![
                "-Z".to_owned(),
                "-o".to_owned(),
                format!("ssl_chain_cert={}", missing.display()),
            ],
            "Error loading the certificate chain",
        ),
        (
            vec![
                "-Z".to_owned(),
                "-o".to_owned(),
                format!("{files},ssl_min_version=1"),
            ],
            "only TLS 1.2 and 1.3",
        ),
        (
            vec![
                "-Z".to_owned(),
                "-o".to_owned(),
                format!("{files},ssl_kernel_tls"),
            ],
            "ssl_kernel_tls is not supported",
        ),
        (
            vec![
                "-Z".to_owned(),
                "-o".to_owned(),
                format!("{files},ssl_verify_mode=2"),
            ],
            "needs -o ssl_ca_cert",
        ),
        (
            vec![
                "-Z".to_owned(),
                "-o".to_owned(),
                format!("{files},ssl_ciphers=HIGH:!aNULL"),
            ],
            "not a cipher suite fogcached can offer",
        ),
        (
            vec![
                "-Z".to_owned(),
                "-o".to_owned(),
                format!("{files},ssl_keyformat=3"),
            ],
            "ENGINE",
        ),
    ];
    let binary = testkit::fogcached_binary()?;
    for (args, expected) in cases {
        let output = Command::new(&binary)
            .args(["-p", "0", "-l", "127.0.0.1", "--slow-size", "0"])
            .args(&args)
            .stdin(Stdio::null())
            .output()?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    // Suites rustls has are accepted by OpenSSL name, and the handshake uses them.
    let server = tls_server(
        &format!("{files},ssl_ciphers=ECDHE-ECDSA-AES128-GCM-SHA256,ssl_min_version=2"),
        &[],
    )?;
    let mut client = TlsClient::connect(server.addr(), &ca, None)?;
    assert!(client
        .request(b"version\r\n", b"\r\n")?
        .starts_with(b"VERSION "));
    Ok(())
}

/// The same certificate files and `-o ssl_*` options give the same `stats settings`
/// lines and `refresh_certs` replies as Debian's memcached 1.6.18 (built with OpenSSL).
#[test]
fn tls_settings_and_replies_match_memcached() -> anyhow::Result<()> {
    let scratch = Scratch::new("pair")?;
    let ca = Authority::new("pair CA")?;
    let ca_file = scratch.write("ca.pem", ca.pem().as_bytes())?;
    let (_, cert, key) = server_files(&scratch, &ca)?;
    let suboptions = format!(
        "ssl_chain_cert={},ssl_key={},ssl_ca_cert={},ssl_verify_mode=1,ssl_session_cache,ssl_wbuf_size=32,ssl_min_version=3",
        path_str(&cert)?,
        path_str(&key)?,
        path_str(&ca_file)?
    );
    let memcached = match ServerProcess::memcached(&["-Z", "-o", &suboptions]) {
        Ok(server) => server,
        Err(e) => {
            testkit::skip!(
                "tls_settings_and_replies_match_memcached",
                "no memcached with TLS: {e:#}"
            );
            return Ok(());
        }
    };
    let fogcached = tls_server(&suboptions, &[])?;
    let mut replies = Vec::new();
    for server in [&memcached, &fogcached] {
        let mut client = TlsClient::connect(server.addr(), &ca, None)?;
        let settings: Vec<(String, String)> = client
            .stats("settings")?
            .into_iter()
            .filter(|(name, _)| name.starts_with("ssl_"))
            .collect();
        let stats: Vec<String> = client
            .stats("")?
            .into_iter()
            .map(|(name, _)| name)
            .filter(|name| name.starts_with("ssl_") || name.contains("cert_refresh"))
            .collect();
        // `stats reset` clears the TLS counters on both.
        assert_eq!(client.request(b"stats reset\r\n", b"\r\n")?, b"RESET\r\n");
        let after_reset = client.stats("")?;
        assert_eq!(stat(&after_reset, "ssl_handshake_errors"), Some("0"));
        let refresh = client.request(b"refresh_certs\r\n", b"\r\n")?;
        let silent_refresh = client.request(b"refresh_certs noreply\r\nversion\r\n", b"\r\n")?;
        replies.push((
            settings,
            stats,
            escape(&refresh),
            silent_refresh.starts_with(b"VERSION "),
        ));
    }
    assert_eq!(replies[1], replies[0]);

    // Without -Z, both say TLS is not enabled.
    let plain_memcached = ServerProcess::memcached(&[])?;
    let plain_fogcached = ServerProcess::fogcached(&["--slow-size", "0"])?;
    for server in [&plain_memcached, &plain_fogcached] {
        let mut client = RawClient::connect(server.addr())?;
        assert_eq!(
            client.request(b"refresh_certs\r\n", b"\r\n")?,
            b"Error TLS not enabled\r\n"
        );
    }
    Ok(())
}

/// `-Y` and `-Z` together: the authfile exchange runs inside the TLS session.
#[test]
fn authentication_works_over_tls() -> anyhow::Result<()> {
    let scratch = Scratch::new("tls-auth")?;
    let ca = Authority::new("tls-auth CA")?;
    let (_, cert, key) = server_files(&scratch, &ca)?;
    let users = scratch.write("users", b"alice:tls-pw\n")?;
    let server = tls_server(
        &format!(
            "ssl_chain_cert={},ssl_key={}",
            path_str(&cert)?,
            path_str(&key)?
        ),
        &["-Y", path_str(&users)?],
    )?;
    let mut client = TlsClient::connect(server.addr(), &ca, None)?;
    assert_eq!(
        client.request(b"get k\r\n", b"\r\n")?,
        b"CLIENT_ERROR unauthenticated\r\n"
    );
    assert_eq!(
        client.request(b"set auth 0 0 12\r\nalice tls-pw\r\n", b"\r\n")?,
        b"STORED\r\n"
    );
    assert_eq!(
        client.request(b"set k 0 0 1\r\nv\r\n", b"\r\n")?,
        b"STORED\r\n"
    );
    assert_eq!(
        client.request(b"get k\r\n", b"END\r\n")?,
        b"VALUE k 0 1\r\nv\r\nEND\r\n"
    );
    Ok(())
}
