"""MXNet's own gradient compression checks, ported, run against the store named by argv[1]:

  gcagent    gcagent.mxnet.KVStore() in a trainer of shim_cluster.py (GCAGENT_* environment)
  dist_sync  mx.kv.create('dist_sync') in a worker of mxnet_dist_sync.py (DMLC_* environment)

Suites (--suite, repeatable):

  2bit  MXNet 1.9.1 tests/nightly/dist_sync_kvstore.py --type=compressed_cpu: init_kv_compressed,
        set_optimizer('test', rescale_grad=rate), test_sync_2bit_compression; then 1.9.1
        tests/nightly/test_kvstore.py test_compress_kvstore('2bit', 0.5), on the same store.
  1bit  MXNet master dist_sync_kvstore.py --type=compressed_cpu_1bit (threshold 0):
        init_kv_compressed(kv, '1bit', 0), test_sync_1bit_compression; then master's
        test_compress_kvstore('1bit', t) for t = -0.5, 0, 0.5 (--kvstore-1bit-threshold picks;
        -0.5 and 0.5 on stores of their own). gcagent only: MXNet 1.9.1 answers "Unknown type
        for gradient compression 1bit".

nrepeat is 7, the default of dist_sync_kvstore.py's argparse (the nightly runner,
ci/docker/runtime_functions.sh, passes none); test_kvstore.py's checks keep its nrepeat of 10.

What one dist_sync worker is (Worker below): a dist_sync process pushing a list of values, one
per device (--devices, 1 or 2), or the local_size trainers of one gcagent agent, which the agent
sums before compression with one residual as dist_sync sums a worker's devices. MXNet's
checks push one value per worker; with 2 devices or 2 trainers each pushes half of it (exact,
and the halves add up to the value bit for bit), so the worker pushes MXNet's value and MXNet's
expected values hold with nworker = the number of dist_sync workers (agents for gcagent: with
2 agents x 2 trainers MXNet's nworker = kv.num_workers = 4 would not: 2 trainers pushing 0.4
each make 0.8 on their agent, which meets the threshold). test_kvstore.py's checks were
written for MXNet's device store, where every device has a residual of its own; in dist_sync a
worker's devices are summed first, so their random check sums each worker's devices in fp32
and quantizes that sum with the worker's residual (see check_compr_random_devices).

RACE: dist_sync's pull and push are asynchronous, and a pull writes the buffer of the previous
push while a single-device push reads the new value: nothing orders check_compr_random's
"pull orig_val, then push" (the engine may send the push first, and then orig_val already holds
the update: seen on real dist_sync, rank 0 got a difference of 0). The port waits for that pull
before pushing; a pull after a push is ordered by dist_sync itself.

Every check is run on its own and reported by name: "passed", or "failed: <the first
mismatch>". A mismatch is recorded, not raised, so every process makes the same pushes
whatever it finds; an exception from the store stops the suite (the rest are "not run").
Prints "report: {json}" last."""

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import mxnet as mx
import numpy as np
import numpy.random as rnd
from mxnet.test_utils import assert_almost_equal as mx_assert_almost_equal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/clients/python
from mxnet_reference import expected_quantization  # noqa: E402

RESULTS = {}
SECONDS = {}  # check -> wall seconds (for the report, never asserted on)
_CURRENT = [None]


def _fail(message):
    """Records the first mismatch of the running check."""
    name = _CURRENT[0]
    if RESULTS.get(name) == "passed":
        RESULTS[name] = "failed: " + message[:1500]


def _describe(A, x):
    a = A.asnumpy()
    want = x.asnumpy() if hasattr(x, "asnumpy") else np.broadcast_to(np.asarray(x, a.dtype), a.shape)
    bad = np.flatnonzero(a.reshape(-1) != want.reshape(-1))
    first = bad[:4].tolist()
    return (f"{bad.size} of {a.size} elements differ, e.g. at {first}: got {a.reshape(-1)[first].tolist()}, "
            f"want {want.reshape(-1)[first].tolist()}")


