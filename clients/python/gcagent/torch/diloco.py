"""Streaming DiLoCo across nodes through the agents: the outer steps of low-communication
training.

    import gcagent.torch.diloco

    inner = torch.optim.AdamW(model.parameters(), lr=4e-4)
    outer = torch.optim.SGD(model.parameters(), lr=0.7, momentum=0.9, nesterov=True)
    with gcagent.torch.diloco.DiLoCo([model], inner, outer, sync_every=100, codec="bf16"):
        for x, y in data:
            loss_fn(model(x), y).backward()
            inner.step()        # every sync_every steps: an outer step
            inner.zero_grad()

Each node trains on its own (inside a node the trainers are the user's data-parallel group,
DDP or one process) and every `sync_every` inner steps the model moves by an outer step: the
pseudo-gradient, the global parameters of the last outer step minus the local ones, is averaged
over every trainer of the job by the agents (compressed with the tensor's codec and error
feedback), handed to `outer_optimizer` as the gradients of the global parameters, and the result
is the new global model (DiLoCo, Douillard et al. 2023).

Streaming (Streaming DiLoCo, 2025): the model is cut into fragments (the modules given), and
fragment f syncs every sync_every steps, the fragments at evenly staggered steps. A fragment's
pseudo-gradient is taken `fragment_sync_delay` steps before its outer step and averaged while
those steps compute; its outer step then mixes: the parameters become
lerp(global, local, fragment_update_alpha) (0: the new global parameters; 1: the local ones).
The schedule and the merge are torchft's `torchft.local_sgd.DiLoCo` (sync_every, fragments,
fragment_sync_delay, fragment_update_alpha), whose own regression fixtures the tests run
against.

Each fragment is one tensor of the agents (its parameters flattened), key = fragment index, its
own codec and residuals. Iterations are outer-step numbers, and whose turn an outer step is
comes from the job's iteration, which every node agrees on (Client.job_iteration), so a node
whose count drifted (it froze, or it joined late) sends the same fragment as the others. An
outer step whose average fails (the agent's error, a lost connection, a timeout, a node lost)
puts the fragment back at its global parameters of the last outer step (the local steps since
are dropped, as torchft does when a commit fails) and raises the GcagentError from the inner
optimizer's step(); the next attempt of that fragment comes sync_every steps later.

Elastic (transport.on_peer_loss = "shrink"): a node that leaves fails the outer step in flight
(if any); once the agents have left it behind, the outer steps average over the others. A step
in flight when the membership changes may complete on some nodes and fail on others, so the
first outer step under a smaller membership is followed by the same broadcast as a join's
(below), from its lowest node. A node
that joins (or comes back) starts from anything: the first outer step that completes under the
membership that took it in is dropped on every node (it holds the joiner's pseudo-gradient of
another model), and the node that kept training broadcasts its outer state through the agents:
each fragment's global parameters and outer optimizer state. A trainer whose global parameters
differ from those loads them, and its parameters become them; the others keep their local
parameters. Counted in `resyncs`.
"""

import logging
import time

import torch

from gcagent.client import (BROADCAST_KEY_BASE, ERR_INVALID_ARGUMENT, ERR_TIMEOUT, Client, GcagentError, TensorSpec,
                            codec_from_env, step_timeout_s)
from gcagent.torch import _Reconnecting

_log = logging.getLogger("gcagent.diloco")

_STATE_KEY = BROADCAST_KEY_BASE - 2  # the outer state a joiner loads: apart from fragments and broadcasts


