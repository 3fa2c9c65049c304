"""Network partitions under transport.on_peer_loss = shrink, end to end: four agents in
network namespaces, one exact-checking resilient trainer per node (gcagent_test_trainer
--keep-going checks every completed step against the mean over exactly the nodes the agent
names for it, and exits 1 on a wrong value), links cut silently (frames to a MAC nobody has)
and healed. With the default transport.quorum = majority:

- 2 | 2: neither half holds a majority of the four: both stop, their steps fail saying the job
  has no quorum, no membership changes, and the whole cluster goes on after the heal;
- 3 | 1: the three go on as a membership of their own, the one fails with the quorum error,
  and after the heal it is taken back as a joiner (every trainer is told to load node 0's
  weights after the same step);
- a partition in the middle of a membership change (the node left behind comes back while
  the others split 2 | 2): at most one side ever completes a step;
- a partition healed before transport.shrink_grace: nothing changes;
- an agent killed between its promise and the install (it stops itself right after keeping
  the promise, testing.stop_after_promise) and restarted with its agent.state_dir: it keeps
  that promise, and one view of the epoch forms.

In every case no trainer sees a wrong value. Each test prints the steps completed per half
while partitioned and the errors the minority saw (pytest -s shows them)."""

import re
import signal
import time
from pathlib import Path

import pytest

from cluster import Cluster, Namespaces, wait_for
from test_dataplane import stop_clean
from test_faults import FLAGS, Trainers, restart_agent
from test_recovery import AGAIN, assert_no_bad_messages, assert_steps_complete_again, metric, wait_steps_on

RESILIENT = ["--keep-going", "--timeout-ms", "60000"]
SHRINK = FLAGS + ["--transport.on_peer_loss", "shrink", "--transport.shrink_grace", "1"]
NO_QUORUM = "the job has no quorum"


@pytest.fixture
def namespaces():
    ok, why = Namespaces.available()
    if not ok:
        pytest.skip(f"skipping the partition tests: {why}")
    with Namespaces(4) as ns:
        yield ns


def successes(text):
    return re.findall(r"^iteration=\d+ .*$", text, re.M)


class Window:
    """What each trainer printed from now on."""

    def __init__(self, trainers):
        self.trainers = trainers
        self.start = [len(trainers.output(i)) for i in range(len(trainers.procs))]

    def text(self, i):
        return self.trainers.output(i)[self.start[i]:]

    def steps(self, i):
        return len(successes(self.text(i)))

    def steps_after_first_failure(self, i):
        """Steps completed once the trainer had felt the fault (one in flight at the cut may
        still complete before it)."""
        text = self.text(i)
        first = re.search(r"^failed iteration=", text, re.M)
        return len(successes(text[first.start():])) if first else 0

    def errors(self, i, numbered=True):
        """The distinct errors of failed steps (numbers written N unless `numbered`)."""
        found = re.findall(r"^failed iteration=\d+: (.*)$", self.text(i), re.M)
        if not numbered:  # the agent's words, without the client's "... tensor N iteration N:" before them
            found = [re.sub(r"\d+", "N", re.sub(r"^.*? iteration \d+: ", "", m)) for m in found]
        return sorted(set(found))


