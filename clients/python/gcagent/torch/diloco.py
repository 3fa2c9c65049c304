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
own codec and residuals; its iterations count its outer steps. An outer step whose average
fails (the agent's error, a lost connection, a timeout) puts the fragment back at its global
parameters of the last outer step (the local steps since are dropped, as torchft does when a
commit fails) and raises the GcagentError from the inner optimizer's step(); the next attempt
of that fragment comes sync_every steps later.
"""

import logging
import time

import torch

from gcagent.client import ERR_INVALID_ARGUMENT, ERR_TIMEOUT, Client, GcagentError, TensorSpec, codec_from_env
from gcagent.torch import _Reconnecting

_log = logging.getLogger("gcagent.diloco")


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
        self.outer_optimizer.step()
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
    waited for them), local_step."""

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
        self.timeout_s = timeout_s
        self._own_client = client is None
        self.client = client or Client()
        self._slots = self._declare_on(self.client)
        self._lost = None       # the error that lost the connection, until it is made anew
        self.reconnects = 0
        self._hooks = []
        self.local_step = 0     # inner steps since the last outer step of any fragment
        self.outer_steps = 0    # outer steps applied, every fragment's
        self.failed_syncs = 0
        self.late_syncs = 0     # outer steps whose average was not back by then
        self.waited_s = 0.0

    def _declare_on(self, client):
        client.declare([TensorSpec(f.index, f.elements, -f.index, self.codec, dict(self.params))
                        for f in self._fragments])
        return {f.index: torch.from_numpy(client.slot(f.index)) for f in self._fragments}

    def __enter__(self):
        self._hooks.append(self._inner.register_step_post_hook(self._after_inner_step))
        return self

    def __exit__(self, exc_type, exc, tb):
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        # An average still in flight is waited for and dropped: nothing is left to the agent.
        for f in self._fragments:
            if f.in_flight:
                f.in_flight = False
                try:
                    self._wait(f)
                except GcagentError:
                    pass
        if self._own_client:
            self.client.close()
        return False

    def _current(self):
        """The fragment whose turn it is: every trainer takes them in the same order."""
        return self._fragments[self.outer_steps % len(self._fragments)]

    def _after_inner_step(self, optimizer, args, kwargs):
        self.local_step += 1
        if self.local_step == self._interval - self._delay:
            self._prepare(self._current())
        if self.local_step == self._interval:
            self.local_step = 0
            self._sync(self._current())

    def _prepare(self, f):
        if self._lost is not None:
            self._reconnect()
        # Numbered by the outer step, every fragment's: each iteration of the job is one key, so
        # the agents count it complete, and a node whose trainer leaves after its last outer
        # step does not fail that step on the others.
        f.iteration = self.outer_steps + 1
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
        f.outer_step(self._slots[f.index], self._alpha)

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