def check_diff(A, x, rank=None):
    """dist_sync_kvstore.py's check_diff (assert A == x, x an array or a scalar), recorded."""
    if np.sum(np.abs((A - x).asnumpy())) != 0:
        _fail(f"check_diff (rank {rank}): {_describe(A, x)}")


check_diff_to_scalar = check_diff  # test_kvstore.py's twin


def assert_almost_equal(a, b, **kwargs):
    """mxnet.test_utils.assert_almost_equal, recorded."""
    try:
        mx_assert_almost_equal(a, b, **kwargs)
    except AssertionError as e:
        _fail(f"assert_almost_equal: {e}")


def run_checks(prefix, checks):
    """Runs (name, function, args) in order; after an exception the rest are not run."""
    for i, (name, fn, args) in enumerate(checks):
        _CURRENT[0] = f"{prefix}.{name}"
        RESULTS[_CURRENT[0]] = "passed"
        start = time.time()
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - reported by name
            RESULTS[_CURRENT[0]] = "failed: raised " + traceback.format_exc()[-1500:]
            for later, _, _ in checks[i + 1:]:
                RESULTS[f"{prefix}.{later}"] = f"not run: {name} raised"
            return False
        finally:
            SECONDS[_CURRENT[0]] = round(time.time() - start, 2)
    return True


class Worker:
    """One dist_sync worker as MXNet's checks see it: kv.push(key, value) pushes the worker's
    value (shared among its devices or trainers), kv.pull(key, out) pulls into out (on every
    device, which must all get the same bits)."""

    def __init__(self, kv, store, devices):
        self.kv = kv
        if store == "dist_sync":
            self.parts, self.part, self.rank, self.count = devices, None, kv.rank, kv.num_workers
        else:
            if devices != 1:
                raise SystemExit("gcagent: the trainers of an agent are the worker's devices; --devices is 1")
            size = kv.local_size
            self.parts, self.part, self.rank, self.count = size, kv.rank % size, kv.node_rank, kv.num_nodes
        if self.parts not in (1, 2):
            raise SystemExit("1 or 2 devices (or trainers) per worker: halves add up exactly, quarters may not")

    def init(self, key, value):
        self.kv.init(key, value)

    def set_gradient_compression(self, params):
        self.kv.set_gradient_compression(params)

    def set_optimizer(self, optimizer):
        self.kv.set_optimizer(optimizer)

    def push(self, key, value):
        self.push_parts(key, [value if self.parts == 1 else value / self.parts] * self.parts)

    def push_parts(self, key, values):
        """values: one array per device (dist_sync) or per trainer of the agent (gcagent)."""
        if self.part is not None:
            self.kv.push(key, values[self.part])
        elif self.parts == 1:
            self.kv.push(key, values[0])
        else:
            self.kv.push(key, [v.copyto(mx.cpu(d)) for d, v in enumerate(values)])

    def pull(self, key, out):
        if self.part is not None or self.parts == 1:
            self.kv.pull(key, out=out)
            return
        outs = [out] + [mx.nd.zeros(out.shape, ctx=mx.cpu(d), dtype=out.dtype) for d in range(1, self.parts)]
        self.kv.pull(key, out=outs)
        for d, o in enumerate(outs[1:], 1):
            if not np.array_equal(o.asnumpy().view(np.uint32), out.asnumpy().view(np.uint32)):
                _fail(f"device {d} pulled other bits than device 0 for key {key}")


def device_sum(values):
    """A dist_sync worker's sum over its devices in fp32 (src/kvstore/comm.h ReduceSumCPU:
    in_0 += in_1 + in_2 + in_3 + in_4, four at a time); the agent's sum of two trainers is
    the same a + b."""
    total = np.array(values[0], np.float32)
    for i in range(1, len(values), 4):
        group = np.array(values[i], np.float32)
        for v in values[i + 1:i + 4]:
            group = group + np.asarray(v, np.float32)
        total = total + group
    return total


# ---- MXNet 1.9.1 tests/nightly/dist_sync_kvstore.py (master for 1bit) ----

shape = (2, 3)
irregular_shape = (1211, 1211)
big_shape = (1200, 1200)        # bigger than MXNET_KVSTORE_BIGARRAY_BOUND

