"""MXNet's own expected values for its gradient compression, independent of gcagent.

The first four functions are copied from Apache MXNet's tests/nightly/test_kvstore.py, with
only the NDArray-or-numpy input made explicit:

- compute_expected_2bit_quantization: MXNet 1.9.1 (tag 1.9.1), which
  tests/nightly/dist_sync_kvstore.py of 1.9.1 imports for test_sync_2bit_compression;
- compute_1bit, compute_2bit, compute_expected_quantization: MXNet master (HEAD of
  apache/mxnet), which master's dist_sync_kvstore.py imports for test_sync_1bit_compression
  and test_sync_2bit_compression.

They walk the array one element at a time in Python (about 2 s per million elements), too slow
for the nightly test's 1.4-million-element keys repeated 7 times in several processes on two
cores, so expected_quantization below does the same arithmetic with whole-array numpy
operations: the same float64 residual (float32 gradient plus float64 residual, as the loops
promote it), the same comparisons and the same packed words. test_mxnet_ported.py checks that
it gives the copied functions' results bit for bit before any check relies on it."""

import numpy as np


def _as_numpy(arr):
    """MXNet's helpers take an NDArray (arr.asnumpy()); numpy arrays are taken as they are."""
    return arr.asnumpy() if hasattr(arr, "asnumpy") else np.asarray(arr)


# ---- copied from MXNet 1.9.1, tests/nightly/test_kvstore.py ----

def compute_expected_2bit_quantization(arr, curr_residual, threshold):
    from struct import pack,unpack
    def bits2int(bits):
        bits = [int(x) for x in bits[::-1]]
        x = 0
        for i in range(len(bits)):
            x += bits[i]*2**i
        return x

    def as_float32(s):
        return unpack("f",pack("I", bits2int(s)))[0]

    # str_quant stores the quantized representation as a sequence of bits
    str_quant = ''
    new_residual = []
    decompr = []

    arr_npy = _as_numpy(arr)
    for i, a in np.ndenumerate(arr_npy):
        a += curr_residual[i]
        if a >= threshold:
            str_quant += '11'
            new_residual.append(a - threshold)
            decompr.append(threshold)
        elif a <= (-1*threshold):
            str_quant += '10'
            new_residual.append(a + threshold)
            decompr.append(-1*threshold)
        else:
            str_quant += '00'
            new_residual.append(a)
            decompr.append(0)
    # append extra bits when size of array not a factor of 16
    if len(str_quant)%16 != 0:
        str_quant += '0'*(16 - len(str_quant)%16)

    compr = []
    # converts the string generated into integers 32chars at a time
    i = 0
    while i<len(str_quant):
        cur_float = str_quant[i+24:i+32] + str_quant[i+16:i+24] + str_quant[i+8:i+16] + str_quant[i:i+8]
        compr.append(as_float32(cur_float))
        i+=32
    return np.array(compr), np.array(new_residual).reshape(arr.shape), np.array(decompr).reshape(arr.shape)


# ---- copied from MXNet master, tests/nightly/test_kvstore.py ----

def compute_1bit(arr, curr_residual, threshold):
    str_quant = ""
    new_residual = []
    decompr = []

    for idx, val in np.ndenumerate(arr):
        val += curr_residual[idx]
        if val > threshold:
            str_quant += "1"
            new_residual.append(val - 1)
            decompr.append(1)
        else:
            str_quant += "0"
            new_residual.append(val + 1)
            decompr.append(-1)

    # append extra bits when size of array not a factor of 32
    if len(str_quant) != 32:
        str_quant += "0" * (32 - len(str_quant) % 32)
    return str_quant, new_residual, decompr

def compute_2bit(arr, curr_residual, threshold):
    str_quant = ""
    new_residual = []
    decompr = []

    for idx, val in np.ndenumerate(arr):
        val += curr_residual[idx]
        if val >= threshold:
            str_quant += "11"
            new_residual.append(val - threshold)
            decompr.append(threshold)
        elif val <= -threshold:
            str_quant += "10"
            new_residual.append(val + threshold)
            decompr.append(-threshold)
        else:
            str_quant += "00"
            new_residual.append(val)
            decompr.append(0)

    # append extra bits when size of array not a factor of 16
    if len(str_quant) % 16 != 0:
        str_quant += "0" * (16 - len(str_quant) % 16)
    return str_quant, new_residual, decompr

def compute_expected_quantization(arr, curr_residual, threshold, quantize_func):

    from struct import pack,unpack
    def as_float32(s):
        return unpack("f",pack("I", int(s, 2)))[0]

    arr_npy = _as_numpy(arr)
    # str_quant stores the quantized representation as a sequence of bits
    str_quant, new_residual, decompr = quantize_func(arr_npy, curr_residual, threshold)

    compr = []
    # converts the string generated into integers 32chars at a time
    for i in range(0, len(str_quant), 32):
        cur_float = str_quant[i+24:i+32] + str_quant[i+16:i+24] + str_quant[i+8:i+16] + str_quant[i:i+8]
        compr.append(as_float32(cur_float))

    return np.array(compr), np.array(new_residual).reshape(arr.shape), np.array(decompr).reshape(arr.shape)


# ---- the same arithmetic on whole arrays ----

def _words(codes, bits, pad_to):
    """The copied helpers' compr: codes of `bits` bits, first element in the high bits of the
    first byte, padded with zero bits to a multiple of pad_to elements, read 4 bytes at a
    time as a little-endian float32 (the byte swap in as_float32), then widened to float64."""
    per_byte = 8 // bits
    padded = np.zeros(-(-codes.size // pad_to) * pad_to, np.uint8)
    padded[:codes.size] = codes
    shifts = np.arange(8 - bits, -1, -bits, dtype=np.uint8)
    packed = np.bitwise_or.reduce(padded.reshape(-1, per_byte) << shifts, axis=1).astype(np.uint8)
    return np.frombuffer(packed.tobytes(), "<f4").astype(np.float64)


def expected_quantization(arr, curr_residual, threshold, kind):
    """(compr, new_residual, decompr) as compute_expected_quantization(arr, curr_residual,
    threshold, compute_<kind>) returns them (kind "2bit" or "1bit"); "2bit" is also what
    1.9.1's compute_expected_2bit_quantization returns."""
    a = _as_numpy(arr).astype(np.float64) + np.asarray(curr_residual, np.float64)
    if kind == "2bit":
        pos = a >= threshold
        neg = ~pos & (a <= -threshold)
        new_residual = np.where(pos, a - threshold, np.where(neg, a + threshold, a))
        # the list holds threshold, -threshold and the int 0, so np.array makes it int64 when
        # nothing met the threshold
        held = [threshold, 0] if (pos | neg).any() else [0]
        decompr = np.where(pos, threshold, np.where(neg, -threshold, 0)).astype(np.array(held).dtype)
        codes = np.where(pos, 3, np.where(neg, 2, 0)).astype(np.uint8).reshape(-1)
        compr = _words(codes, 2, 16)
    elif kind == "1bit":
        pos = a > threshold
        new_residual = np.where(pos, a - 1, a + 1)
        decompr = np.where(pos, 1, -1).astype(np.array([1]).dtype)  # the list holds the ints 1 and -1
        codes = pos.astype(np.uint8).reshape(-1)
        compr = _words(codes, 1, 32)
        if codes.size != 32 and codes.size % 32 == 0:
            compr = np.append(compr, 0.0)  # compute_1bit pads a full last word with 32 more zeros
    else:
        raise ValueError(f"unknown quantization {kind}")
    return compr, new_residual.reshape(np.shape(arr)), decompr.reshape(np.shape(arr))
