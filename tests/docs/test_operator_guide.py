"""docs/operator.md stays true: its configuration and codec references are exactly what
`gcagent --config-reference` and `--list-codecs` generate from the key table and the codecs, and the troubleshooting section
quotes the messages gcagent really prints for the same mistakes."""

import os
import re
import socket
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("GCAGENT_BUILD_DIR", ROOT / "build" / "release"))
AGENT = BUILD / "agent" / "gcagent"
GUIDE = ROOT / "docs" / "operator.md"


def between_markers(name):
    text = GUIDE.read_text()
    begin, end = f"<!-- {name}:begin -->\n", f"<!-- {name}:end -->"
    return text[text.index(begin) + len(begin):text.index(end)]


def test_config_reference_matches_the_generated_one():
    generated = subprocess.run([str(AGENT), "--config-reference"], check=True, capture_output=True, text=True).stdout
    assert between_markers("config-reference") == generated, \
        "docs/operator.md is stale: paste `gcagent --config-reference` between the markers"


def test_codec_reference_matches_the_generated_one():
    generated = subprocess.run([str(AGENT), "--list-codecs"], check=True, capture_output=True, text=True).stdout
    assert "| `dgc`: " in generated and "`momentum`" in generated
    assert between_markers("codec-reference") == generated, \
        "docs/operator.md is stale: paste `gcagent --list-codecs` between the codec-reference markers"


def test_version_names_the_release_the_commit_and_ucx():
    release = re.search(r"project\(gcagent VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text()).group(1)
    python_release = re.search(r'^RELEASE = "(.*)"$', (ROOT / "clients/python/gcagent/_version.py").read_text(), re.M)
    assert python_release.group(1) == release, "clients/python/gcagent/_version.py and CMakeLists.txt disagree"
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    out = subprocess.run([str(AGENT), "--version"], check=True, capture_output=True, text=True).stdout
    m = re.match(rf"gcagent {re.escape(release)} \(commit ([0-9a-f]{{12}}(\+dirty)?|unknown), UCX (\S+), CUDA ", out)
    assert m, out
    if head.returncode == 0:
        assert m.group(1).split("+")[0] == head.stdout.strip(), (out, head.stdout)
    assert m.group(3).startswith("1.22."), out
    assert (ROOT / "CHANGELOG.md").read_text().startswith(f"# Changelog"), "CHANGELOG.md starts with its title"
    assert f"## {release}" in (ROOT / "CHANGELOG.md").read_text(), f"CHANGELOG.md has no section for {release}"


def run_agent(tmp_path, *args, env=None):
    r = subprocess.run([str(AGENT), "--agent.socket", str(tmp_path / "a.sock"), *args], capture_output=True,
                       text=True, timeout=60, cwd=tmp_path, env=dict(os.environ, **(env or {})))
    assert r.returncode != 0
    return r.stderr.strip().splitlines()[-1]


def test_troubleshooting_quotes_the_real_messages(tmp_path):
    guide = GUIDE.read_text()
    (tmp_path / "bad.toml").write_text("bogus = 1\n")
    (tmp_path / "bad2.toml").write_text('[agent]\nnode_rank = "x"\n')
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    busy_port = busy.getsockname()[1]
    cases = [
        (["--config", "bad.toml"], None),
        (["--config", "bad2.toml"], lambda m: m.replace("bad2.toml", "bad.toml")),
        (["--scheduler.slice_elements=10"], None),
        (["--compress.codec=3bit"], None),
        (["--compress.codec=2bit", "--compress.params=threshold=0"], None),
        (["--agent.node_rank=2", "--transport.peers=a:1,b:2"], None),
        (["--metrics.listen=127.0.0.1:99999"], None),
        (["--metrics.listen", f"127.0.0.1:{busy_port}"], lambda m: m.replace(str(busy_port), "9464")),
        (["--metrics.listen=", "--transport.peers=127.0.0.1:1,127.0.0.1:2"], None),
        (["--metrics.listen=", "--transport.listen=127.0.0.1:0", "--security.allow_unauthenticated=true",
          "--transport.peers=localhost:18515,no-such-host.invalid:18515"],
         lambda m: m.split("cannot resolve: ")[0] + "cannot resolve: "),
    ]
    message = run_agent(tmp_path, "--validate", env={"GCAGENT_COMPRES_CODEC": "2bit"})
    assert message in guide, f"the guide does not quote: {message}"
    for args, normalise in cases:
        message = run_agent(tmp_path, *args)
        if normalise:
            message = normalise(message)
        assert message.startswith("gcagent: "), message
        assert message in guide, f"the guide does not quote: {message}"
    socket_message = subprocess.run([str(AGENT), "--agent.socket", "/nonexistent-gcagent/control.sock",
                                     "--metrics.listen="], capture_output=True, text=True, timeout=30).stderr
    assert "gcagent: control socket /nonexistent-gcagent/control.sock: No such file or directory" in socket_message
    assert "gcagent: control socket /run/gcagent/control.sock: No such file or directory" in guide
    busy.close()


def test_the_readmes_codec_table_names_every_parameter_and_default():
    """Each codec's row in README.md's codec table names every parameter `--list-codecs` gives
    it with that default (error_feedback may be said once, below the table, where it is true)."""
    listing = subprocess.run([str(AGENT), "--list-codecs"], check=True, capture_output=True, text=True).stdout
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| name | what | parameters (default"):]
    table = table[:table.index("\n\n")]
    codec = None
    for line in listing.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0]:
            codec = cells[0].split("`")[1]
        name, default = cells[1].strip("`"), cells[3].strip("`")
        if not name or (name == "error_feedback" and default == "true"):
            continue
        row = next((r for r in table.splitlines() if f"`{codec}`" in r.split("|")[1]), None)
        assert row is not None, f"README.md's codec table has no row for {codec}"
        assert f"`{name}` ({default}" in row, f"README.md's {codec} row lacks `{name}` ({default}): {row}"