compr_keys_shapes = [('1000', shape), ('1200', irregular_shape), ('1300', big_shape)]
compr_init_keys_shapes = [('1001', shape), ('1201', irregular_shape), ('1301', big_shape)]
compr_random_keys_shapes = [('1002', shape), ('1202', irregular_shape), ('1302', big_shape)]

rate = 2


def set_optimizer(kv, use_multiprecision=True):
    # init updater on servers
    kv.set_optimizer(mx.optimizer.create('test', rescale_grad=rate, multi_precision=use_multiprecision))
    return kv


def init_kv_compressed(kv, compression='2bit', threshold=.5):
    kv.set_gradient_compression({'type': compression, 'threshold': threshold})
    # init kv compression keys
    for k, s in compr_keys_shapes:
        kv.init(k, mx.nd.zeros(s))
    # to test inactive mode
    for k, s in compr_init_keys_shapes:
        kv.init(k, mx.nd.ones(s))
    return kv, threshold


def check_compr_pull_before_push(kv):
    for k, s in compr_keys_shapes:
        val = mx.nd.ones(s)
        kv.pull(k, val)
        check_diff(val, 0)
    for k, s in compr_init_keys_shapes:
        # tests that GC is not used for init of a key
        val = mx.nd.zeros(s)
        kv.pull(k, val)
        check_diff(val, 1)


def test_sync_2bit_compression(kv, nworker, threshold, nrepeat):
    def check_compr_residual(threshold):
        for k, s in compr_keys_shapes:
            # doesn't meet threshold
            kv.push(k, mx.nd.ones(s) * 0.4)
            val = mx.nd.zeros(s)
            kv.pull(k, val)
            check_diff(val, 0)

            # just meets threshold with residual
            kv.push(k, mx.nd.ones(s) * (threshold - 0.4))
            val2 = mx.nd.zeros(s)
            kv.pull(k, val2)
            curval = threshold * rate * nworker
            check_diff(val2, curval)

            # doesn't meet threshold
            kv.push(k, mx.nd.ones(s) * 0.2)
            val3 = mx.nd.zeros(s)
            kv.pull(k, val3)
            check_diff(val3, curval)

            # exceeds again
            kv.push(k, mx.nd.ones(s) * (threshold - 0.2))
            val4 = mx.nd.zeros(s)
            kv.pull(k, val4)
            curval += threshold * rate * nworker
            check_diff(val4, curval)
            # residual is 0 now

    def check_compr_ones(threshold):
        for k, s in compr_keys_shapes:
            val = mx.nd.zeros(s)
            kv.pull(k, val)
            curval = val[0][0].asnumpy()[0]
            kv.push(k, mx.nd.ones(s) * threshold)
            val2 = mx.nd.zeros(s)
            kv.pull(k, val2)
            newval = curval + rate * nworker * threshold
            check_diff(val2, newval)
            # residual = 0  again

    def check_compr_zero():
        for k, s in compr_keys_shapes:
            kv.push(k, mx.nd.zeros(s))
            # to check that all are set to 0s
            val = mx.nd.ones(s)
            kv.pull(k, val)
            check_diff(val, 0)

    def check_compr_random(threshold, nrepeat):
        # set a seed so all workers generate same data. knowing this helps
        # calculate expected value after pull
        mx.random.seed(123)
        rnd.seed(123)

        # use new keys so residual is 0 for calculation of expected
        for k, s in compr_random_keys_shapes:
            kv.init(k, mx.nd.zeros(s))
        for k, s in compr_random_keys_shapes:
            curr_residual = np.zeros(s)
            for l in range(nrepeat):
                orig_val = mx.nd.zeros(s)
                kv.pull(k, orig_val)
                orig_val.wait_to_read()  # port: see RACE

                grad = mx.nd.array(rnd.rand(s[0], s[1]))
                # creates a copy because push changes grad because of assignment
                grad_cpy = mx.nd.array(grad)
                kv.push(k, grad)
                val = mx.nd.zeros(s)
                kv.pull(k, val)

                diff = val - orig_val

                # compute expected by using simulation of operator
                # (compute_expected_2bit_quantization's arithmetic, on whole arrays)
                compr, curr_residual, decompr = expected_quantization(grad_cpy, curr_residual, threshold, "2bit")
                decompr *= nworker * rate
                assert_almost_equal(diff.asnumpy(), decompr)

    return [("check_compr_pull_before_push", check_compr_pull_before_push, (kv,)),
            ("check_compr_zero", check_compr_zero, ()),
            ("check_compr_residual", check_compr_residual, (threshold,)),
            ("check_compr_ones", check_compr_ones, (threshold,)),
            ("check_compr_random", check_compr_random, (threshold, nrepeat))]