def wait_until_all_say(trainers, indices, text, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if all(text in trainers.output(i) for i in indices):
            return
        for i in indices:
            assert trainers.procs[i].poll() is None, f"trainer {i} exited:\n{trainers.output(i)[-1500:]}"
        time.sleep(0.05)
    raise AssertionError(f"not every trainer said {text!r}:\n" +
                         "\n".join(f"trainer {i}: {trainers.output(i)[-600:]}" for i in indices))


def report(name, halves, window):
    for half in halves:
        print(f"{name}: half {half}: steps completed while partitioned {[window.steps(i) for i in half]}; "
              f"errors {[window.errors(i, numbered=False) for i in half]}")


def assert_running(trainers):
    for i, p in enumerate(trainers.procs):
        assert p.poll() is None, f"trainer {i} exited {p.returncode} (1: a wrong value):\n{trainers.output(i)[-1500:]}"


def stop_all(c, trainers):
    trainers.kill()
    stop_clean(c)


def assert_all_four_go_on(c, trainers, ns, stop=True):
    """After the heal: every trainer completes steps on all four nodes, none saw a wrong
    value, no peer message was refused; then (stop) everything stops cleanly."""
    wait_steps_on(trainers, [0, 1, 2, 3], 4, AGAIN)
    assert_running(trainers)
    assert_no_bad_messages(c, ns)
    if stop:
        stop_all(c, trainers)


def assert_whole_again_unchanged(c, trainers, ns):
    """assert_all_four_go_on, and no membership ever changed."""
    assert_steps_complete_again(trainers, cluster=c)
    for r in range(4):
        assert "membership:" not in c.log(r), c.log(r)[-2000:]
    assert_all_four_go_on(c, trainers, ns)


def test_a_two_two_partition_stops_both_halves_until_it_heals(tmp_path, namespaces):
    ns = namespaces
    with Cluster(tmp_path, 4, SHRINK, namespaces=ns) as c:
        trainers = Trainers(c, 1, "p22", extra=RESILIENT)
        trainers.wait_iterations(3)
        ns.partition([0, 1], [2, 3])
        wait_until_all_say(trainers, range(4), NO_QUORUM)
        quiet = Window(trainers)  # every node knows: no step may complete from here on
        time.sleep(4.0)  # well past the grace period and a retry of any proposal
        report("2|2", [[0, 1], [2, 3]], quiet)
        for i in range(4):
            assert quiet.steps(i) == 0, quiet.text(i)[-800:]
            assert any("this node reaches 2 of the 4 nodes of epoch 0" in e for e in quiet.errors(i)), quiet.errors(i)
        for r in range(4):
            assert "membership:" not in c.log(r), c.log(r)[-2000:]
        ns.partition([0, 1], [2, 3], cut=False)
        # The links come back one by one: with a grace period of 1 s the leader may leave out,
        # then take back, a node whose link is a moment late. Either way all four go on.
        assert_all_four_go_on(c, trainers, ns)


def test_a_three_one_partition_lets_the_three_go_on_and_takes_the_one_back(tmp_path, namespaces):
    ns = namespaces
    with Cluster(tmp_path, 4, SHRINK, namespaces=ns) as c:
        trainers = Trainers(c, 1, "p31", extra=RESILIENT)
        trainers.wait_iterations(3)
        window = Window(trainers)
        ns.partition([0, 1, 2], [3])
        wait_steps_on(trainers, [0, 1, 2], 3, AGAIN)
        wait_until_all_say(trainers, [3], NO_QUORUM)
        report("3|1", [[0, 1, 2], [3]], window)
        assert "members=0,1,2" in window.text(0)
        assert any("this node reaches 1 of the 4 nodes of epoch 0" in e for e in window.errors(3)), window.errors(3)
        minority = window.text(3)
        assert not successes(minority[minority.index(NO_QUORUM):]), minority[-800:]
        ns.partition([0, 1, 2], [3], cut=False)
        assert_all_four_go_on(c, trainers, ns, stop=False)
        for i in range(4):
            # Taken back as a joiner: every trainer is told, after one step, to load node 0's
            # weights. The three that went on were told so after the shrink too (a step in flight
            # when the links went may have completed on some nodes only; agent/engine/job_reload.h),
            # and again for any step given up while the links came back.
            told = re.findall(r"members=([\d,]+) resync_root=0$", trainers.output(i), re.M)
            assert told and told[-1] == "0,1,2,3", trainers.output(i)[-1500:]
            assert len(told) >= (2 if i < 3 else 1), trainers.output(i)[-1500:]
            assert metric(c, i, "gcagent_membership_epoch", "", ns) == 2
        assert "-> epoch 1 (nodes 0, 1, 2) (agreed by a majority" in c.log(0), c.log(0)[-2000:]
        stop_all(c, trainers)


def test_a_partition_during_a_membership_change_never_lets_both_sides_train(tmp_path, namespaces):
    """Node 3 is left behind; the moment it comes back (the leader about to take it in), the
    cluster splits {0, 1} | {2, 3}. Whichever view the change reached, {2, 3} cannot go on,
    and after the heal all four do."""
    ns = namespaces
    with Cluster(tmp_path, 4, SHRINK, namespaces=ns) as c:
        trainers = Trainers(c, 1, "pchange", extra=RESILIENT)
        trainers.wait_iterations(3)
        ns.partition([0, 1, 2], [3])
        wait_steps_on(trainers, [0, 1, 2], 3, 3)
        ns.partition([0, 1, 2], [3], cut=False)
        ns.partition([0, 1], [2, 3])
        window = Window(trainers)
        time.sleep(12.0)  # the peer timeout, the grace period and retries, several times over
        report("change", [[0, 1], [2, 3]], window)
        for i in (2, 3):
            assert "failed iteration=" in window.text(i), window.text(i)[-800:]
            assert window.steps_after_first_failure(i) == 0, window.text(i)[-800:]
        ns.partition([0, 1], [2, 3], cut=False)
        assert_all_four_go_on(c, trainers, ns)


def test_a_partition_healed_within_the_grace_period_changes_nothing(tmp_path, namespaces):
    ns = namespaces
    flags = FLAGS + ["--transport.on_peer_loss", "shrink", "--transport.shrink_grace", "60"]
    with Cluster(tmp_path, 4, flags, namespaces=ns) as c:
        trainers = Trainers(c, 1, "pgrace", extra=RESILIENT)
        trainers.wait_iterations(3)
        ns.partition([0, 1, 2], [3])
        wait_until_all_say(trainers, [0], "peer rank 3")
        ns.partition([0, 1, 2], [3], cut=False)
        assert_whole_again_unchanged(c, trainers, ns)


def process_state(pid):
    """The state letter of /proc/PID/stat (T: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def wait_for_log(c, rank, text, timeout=60, start=0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if text in c.log(rank)[start:]:
            return
        time.sleep(0.05)
    raise AssertionError(f"agent {rank} never logged {text!r}:\n{c.log(rank)[-2500:]}")


def test_an_agent_killed_between_its_promise_and_the_install_keeps_its_promise(tmp_path, namespaces):
    """Node 3 is cut off; past the grace period node 0 asks the others to promise its ballot for
    {0, 1, 2}. Node 2 keeps its promise in its agent.state_dir and stops itself before sending
    it (testing.stop_after_promise); it is killed there (kill -9) and restarted with the same
    directory, without the hook. It reads the promise back, and node 0's next ballot is above
    it: one view of epoch 1 forms, the same on every agent, and after the heal all four go on
    with no wrong value."""
    ns = namespaces
    c = Cluster(tmp_path, 4, SHRINK, namespaces=ns)
    for r in range(4):
        c.rank_extra[r] = ["--agent.state_dir", str(tmp_path / f"state{r}")]
    c.rank_extra[2] += ["--testing.stop_after_promise", "true"]
    with c:
        trainers = Trainers(c, 1, "pvotes", extra=RESILIENT)
        trainers.wait_iterations(3)
        ns.partition([0, 1, 2], [3])
        wait_for_log(c, 2, "testing.stop_after_promise: stopping with installed epoch 0 (nodes 0, 1, 2, 3); "
                           "promised ballot ")
        promised = re.search(r"stopping with .*; (promised ballot \d+\.0)", c.log(2)).group(1)
        wait_for(lambda: process_state(c.procs[2].pid) == "T", what="agent 2 to stop")
        c.procs[2].send_signal(signal.SIGKILL)
        c.procs[2].wait()
        c.rank_extra[2] = c.rank_extra[2][:2]  # the same state directory, no hook
        restarted_at = len(c.log(2))
        restart_agent(c, 2)
        wait_for_log(c, 2, f"before this agent restarted: installed epoch 0 (nodes 0, 1, 2, 3); {promised}",
                     start=restarted_at)
        for r in range(3):
            wait_for_log(c, r, "-> epoch 1 (nodes 0, 1, 2)")
        # The restarted agent serves its trainer once every peer is up: node 3 too.
        ns.partition([0, 1, 2], [3], cut=False)
        assert_all_four_go_on(c, trainers, ns, stop=False)
        for r in range(4):
            installed = set(re.findall(r"-> (epoch 1 \(nodes [\d, ]+\))", c.log(r)))
            assert installed <= {"epoch 1 (nodes 0, 1, 2)"}, c.log(r)[-2500:]
            assert metric(c, r, "gcagent_membership_epoch", "", ns) >= 2
        stop_all(c, trainers)
