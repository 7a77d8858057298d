"""The pymemcache client (PyPI) against fogcached.

Starts its own fogcached on a loopback port the kernel picks (`-p 0`, read back from the
port file named by MEMCACHED_PORT_FILENAME, as crates/launcher does for the Rust tests):
the binary is $FOGCACHED_BIN, else
target/release/fogcached or target/debug/fogcached of this checkout. Run with
`python -m pytest tests/python` (scripts/test.sh does, from a virtualenv).
"""

import os
import shutil
import subprocess
import threading
import tempfile
import time
from pathlib import Path

import pytest
from pymemcache.client.base import Client, PooledClient
from pymemcache.exceptions import MemcacheClientError, MemcacheServerError

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
CLIENT_TIMEOUT_S = 5.0


def fogcached_binary():
    from_env = os.environ.get("FOGCACHED_BIN")
    if from_env:
        return from_env
    for profile in ("release", "debug"):
        candidate = REPO_ROOT / "target" / profile / "fogcached"
        if candidate.is_file():
            return str(candidate)
    pytest.fail("fogcached binary not found: set FOGCACHED_BIN or run `cargo build -p server`")


def read_ports(port_file):
    """The TCP ports of memcached's port file ("TCP INET: 11211" lines), in order."""
    ports = []
    for line in Path(port_file).read_text().splitlines():
        kind, _, port = line.partition(":")
        if kind.startswith("TCP "):
            ports.append(int(port))
    return ports