def test_sync_1bit_compression(kv, nworker, threshold, nrepeat):

    def check_compr_ones():
        for k, s in compr_keys_shapes:
            val = mx.nd.zeros(s)
            kv.pull(k, val)
            curr_val = val[0][0].asnumpy()[0]
            kv.push(k, mx.nd.ones(s))
            out = mx.nd.zeros(s)
            kv.pull(k, out=out)
            newval = curr_val + rate * nworker
            check_diff(out, newval)

    def check_compr_neg_ones():
        for k, s in compr_keys_shapes:
            val = mx.nd.zeros(s)
            kv.pull(k, val)
            curr_val = val[0][0].asnumpy()[0]
            kv.push(k, -1 * mx.nd.ones(s))
            out = mx.nd.ones(s)
            kv.pull(k, out=out)
            # current value should be zero after call
            # check_compr_ones and check_compr_neg_ones
            check_diff(out, 0)

    def check_compr_residual(threshold):
        curr_residual = 0
        curr_val = rate * nworker if 2 + curr_residual > threshold else -rate * nworker
        for k, s in compr_keys_shapes:
            kv.push(k, 2 * mx.nd.ones(s))
            out = mx.nd.zeros(s)
            kv.pull(k, out)
            check_diff(out, curr_val)

        curr_residual = 1 if 2 > threshold else 3
        curr_val += rate * nworker if 0 + curr_residual > threshold else -rate * nworker
        for k, s in compr_keys_shapes:
            kv.push(k, mx.nd.zeros(s))
            out = mx.nd.zeros(s)
            kv.pull(k, out)
            check_diff(out, curr_val)

        curr_residual += -1 if curr_residual > threshold else +1
        curr_val += rate * nworker if -2 + curr_residual > threshold else -rate * nworker
        for k, s in compr_keys_shapes:
            kv.push(k, -2 * mx.nd.ones(s))
            out = mx.nd.zeros(s)
            kv.pull(k, out)
            check_diff(out, curr_val)

    def check_compr_random(threshold, nrepeat):
        # set a seed so all workers generate same data. knowing this helps
        # calculate expected value after pull
        mx.random.seed(123)
        rnd.seed(123)

        # use new keys so residual is 0 for calculation of expected
        for k, s in compr_random_keys_shapes:
            kv.init(k, mx.nd.zeros(s))
        for k, s in compr_random_keys_shapes:
            curr_residual = np.zeros(s)
            for _ in range(nrepeat):
                orig_val = mx.nd.zeros(s)
                kv.pull(k, orig_val)
                orig_val.wait_to_read()  # port: see RACE

                grad = mx.nd.array(rnd.rand(s[0], s[1]))
                # creates a copy because push changes grad because of assignment
                grad_cpy = mx.nd.array(grad)
                kv.push(k, grad)
                val = mx.nd.zeros(s)
                kv.pull(k, val)

                diff = val - orig_val

                # compute expected by using simulation of operator
                # (compute_expected_quantization(..., compute_1bit)'s arithmetic, on whole arrays)
                compr, curr_residual, decompr = expected_quantization(grad_cpy, curr_residual, threshold, "1bit")
                decompr *= nworker * rate
                assert_almost_equal(diff.asnumpy(), decompr)

    return [("check_compr_pull_before_push", check_compr_pull_before_push, (kv,)),
            ("check_compr_ones", check_compr_ones, ()),
            ("check_compr_neg_ones", check_compr_neg_ones, ()),
            ("check_compr_residual", check_compr_residual, (threshold,)),
            ("check_compr_random", check_compr_random, (threshold, nrepeat))]


