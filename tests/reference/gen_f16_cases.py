#!/usr/bin/env python3
"""gen_f16_cases.py — reference data for tests/test_cpu_f16.c (the KVBENCH_CACHE=f16 conversions).

Writes (run from the project root; needs PyPI numpy, see requirements.txt; committed output made with numpy
2.4.6):
  tests/data/f16/f16_to_f32.txt  "F16BITS F32BITS" in hex: numpy.float16 -> float32 for every 16th f16 bit
                                 pattern and all subnormals, zeros and infinities (NaNs left out);
  tests/data/f16/f32_to_f16.txt  "F32BITS F16BITS" in hex, F16BITS being numpy.float32(x).astype(numpy.float16)
                                 (round to nearest, ties to even), cases chosen to hit every branch of a
                                 converter:
  - sampled f16 values exactly (as f32), and the f32 values halfway between neighbouring f16 values (ties, both
    parities), one f32 ulp either side of each sampled halfway point;
  - subnormal results, the boundary into the smallest normal, values below half the smallest subnormal;
  - the largest finite f16 (65504), halfway to the next (65520, rounds to infinity), just below it;
  - f32 subnormals, zeros of both signs, infinities;
  - random f32 bit patterns across the whole exponent range (fixed seed).
NaNs are not listed (their payload bits are the converter's choice); the test checks them separately.
"""
import numpy as np

OUT = "tests/data/f16/f32_to_f16.txt"
OUT_WIDEN = "tests/data/f16/f16_to_f32.txt"


def bits32(x):
    return int(np.asarray(x, dtype=np.float32).view(np.uint32))


def main():
    rng = np.random.default_rng(20261202)
    cases = set()
    all_f16 = np.arange(0, 0x10000, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = all_f16[np.isfinite(all_f16)]
    widen = [h for h in range(0x10000) if (h % 16 == 0 or (h & 0x7C00) in (0, 0x7C00))
             and not np.isnan(np.uint16(h).view(np.float16))]
    with open(OUT_WIDEN, "w") as f:
        f.write("# f16 bits, numpy float32 bits (numpy %s): tests/reference/gen_f16_cases.py\n" % np.__version__)
        for h in widen:
            f.write("%04x %08x\n" % (h, bits32(np.uint16(h).view(np.float16).astype(np.float32))))
    # sampled f16 values exactly
    for v in finite[::31].astype(np.float32):
        cases.add(bits32(v))
    # halfway points between neighbours (positive side; sign handled by the negatives below), sampled
    pos = np.unique(finite[finite >= 0].astype(np.float64))
    mids = (pos[:-1] + pos[1:]) / 2  # exact in f64, and exact in f32 (f16 spacing needs 12 bits)
    pick = np.concatenate([np.arange(0, len(mids), 61), np.arange(0, 200), np.arange(len(mids) - 50, len(mids))])
    for m in mids[np.unique(pick)]:
        m32 = np.float32(m)
        assert float(m32) == m
        for v in (m32, np.nextafter(m32, np.float32(np.inf)), np.nextafter(m32, np.float32(0))):
            cases.add(bits32(v))
            cases.add(bits32(-v))
    specials = [0.0, -0.0, np.inf, -np.inf, 65504.0, 65519.99, 65520.0, 65536.0, 1e6, 3.4e38,
                2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * 1.0000001, 2.0 ** -26, 2.0 ** -14, 2.0 ** -14 - 2.0 ** -25,
                2.0 ** -14 - 2.0 ** -26, 1e-45, 1e-40, 1.17e-38, 0.1, 1.0 / 3.0, 1.0, 2.0, 0.5]
    for v in specials:
        cases.add(bits32(np.float32(v)))
        cases.add(bits32(-np.float32(v)))
    # random bit patterns over the whole range, and random values in the range keys and values take
    for u in rng.integers(0, 2 ** 32, size=1000, dtype=np.uint64):
        x = np.uint32(u).view(np.float32)
        if not np.isnan(x):
            cases.add(int(u))
    for v in rng.standard_normal(500).astype(np.float32) * np.float32(8.0):
        cases.add(bits32(v))
    with open(OUT, "w") as f:
        f.write("# f32 bits, numpy float16 bits (numpy %s): tests/reference/gen_f16_cases.py\n" % np.__version__)
        for u in sorted(cases):
            x = np.uint32(u).view(np.float32)
            with np.errstate(over="ignore"):
                h = int(np.float32(x).astype(np.float16).view(np.uint16))
            f.write("%08x %04x\n" % (u, h))
    print("wrote %d cases to %s, %d to %s" % (len(cases), OUT, len(widen), OUT_WIDEN))


if __name__ == "__main__":
    main()