class _Fragment:
    """One fragment: its parameters, its global copy, its outer optimizer and its agent slot."""

    def __init__(self, index, module, outer_optimizer):
        self.index = index
        self.params = [p for p in module.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError(f"gcagent: DiLoCo fragment {index} has no parameters that train")
        if any(p.dtype != torch.float32 or p.device.type != "cpu" for p in self.params):
            raise ValueError(f"gcagent: DiLoCo fragment {index}: outer steps take float32 parameters on the CPU")
        self.elements = sum(p.numel() for p in self.params)
        self.outer_optimizer = outer_optimizer
        with torch.no_grad():
            self.global_params = [p.detach().clone() for p in self.params]  # of the last outer step
        self.iteration = 0       # the agent's iteration of its last average: the outer step's number
        self.in_flight = False   # its pseudo-gradient submitted, not yet applied
        self.failure = None      # why its submit failed, raised at its outer step

    def pseudo_gradient_into(self, slot):
        """slot <- global - local, parameter by parameter, flattened."""
        at = 0
        with torch.no_grad():
            for p, g in zip(self.params, self.global_params):
                n = p.numel()
                torch.sub(g.reshape(-1), p.detach().reshape(-1), out=slot[at:at + n])
                at += n

    def outer_state(self):
        """The outer optimizer's floating-point state of this fragment's parameters, in a fixed
        order (parameter, then state name): what a joiner loads beside the global parameters."""
        out = []
        for p in self.params:
            state = self.outer_optimizer.state.get(p, {})
            out.extend(state[name] for name in sorted(state)
                       if torch.is_tensor(state[name]) and state[name].is_floating_point())
        return out

    def prime_outer_state(self):
        """Gives the outer optimizer its state for these parameters when it has none yet (no outer
        step was taken), as after one step with zero gradients, the parameters unchanged: every
        trainer's outer state then has the same shape."""
        if all(self.outer_optimizer.state.get(p) for p in self.params):
            return
        with torch.no_grad():
            kept = [p.detach().clone() for p in self.params]
            for p in self.params:
                p.grad = torch.zeros_like(p)
        self._outer_step_alone()
        with torch.no_grad():
            for p, k in zip(self.params, kept):
                p.copy_(k)
                p.grad = None

    def _outer_step_alone(self):
        """The outer optimizer's step on this fragment's parameters alone: one optimizer may hold
        every fragment's, and the others hold the inner step's gradients now (a step would move
        them too)."""
        mine = {id(p) for p in self.params}
        others = [p for group in self.outer_optimizer.param_groups for p in group["params"]
                  if id(p) not in mine and p.grad is not None]
        kept = [p.grad for p in others]
        for p in others:
            p.grad = None
        try:
            self.outer_optimizer.step()
        finally:
            for p, g in zip(others, kept):
                p.grad = g

    def restore(self):
        with torch.no_grad():
            for p, g in zip(self.params, self.global_params):
                p.copy_(g)

    def outer_step(self, averaged, alpha):
        """The outer optimizer's step from the global parameters with the averaged pseudo-gradient,
        then the mix with the local parameters (lerp by alpha), as torchft's fragment does."""
        with torch.no_grad():
            local = [p.detach().clone() for p in self.params]
            self.restore()
            at = 0
            for p in self.params:
                n = p.numel()
                p.grad = averaged[at:at + n].view_as(p).clone()
                at += n
        self._outer_step_alone()
        with torch.no_grad():
            for p, g in zip(self.params, self.global_params):
                g.copy_(p)
            for p, l in zip(self.params, local):
                p.lerp_(l, alpha)
        self.outer_optimizer.zero_grad()


class DiLoCo(_Reconnecting):
    """Streaming DiLoCo's outer steps through the agents (see the module's docstring).

    model_fragments: the modules that sync apart (a list; one module for plain DiLoCo);
    inner_optimizer: the optimizer of every step; outer_optimizer: one over every fragment's
    parameters, or a list of one per fragment; sync_every: inner steps between two outer steps of
    a fragment (a multiple of the number of fragments); fragment_sync_delay: inner steps the
    average of a fragment's pseudo-gradient may take (less than sync_every / fragments);
    fragment_update_alpha: in [0, 1], how much of the local parameters the outer step keeps;
    codec, params: the fragments' codec (GCAGENT_CODEC by default); client: a gcagent.Client
    (one of its own by default); timeout_s: how long an outer step waits for its average.

    Counters: outer_steps (taken, failed ones included), failed_syncs, late_syncs and waited_s (the
    outer steps whose average was not back in time, each logged, and how long the inner steps
    waited for them), resyncs and loaded (outer states broadcast to joiners, and loaded here),
    local_step, job_iteration."""

    def __init__(self, model_fragments, inner_optimizer, outer_optimizer, sync_every, fragment_sync_delay=0,
                 fragment_update_alpha=0.0, codec=None, params=None, client=None, timeout_s=600.0):
        fragments = list(model_fragments) if isinstance(model_fragments, (list, tuple)) else [model_fragments]
        outer = list(outer_optimizer) if isinstance(outer_optimizer, (list, tuple)) else [outer_optimizer] * len(
            fragments)
        if len(outer) != len(fragments):
            raise ValueError(f"gcagent: {len(outer)} outer optimizers for {len(fragments)} fragments")
        if sync_every < len(fragments) or sync_every % len(fragments):
            raise ValueError(f"gcagent: sync_every ({sync_every}) must be a multiple of the number of fragments "
                             f"({len(fragments)}): one fragment syncs every sync_every / fragments steps")
        self._interval = sync_every // len(fragments)
        if not 0 <= fragment_sync_delay < self._interval:
            raise ValueError(f"gcagent: fragment_sync_delay ({fragment_sync_delay}) must be at least 0 and less than "
                             f"sync_every / fragments ({self._interval}): a fragment's average must be back before it "
                             "is taken again")
        if not 0.0 <= fragment_update_alpha <= 1.0:
            raise ValueError(f"gcagent: fragment_update_alpha ({fragment_update_alpha}) must be in [0, 1]")
        self._fragments = [_Fragment(i, m, o) for i, (m, o) in enumerate(zip(fragments, outer))]
        self._inner = inner_optimizer
        self._delay = fragment_sync_delay
        self._alpha = fragment_update_alpha
        env_codec, env_params = codec_from_env()
        self.codec = codec if codec is not None else env_codec
        self.params = dict(params) if params is not None else env_params
        self._own_client = client is None
        self._state_elements = 0  # of _STATE_KEY, once declared
        self.client = client or Client()
        self.timeout_s = step_timeout_s(self.client, timeout_s)  # no sooner than the agent decides
        self._slots = self._declare_on(self.client)
        self._lost = None       # the error that lost the connection, until it is made anew
        self.reconnects = 0
        self._hooks = []
        self.local_step = 0     # inner steps since the last outer step of any fragment
        self.outer_steps = 0    # outer steps applied, every fragment's
        self.failed_syncs = 0
        self.late_syncs = 0     # outer steps whose average was not back by then
        self.waited_s = 0.0
        self.resyncs = 0        # outer states broadcast to nodes that joined
        self.loaded = 0         # of them, the times this trainer loaded another node's state
        self._pending = None    # the fragment whose pseudo-gradient was submitted last
        self.job_iteration = 0  # the job's iteration of the outer step submitted last (the same on every node)
        self._nodes = []        # the nodes the last outer step averaged over

    def _declare_on(self, client):
        specs = [TensorSpec(f.index, f.elements, -f.index, self.codec, dict(self.params)) for f in self._fragments]
        if self._state_elements:
            specs.append(TensorSpec(_STATE_KEY, self._state_elements, 1, "none", {"reduce.result": "sum"}))
        client.declare(specs)
        return {s.key: torch.from_numpy(client.slot(s.key)) for s in specs}

    def __enter__(self):
        self._hooks.append(self._inner.register_step_post_hook(self._after_inner_step))
        return self

    def __exit__(self, exc_type, exc, tb):
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        # An average still in flight is waited for and dropped: nothing is left to the agent.
        f = self._pending
        if f is not None and f.in_flight:
            f.in_flight = False
            try:
                self._wait(f)
            except GcagentError:
                pass
        if self._own_client:
            self.client.close()
        return False

    def _turn(self, iteration):
        """The fragment whose turn the trainer's `iteration` is: decided by the job's iteration,
        the same on every node even where trainers' counts drifted apart (a node that froze or
        joined late): the fragments take turns in the job's iterations."""
        self.job_iteration = self.client.job_iteration(iteration)
        return self._fragments[(max(self.job_iteration, 1) - 1) % len(self._fragments)]

    def _after_inner_step(self, optimizer, args, kwargs):
        self.local_step += 1
        if self.local_step == self._interval - self._delay:
            self._prepare()
        if self.local_step == self._interval:
            self.local_step = 0
            self._sync(self._pending)

    def _prepare(self):
        if self._lost is not None:
            self._reconnect()
        # Numbered by the outer step, every fragment's: each iteration of the job is one key, so
        # the agents count it complete, and a node whose trainer leaves after its last outer
        # step does not fail that step on the others.
        iteration = self.outer_steps + 1
        try:
            f = self._pending = self._turn(iteration)
        except GcagentError as e:
            self._note_loss(e)
            f = self._pending = self._fragments[self.outer_steps % len(self._fragments)]
            f.iteration, f.failure = iteration, e
            return
        f.iteration = iteration
        f.pseudo_gradient_into(self._slots[f.index])
        try:
            self.client.submit(f.iteration, [f.index])
            f.in_flight = True
        except GcagentError as e:
            self._note_loss(e)
            f.failure = e

    def _wait(self, f):
        # With a delay the average should be back by now (overlapped with the inner steps).
        overlapped = self._delay > 0
        if overlapped and self.client.wait(f.iteration, [f.index], 0):
            return
        start = time.perf_counter()
        done = self.client.wait(f.iteration, [f.index], int(self.timeout_s * 1000))
        waited = time.perf_counter() - start
        self.waited_s += waited
        if overlapped:
            self.late_syncs += 1
            _log.warning("gcagent: outer step %d (DiLoCo fragment %d) was not averaged within its %d inner steps: the "
                         "inner steps waited %.3f s for it (%d late of %d)", f.iteration, f.index, self._delay, waited,
                         self.late_syncs, self.outer_steps + 1)
        if not done:
            raise GcagentError(ERR_TIMEOUT, f"gcagent: outer step {f.iteration} (DiLoCo fragment {f.index}) was not "
                                            f"averaged within {self.timeout_s} s")

    def _sync(self, f):
        failure, f.failure = f.failure, None
        if failure is None:
            f.in_flight = False
            try:
                self._wait(f)
            except GcagentError as e:
                self._note_loss(e)
                failure = e
        self.outer_steps += 1  # the turn passes to the next fragment either way, on every trainer alike
        if failure is not None:
            f.restore()
            self.failed_syncs += 1
            raise failure
        root = self.client.resync_root
        if root is not None:
            # The average holds a joiner's pseudo-gradient, of another model, or follows a step
            # given up on some node that others completed: dropped on every node.
            f.restore()
            self._nodes = self.client.result_nodes
            self._resync(root)
            return
        f.outer_step(self._slots[f.index], self._alpha)
        nodes, self._nodes = self._nodes, self.client.result_nodes
        if nodes and nodes != self._nodes:
            # The first outer step after nodes left: a step in flight at the change may have
            # completed on some nodes and failed on others, so their global parameters can differ.
            self._resync(self._nodes[0])

    def _resync(self, root):
        """Every member's trainers, at the same outer step (the first completed under a new
        membership, which every member completes alike): the outer state of the root node's local
        rank 0 trainer, broadcast through the agents (summed, every other trainer adding -0.0),
        loaded where it differs (see the module's docstring). Takes an iteration of its own."""
        for f in self._fragments:
            f.prime_outer_state()
        tensors = [t for f in self._fragments for t in f.global_params + f.outer_state()]
        elements = sum(t.numel() for t in tensors)
        if elements != self._state_elements:
            self._state_elements = elements
            self._slots = self._declare_on(self.client)
        iteration, self.outer_steps = self.outer_steps + 1, self.outer_steps + 1
        mine = self.client.world_rank == root * self.client.local_size
        self._nodes = self.client.result_nodes
        slot = self._slots[_STATE_KEY]
        with torch.no_grad():
            if mine:
                torch.cat([t.detach().reshape(-1) for t in tensors], out=slot)
            else:
                slot.fill_(-0.0)
            self.client.submit(iteration, [_STATE_KEY])
            if not self.client.wait(iteration, [_STATE_KEY], int(self.timeout_s * 1000)):
                raise GcagentError(ERR_TIMEOUT, f"gcagent: the outer state of node {root} did not arrive within "
                                                f"{self.timeout_s} s")
            at, loaded = 0, 0
            for f in self._fragments:
                behind = False
                for i, t in enumerate(f.global_params + f.outer_state()):
                    theirs = slot[at:at + t.numel()].view_as(t)
                    at += t.numel()
                    behind |= i < len(f.global_params) and not torch.equal(theirs, t)
                    t.copy_(theirs)
                if behind:
                    f.restore()
                    loaded += 1
        self.resyncs += 1
        self.loaded += loaded > 0
        _log.warning("gcagent: DiLoCo's outer state was broadcast from node %d after the membership changed%s", root,
                     f"; {loaded} fragments loaded here" if loaded else "")

    def global_parameters(self):
        """Every fragment's global parameters (those of its last outer step), in fragment order."""
        return [g for f in self._fragments for g in f.global_params]

    # ---- Checkpoints ----

    def state_dict(self):
        """The outer state: the schedule's position, each fragment's global parameters, outer
        optimizer state and agent residuals. Call between inner steps, with no average in flight
        (a fragment_sync_delay of 0, or right after an outer step)."""
        if any(f.in_flight for f in self._fragments):
            raise GcagentError(ERR_INVALID_ARGUMENT, "gcagent: DiLoCo.state_dict() while a fragment's average is in "
                                                     "flight (fragment_sync_delay steps before its outer step)")
        return {"local_step": self.local_step, "outer_steps": self.outer_steps,
                "fragments": [{"iteration": f.iteration, "global": [g.clone() for g in f.global_params],
                               "outer_optimizer": f.outer_optimizer.state_dict(),
                               "residuals": self.client.get_state(f.index) if self.client.local_rank == 0 else b""}
                              for f in self._fragments]}

    def load_state_dict(self, state):
        if len(state["fragments"]) != len(self._fragments):
            raise GcagentError(ERR_INVALID_ARGUMENT, f"gcagent: the checkpoint holds {len(state['fragments'])} DiLoCo "
                                                     f"fragments, this model {len(self._fragments)}")
        self.local_step, self.outer_steps = int(state["local_step"]), int(state["outer_steps"])
        for f, saved in zip(self._fragments, state["fragments"]):
            f.iteration = int(saved["iteration"])
            with torch.no_grad():
                for g, s in zip(f.global_params, saved["global"]):
                    g.copy_(s)
            f.outer_optimizer.load_state_dict(saved["outer_optimizer"])
            if saved["residuals"]:
                self.client.put_state(f.index, bytes(saved["residuals"]))