# ---- tests/nightly/test_kvstore.py test_compress_kvstore (1.9.1 for 2bit, master for 1bit) ----
# For a dist_sync worker holding a list of devices. Its int keys become strings (dist_sync
# refuses string and int keys in one store, and these checks share the store of the ones
# above); 'test' with rescale_grad=rate is 1.9.1's form of master's learning_rate=-rate.
# nworker (there: the devices, each with its own residual) is the number of workers.

keys = ['3', '5', '7']
# let the last shape exceed MXNET_KVSTORE_BIGARRAY_BOUND
shapes = [(4, 4), (100, 100), (2000, 2000)]
gc_init_test_key = '9'
kvstore_nrepeat = 10


def test_compress_kvstore(kv, nworker, compression='2bit', threshold=0.5, nrepeat=kvstore_nrepeat, init=True):
    if init:
        for k, s in zip(keys, shapes):
            kv.init(k, mx.nd.zeros(s))
        # init one key with 1s so we can check if it was compressed during init
        kv.init(gc_init_test_key, mx.nd.ones(shapes[0]))
    # use different keys for random tests so that
    # we can track residual from start
    random_keys = ['13', '15', '17']
    if init:
        for k, s in zip(random_keys, shapes):
            kv.init(k, mx.nd.zeros(s))

    def pull_init_test(kv):
        # checks that compression is not applied to init of key
        out = mx.nd.zeros(shapes[0])
        kv.pull(gc_init_test_key, out=out)
        exp = np.ones_like(out.asnumpy())
        assert_almost_equal(out.asnumpy(), exp)

    def pull_before_push(kv):
        for i in range(nrepeat):
            for j in range(len(keys)):
                out = mx.nd.ones(shapes[j])
                kv.pull(keys[j], out=out)
                exp = np.zeros_like(out.asnumpy())
                assert_almost_equal(out.asnumpy(), exp)

    def push_ones(kv, sign=1):
        for i in range(nrepeat):
            for j in range(len(keys)):
                kv.push(keys[j], sign * mx.nd.ones(shapes[j]))
                out = mx.nd.zeros(shapes[j])
                kv.pull(keys[j], out=out)
                if sign == 1:
                    exp = (i + 1) * rate * nworker * np.ones_like(out.asnumpy())
                else:
                    exp = (nrepeat - i - 1) * rate * nworker * np.ones_like(out.asnumpy())
                assert_almost_equal(out.asnumpy(), exp)

    def verify_residual_1bit(kv, threshold, rate):
        # current values must equal to zero
        for j in range(len(keys)):
            out = mx.nd.ones(shapes[j])
            kv.pull(keys[j], out=out)
            exp = np.zeros_like(out.asnumpy())
            assert_almost_equal(out.asnumpy(), exp)

        curr_residual = 0
        curr_val = rate * nworker if 2 > threshold else -rate * nworker
        for j in range(len(keys)):
            kv.push(keys[j], 2 * mx.nd.ones(shapes[j]))
            out = mx.nd.zeros(shapes[j])
            kv.pull(keys[j], out=out)
            check_diff_to_scalar(out, curr_val)

        curr_residual = 1 if 2 > threshold else 3
        curr_val += rate * nworker if 0 + curr_residual > threshold else -rate * nworker
        for j in range(len(keys)):
            kv.push(keys[j], mx.nd.zeros(shapes[j]))
            out = mx.nd.zeros(shapes[j])
            kv.pull(keys[j], out=out)
            check_diff_to_scalar(out, curr_val)

        curr_residual += -1 if curr_residual > threshold else +1
        curr_val += rate * nworker if -2 + curr_residual > threshold else -rate * nworker
        for j in range(len(keys)):
            kv.push(keys[j], -2 * mx.nd.ones(shapes[j]))
            out = mx.nd.zeros(shapes[j])
            kv.pull(keys[j], out=out)
            check_diff_to_scalar(out, curr_val)

    def push_zeros(kv):
        for i in range(nrepeat):
            for j in range(len(keys)):
                kv.push(keys[j], mx.nd.zeros(shapes[j]))
                out = mx.nd.ones(shapes[j])
                kv.pull(keys[j], out=out)
                exp = np.zeros_like(out.asnumpy())
                assert_almost_equal(out.asnumpy(), exp)

    def verify_residual_2bit(kv, threshold, rate):
        for j in range(len(keys)):
            kv.push(keys[j], mx.nd.ones(shapes[j]) * 0.4)
            out = mx.nd.zeros(shapes[j])
            kv.pull(keys[j], out=out)
            check_diff_to_scalar(out, 0)

            kv.push(keys[j], mx.nd.ones(shapes[j]) * (threshold - 0.3))
            out = mx.nd.zeros(shapes[j])
            kv.pull(keys[j], out=out)
            curval = threshold * rate * nworker
            check_diff_to_scalar(out, curval)

            kv.push(keys[j], mx.nd.ones(shapes[j]) * (0.2))
            out = mx.nd.zeros(shapes[j])
            kv.pull(keys[j], out=out)
            check_diff_to_scalar(out, curval)

            kv.push(keys[j], mx.nd.ones(shapes[j]) * (threshold - 0.3))
            out = mx.nd.zeros(shapes[j])
            kv.pull(keys[j], out=out)
            curval += threshold * rate * nworker
            check_diff_to_scalar(out, curval)
            # residual would be 0 now
        return curval

    def check_neg(kv, neg, rate, curval):
        for r in range(nrepeat):
            curval = curval + rate * nworker * neg
            for j in range(len(keys)):
                kv.push(keys[j], mx.nd.ones(shapes[j]) * neg)
                out = mx.nd.ones(shapes[j])
                kv.pull(keys[j], out=out)
                check_diff_to_scalar(out, curval)
            # residual would be 0 again

    def check_compr_random_devices(kv, threshold):
        # test_kvstore.py's check_compr_random: every device pushes its own
        # uniform(-0.6, 0.6). Each process draws every worker's values (seeded by worker,
        # device and key) to know the expected sum; a worker's devices are summed in fp32 and
        # the sum is quantized with the worker's residual (dist_sync), not each device's value
        # with its own (the device store test_kvstore.py was written for).
        for n, (k, s) in enumerate(zip(random_keys, shapes)):
            curr_residual = [np.zeros(s) for g in range(nworker)]
            draws = [[rnd.RandomState(1000 * w + 100 * g + n).uniform(-0.6, 0.6, s).astype(np.float32)
                      for g in range(kv.parts)] for w in range(nworker)]
            orig_val = mx.nd.zeros(s)
            kv.pull(k, out=orig_val)
            orig_val.wait_to_read()  # port: see RACE
            grads = [mx.nd.array(d) for d in draws[kv.rank]]
            kv.push_parts(k, grads)
            val = mx.nd.zeros(s)
            kv.pull(k, out=val)
            diffs = val - orig_val
            # compute expected by using simulation of operator
            # on cpu
            sum_dequantized_vals = np.zeros(s)
            for w in range(nworker):
                compr, curr_residual[w], decompr = expected_quantization(
                    device_sum(draws[w]), curr_residual[w], threshold, compression)
                sum_dequantized_vals += (decompr * rate)
            assert_almost_equal(diffs.asnumpy(), sum_dequantized_vals)

    checks = [("pull_init_test", pull_init_test, (kv,)), ("pull_before_push", pull_before_push, (kv,))]
    if compression == '1bit':
        checks += [("push_ones", push_ones, (kv, 1)), ("push_neg_ones", push_ones, (kv, -1)),
                   ("verify_residual_1bit", verify_residual_1bit, (kv, threshold, rate))]
    elif compression == '2bit':
        checks += [("push_zeros", push_zeros, (kv,))]
        curval = [0]
        checks += [("verify_residual", lambda: curval.__setitem__(0, verify_residual_2bit(kv, threshold, rate)), ()),
                   ("check_neg", lambda: check_neg(kv, -1 * threshold, rate, curval[0]), ())]
    checks += [("check_compr_random", check_compr_random_devices, (kv, threshold))]
    return checks


