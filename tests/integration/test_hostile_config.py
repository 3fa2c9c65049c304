"""Configuration a bad day (or a stranger) hands the agent: each is refused with a message
naming the cause, never a crash, a hang or a deleted file."""

import subprocess

from cluster import AGENT


def run_agent(*args, timeout=60):
    return subprocess.run([str(AGENT), *args], capture_output=True, text=True, timeout=timeout)


def test_a_configuration_that_is_not_a_regular_file_is_refused(tmp_path):
    for path in ["/dev/zero", str(tmp_path)]:
        r = run_agent("--validate", "--config", path)
        assert r.returncode == 2 and f"{path}: the configuration is not a regular file" in r.stderr, r


def test_a_deeply_dotted_key_is_refused_before_parsing(tmp_path):
    config = tmp_path / "deep.toml"
    config.write_text("[agent]\n" + "a" + ".a" * 200000 + " = 1\n")
    r = run_agent("--validate", "--config", str(config))
    assert r.returncode == 2, r
    assert "deep.toml:2: more than 64 dotted-key parts or nested tables and arrays" in r.stderr, r


def test_validate_checks_ports_and_the_socket_path():
    r = run_agent("--validate", "--metrics.listen", "127.0.0.1:99999")
    assert r.returncode == 2 and "port '99999' is not in [0, 65535]" in r.stderr, r
    r = run_agent("--validate", "--agent.socket", "/run/" + "s" * 115)
    assert r.returncode == 2 and "more than the 107 a Unix socket path can hold" in r.stderr, r


def test_a_file_at_the_socket_path_is_never_deleted(tmp_path):
    victim = tmp_path / "notes.txt"
    victim.write_text("keep me")
    r = run_agent("--agent.socket", str(victim), "--agent.shm_prefix", "gcagent-test-victim",
                  "--metrics.listen", "127.0.0.1:0", "--transport.listen", "127.0.0.1:0")
    assert r.returncode == 1, r
    assert f"control socket {victim}: a file that is not a socket is there; not removing it" in r.stderr, r
    assert victim.read_text() == "keep me"
