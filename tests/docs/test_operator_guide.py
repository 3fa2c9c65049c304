"""docs/operator.md stays true: its configuration reference is exactly what
`gcagent --config-reference` generates from the key table, and the troubleshooting section
quotes the messages gcagent really prints for the same mistakes."""

import os
import socket
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("GCAGENT_BUILD_DIR", ROOT / "build" / "release"))
AGENT = BUILD / "agent" / "gcagent"
GUIDE = ROOT / "docs" / "operator.md"


def test_config_reference_matches_the_generated_one():
    text = GUIDE.read_text()
    begin, end = "<!-- config-reference:begin -->\n", "<!-- config-reference:end -->"
    committed = text[text.index(begin) + len(begin):text.index(end)]
    generated = subprocess.run([str(AGENT), "--config-reference"], check=True, capture_output=True, text=True).stdout
    assert committed == generated, "docs/operator.md is stale: paste `gcagent --config-reference` between the markers"


def run_agent(tmp_path, *args):
    r = subprocess.run([str(AGENT), "--agent.socket", str(tmp_path / "a.sock"), *args], capture_output=True,
                       text=True, timeout=60, cwd=tmp_path)
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
        (["--agent.node_rank=2", "--transport.peers=a:1,b:2"], None),
        (["--metrics.listen=127.0.0.1:99999"], None),
        (["--metrics.listen", f"127.0.0.1:{busy_port}"], lambda m: m.replace(str(busy_port), "9464")),
        (["--metrics.listen=", "--transport.listen=127.0.0.1:0",
          "--transport.peers=localhost:18515,no-such-host.invalid:18515"],
         lambda m: m.split("cannot resolve: ")[0] + "cannot resolve: "),
    ]
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