# ---- not from MXNet ----

def check_device_list_sum_order(kv, nworker, threshold):
    """A worker's devices are added as comm.h's ReduceSumCPU adds them, a + (b + c), not
    (a + b) + c: with 2bit at 0.5, [0.5 - 2^-25, 2^-27, 2^-27] sums to 0.5 (quantized to 0.5),
    left to right to 0.49999997 (quantized to 0). Every process pushes a list of 3 (3 CPU
    contexts in dist_sync; for gcagent one trainer holding 3 arrays); with 2 trainers per
    agent each pushes halves, and the agent adds the two."""
    k, s = '2000', (4, 4)
    kv.init(k, mx.nd.zeros(s))
    parts = 1 if kv.part is None else kv.parts
    values = [np.float32(0.5 - 2.0 ** -25), np.float32(2.0 ** -27), np.float32(2.0 ** -27)]
    arrays = [mx.nd.ones(s, ctx=mx.cpu(d)) * float(v / parts) for d, v in enumerate(values)]
    kv.kv.push(k, arrays)
    val = mx.nd.zeros(s)
    kv.kv.pull(k, out=val)
    check_diff(val, threshold * rate * nworker)


def suite_2bit(kv, nrepeat):
    w = kv.count
    kv, threshold = init_kv_compressed(kv)
    kv = set_optimizer(kv)
    checks = test_sync_2bit_compression(kv, w, threshold, nrepeat)
    if run_checks("2bit", checks):
        if run_checks("2bit.test_compress_kvstore", test_compress_kvstore(kv, w, '2bit', 0.5)):
            run_checks("2bit.extra", [("device_list_sum_order", check_device_list_sum_order, (kv, w, threshold))])