def start_server(binary, extra_args=()):
    """Starts fogcached on a port the kernel picks; returns (process, port). The server
    writes the port to its port file once it listens (by a rename: never half-written),
    so nothing can hold the port and no probe can reach another server."""
    extra_args = list(extra_args)
    # Lets the suite run against Debian's memcached too (FOGCACHED_BIN=/usr/bin/memcached),
    # which refuses to run as root unless told which user to be, and spells "a port the
    # kernel picks" -p -1 (its -p 0 turns TCP off).
    any_port = "0"
    if Path(binary).name == "memcached":
        any_port = "-1"
        if os.geteuid() == 0:
            extra_args += ["-u", "root"]
    # Each server gets its own scratch directory for the port file and, for fogcached,
    # its data directory: two servers cannot share a slow-tier pool file (the second is
    # refused). It is removed when the server stops (`stop_server`): the default pool
    # file reserves its whole 1 GiB on disk, so a leaked directory per test run fills
    # the disk.
    scratch = tempfile.mkdtemp(prefix="fogcached-pytest-")
    if Path(binary).name == "fogcached" and "--data-dir" not in extra_args:
        extra_args += ["--data-dir", os.path.join(scratch, "data")]
    port_file = os.path.join(scratch, "ports")
    stderr_file = os.path.join(scratch, "stderr")
    with open(stderr_file, "wb") as stderr:
        process = subprocess.Popen(
            [binary, "-p", any_port, "-l", "127.0.0.1", "-U", "0", *extra_args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env={**os.environ, "MEMCACHED_PORT_FILENAME": port_file},
        )
    DATA_DIRS[process.pid] = scratch
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not os.path.exists(port_file):
        if process.poll() is not None or time.monotonic() >= deadline:
            if process.poll() is None:
                reason = f"wrote no port file within {STARTUP_TIMEOUT_S} s"
            else:
                reason = f"exited with {process.returncode} during start-up"
            printed = Path(stderr_file).read_text(errors="replace")
            stop_server(process)
            pytest.fail(f"{binary} {reason}; it printed:\n{printed}")
        time.sleep(0.01)
    return process, read_ports(port_file)[0]


# The scratch directory `start_server` made for each running server, by process id.
DATA_DIRS = {}


def stop_server(process):
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    data_dir = DATA_DIRS.pop(process.pid, None)
    if data_dir is not None:
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def server():
    process, port = start_server(fogcached_binary())
    yield port
    stop_server(process)
    assert process.returncode == 0, f"fogcached exited with {process.returncode} on SIGTERM"


def make_client(port, **kwargs):
    return Client(
        ("127.0.0.1", port),
        connect_timeout=CLIENT_TIMEOUT_S,
        timeout=CLIENT_TIMEOUT_S,
        default_noreply=False,
        **kwargs,
    )


@pytest.fixture
def client(server):
    client = make_client(server)
    assert client.flush_all() is True
    yield client
    client.close()


def test_version(client):
    assert client.version()


def test_set_get(client):
    assert client.set("greeting", b"hello") is True
    assert client.get("greeting") == b"hello"
    assert client.get("absent") is None
    assert client.get("absent", default=b"fallback") == b"fallback"


def test_set_overwrites_and_keeps_flags(client):
    assert client.set("k", b"one", flags=7) is True
    assert client.set("k", b"two", flags=4294967295) is True
    # pymemcache passes flags through when no serde is configured.
    # raw_command returns the reply up to, not including, the end token.
    assert client.raw_command(b"get k", b"END\r\n") == b"VALUE k 4294967295 3\r\ntwo\r\n"


def test_value_with_crlf_inside(client):
    value = b"line one\r\nline two\r\nEND\r\n"
    assert client.set("crlf", value) is True
    assert client.get("crlf") == value


def test_empty_value(client):
    assert client.set("empty", b"") is True
    assert client.get("empty") == b""


def test_gets_and_cas(client):
    assert client.gets("counter") == (None, None)
    assert client.cas("counter", b"x", 12345) is None  # NOT_FOUND
    client.set("counter", b"v1")
    value, cas = client.gets("counter")
    assert value == b"v1" and cas is not None
    assert client.cas("counter", b"v2", cas) is True
    assert client.get("counter") == b"v2"
    # The old unique no longer matches: EXISTS.
    assert client.cas("counter", b"v3", cas) is False
    assert client.get("counter") == b"v2"
    value, new_cas = client.gets("counter")
    assert value == b"v2" and new_cas != cas


def test_cas_unique_changes_on_every_modification(client):
    client.set("m", b"1")
    seen = {client.gets("m")[1]}
    for modify in (
        lambda: client.set("m", b"2"),
        lambda: client.append("m", b"3"),
        lambda: client.prepend("m", b"4"),
        lambda: client.incr("m", 1),
        lambda: client.decr("m", 1),
        lambda: client.replace("m", b"5"),
    ):
        modify()
        cas = client.gets("m")[1]
        assert cas not in seen
        seen.add(cas)
    # touch is not a modification.
    before = client.gets("m")[1]
    assert client.touch("m", 100) is True
    assert client.gets("m")[1] == before


def test_incr_decr(client):
    assert client.incr("n", 1) is None
    assert client.decr("n", 1) is None
    client.set("n", b"10")
    assert client.incr("n", 5) == 15
    assert client.decr("n", 20) == 0  # decr stops at 0
    assert client.incr("n", 2**64 - 1) == 2**64 - 1
    assert client.incr("n", 2) == 1  # incr wraps at 2**64
    client.set("n", b"100")
    assert client.decr("n", 1) == 99
    # memcached rewrites a shorter number in place, padded with spaces.
    assert client.get("n") == b"99 "
    assert client.incr("n", 1) == 100


def test_incr_non_numeric(client):
    client.set("word", b"abc")
    with pytest.raises(MemcacheClientError):
        client.incr("word", 1)
    assert client.get("word") == b"abc"


def test_delete(client):
    client.set("d", b"x")
    assert client.delete("d") is True
    assert client.get("d") is None
    assert client.delete("d") is False


def test_touch(client):
    assert client.touch("t", 10) is False
    client.set("t", b"x")
    assert client.touch("t", 10) is True
    assert client.get("t") == b"x"
    # A negative expiration time expires the item at once.
    assert client.touch("t", -1) is True
    assert client.get("t") is None


def test_negative_expire_on_set(client):
    client.set("gone", b"old")
    assert client.set("gone", b"new", expire=-1) is True
    assert client.get("gone") is None


def test_get_many_set_many(client):
    values = {f"key{i}": f"value{i}".encode() for i in range(50)}
    assert client.set_many(values) == []
    keys = list(values) + ["missing1", "missing2"]
    assert client.get_many(keys) == values
    assert client.get_many([]) == {}
    gets = client.gets_many(["key1", "key2", "missing1"])
    assert set(gets) == {"key1", "key2"}
    assert gets["key1"][0] == b"value1" and gets["key1"][1] is not None
    assert client.delete_many(["key1", "key2", "missing1"]) is True
    assert client.get_many(["key1", "key2", "key3"]) == {"key3": b"value3"}


def test_add_replace(client):
    assert client.replace("ar", b"r") is False
    assert client.get("ar") is None
    assert client.add("ar", b"a") is True
    assert client.add("ar", b"b") is False
    assert client.get("ar") == b"a"
    assert client.replace("ar", b"r") is True
    assert client.get("ar") == b"r"


def test_append_prepend(client):
    assert client.append("ap", b"x") is False
    assert client.prepend("ap", b"x") is False
    assert client.get("ap") is None
    client.set("ap", b"mid", flags=3)
    assert client.append("ap", b"-end") is True
    assert client.prepend("ap", b"start-") is True
    assert client.get("ap") == b"start-mid-end"
    # append and prepend keep the item's flags.
    assert client.raw_command(b"get ap", b"END\r\n") == b"VALUE ap 3 13\r\nstart-mid-end\r\n"


def test_flush_all(client):
    client.set_many({"f1": b"1", "f2": b"2"})
    assert client.flush_all() is True
    assert client.get_many(["f1", "f2"]) == {}
    # Items stored after the flush are kept.
    client.set("f3", b"3")
    assert client.get("f3") == b"3"


def test_large_values(client):
    for size_bytes in (1, 1000, 16 * 1024, 100 * 1000, 500 * 1000, 1000 * 1000):
        value = bytes((i * 7 + size_bytes) % 251 for i in range(size_bytes))
        assert client.set(f"big{size_bytes}", value) is True, size_bytes
        assert client.get(f"big{size_bytes}") == value, size_bytes


def test_too_large_value_is_refused_and_unlinks_old(client):
    client.set("huge", b"old value")
    with pytest.raises(MemcacheServerError, match="object too large for cache"):
        client.set("huge", b"x" * (2 * 1024 * 1024))
    # As in memcached, a failed set removes the old value.
    assert client.get("huge") is None
    # The connection is still usable.
    assert client.set("after", b"ok") is True
    assert client.get("after") == b"ok"


def test_noreply(server, client):
    quiet = Client(
        ("127.0.0.1", server),
        connect_timeout=CLIENT_TIMEOUT_S,
        timeout=CLIENT_TIMEOUT_S,
        default_noreply=True,
    )
    try:
        # With noreply the client cannot see the outcome and reports True.
        assert quiet.set("nr", b"1") is True
        assert quiet.add("nr", b"2") is True
        assert quiet.replace("nr", b"3") is True
        assert quiet.append("nr", b"4") is True
        assert quiet.prepend("nr", b"0") is True
        assert quiet.incr("nr", 1, noreply=True) is None
        assert quiet.touch("nr", 100) is True
        assert quiet.set_many({"nr2": b"a", "nr3": b"b"}) == []
        assert quiet.delete("nr2") is True
        # A reply would have desynchronized the client; this get proves there was none.
        # "034" + 1: rewritten in place, padded with a space as memcached does.
        assert quiet.get("nr") == b"35 "
        assert quiet.get_many(["nr2", "nr3"]) == {"nr3": b"b"}
        assert quiet.flush_all() is True
        assert quiet.get("nr3") is None
    finally:
        quiet.close()


def test_stats(client):
    before = client.stats()
    client.set("s", b"x")
    client.get("s")
    client.get("absent")
    after = client.stats()
    for name in (b"uptime", b"curr_items", b"total_items", b"get_hits", b"get_misses",
                 b"cmd_get", b"cmd_set", b"limit_maxbytes", b"curr_connections"):
        assert name in after, name
    # The tests run one after the other, so the counters moved by exactly this much.
    assert after[b"cmd_set"] - before[b"cmd_set"] == 1
    assert after[b"cmd_get"] - before[b"cmd_get"] == 2
    assert after[b"get_hits"] - before[b"get_hits"] == 1
    assert after[b"get_misses"] - before[b"get_misses"] == 1


def test_concurrent_incr_from_threads(server, client):
    """incr is atomic: 4 threads of 250 increments each sum up exactly."""
    threads_count = 4
    increments_per_thread = 250
    client.set("shared", b"0")
    pool = PooledClient(
        ("127.0.0.1", server),
        connect_timeout=CLIENT_TIMEOUT_S,
        timeout=CLIENT_TIMEOUT_S,
        default_noreply=False,
        max_pool_size=threads_count,
    )
    errors = []

    def work():
        try:
            for _ in range(increments_per_thread):
                pool.incr("shared", 1)
        except Exception as error:  # reported below, with the thread's failure
            errors.append(error)

    workers = [threading.Thread(target=work) for _ in range(threads_count)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    pool.close()
    assert not errors
    assert int(client.get("shared")) == threads_count * increments_per_thread


def test_authfile_token_through_set():
    """-Y: pymemcache authenticates the way memcached's docs say, with a `set` whose value
    is "user password"; until then every command is refused, after it everything works."""
    with tempfile.TemporaryDirectory(prefix="fogcached-pytest-auth-") as scratch:
        authfile = Path(scratch) / "authfile"
        authfile.write_text("bob:other\nalice:s3cret pw-part\n")
        process, port = start_server(fogcached_binary(), ["-Y", str(authfile)])
        try:
            stranger = make_client(port)
            with pytest.raises(MemcacheClientError, match="unauthenticated"):
                stranger.get("k")
            with pytest.raises(MemcacheClientError, match="authentication failure"):
                stranger.set("auth", "alice wrong")
            # The password runs to the end of the authfile line, but the token is split
            # on spaces: "s3cret pw-part" cannot be sent, "bob other" can.
            with pytest.raises(MemcacheClientError, match="authentication failure"):
                stranger.set("auth", "alice s3cret")
            stranger.close()

            owner = make_client(port)
            assert owner.set("auth", "bob other") is True
            assert owner.set("k", b"v1") is True
            assert owner.get("k") == b"v1"
            assert owner.get("auth") is None, "the authentication set stores nothing"
            assert owner.get_many(["k", "auth"]) == {"k": b"v1"}
            stats = owner.stats()
            assert stats[b"auth_cmds"] == 3
            assert stats[b"auth_errors"] == 2
            owner.close()
        finally:
            stop_server(process)
        assert process.returncode == 0


def test_tls_with_a_certificate_made_here():
    """-Z: pymemcache over TLS (Python's ssl, i.e. OpenSSL) with a certificate the test
    makes with Debian's openssl CLI; the server's certificate is verified."""
    import shutil
    import ssl

    if shutil.which("openssl") is None:
        pytest.skip("no openssl CLI to make a certificate")
    with tempfile.TemporaryDirectory(prefix="fogcached-pytest-tls-") as scratch:
        cert = Path(scratch) / "cert.pem"
        key = Path(scratch) / "key.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
             "-keyout", str(key), "-out", str(cert)],
            check=True, capture_output=True,
        )
        process, port = start_server(
            fogcached_binary(),
            ["-Z", "-o", f"ssl_chain_cert={cert},ssl_key={key}"],
        )
        try:
            context = ssl.create_default_context(cafile=str(cert))
            client = make_client(port, tls_context=context)
            assert client.set("k", b"v" * 100_000) is True
            assert client.get("k") == b"v" * 100_000
            assert client.get_many([f"missing{i}" for i in range(50)] + ["k"]) == {
                "k": b"v" * 100_000
            }
            stats = client.stats("settings")
            assert stats[b"ssl_enabled"] == b"yes"
            client.close()
            # A plaintext client on the TLS port gets nowhere, and the server carries on.
            plain = make_client(port)
            with pytest.raises(Exception):
                plain.get("k")
            plain.close()
            again = make_client(port, tls_context=context)
            assert again.get("k") == b"v" * 100_000
            assert again.stats()[b"ssl_handshake_errors"] >= 1
            again.close()
        finally:
            stop_server(process)
        assert process.returncode == 0