def suite_1bit(make_kv, nrepeat, kvstore_thresholds):
    kv = make_kv("1bit")
    w = kv.count
    kv, threshold = init_kv_compressed(kv, '1bit', 0)
    kv = set_optimizer(kv)
    if not run_checks("1bit", test_sync_1bit_compression(kv, w, threshold, nrepeat)):
        return
    for t in kvstore_thresholds:
        store = kv
        if t != threshold:
            store = make_kv(f"1bit{t:g}")
            store.set_gradient_compression({'type': '1bit', 'threshold': t})
            set_optimizer(store)
        if not run_checks(f"1bit.test_compress_kvstore[{t:g}]", test_compress_kvstore(store, w, '1bit', t)):
            return


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("store", choices=["gcagent", "dist_sync"])
    parser.add_argument("--suite", action="append", choices=["2bit", "1bit"])
    parser.add_argument("--nrepeat", type=int, default=7)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--kvstore-1bit-threshold", type=float, action="append",
                        help="test_compress_kvstore's 1bit thresholds (master's: -0.5, 0, 0.5)")
    opt = parser.parse_args()
    made = []
    if opt.store == "dist_sync":
        kv = mx.kv.create('dist_sync')

        def make_kv(name):  # one store a process
            made.append(Worker(kv, "dist_sync", opt.devices))
            return made[-1]
    else:
        import gcagent
        import gcagent.mxnet

        def make_kv(name):  # a store of its own: a job of its own on the agents
            store = gcagent.mxnet.KVStore(gcagent.Reducer(gcagent.Client(job=f"ported-{name}")))
            made.append(Worker(store, "gcagent", opt.devices))
            return made[-1]
    for suite in opt.suite or ["2bit"]:
        if suite == "2bit":
            suite_2bit(make_kv("2bit"), opt.nrepeat)
        elif opt.store == "dist_sync":
            raise SystemExit("MXNet 1.9.1 has no 1bit compression")
        else:
            suite_1bit(make_kv, opt.nrepeat, opt.kvstore_1bit_threshold or [-0.5, 0, 0.5])
    w = made[-1]
    print("report: " + json.dumps({"store": opt.store, "rank": w.kv.rank, "worker": w.rank, "workers": w.count,
                                   "parts": w.parts, "checks": RESULTS, "seconds": SECONDS}), flush=True)

if __name__ == "__main__":
    main()
