"""col2im of a batch-last product as one numba loop writing the NCHW result (eager transposed convolution).

`fxkit.runtime.ops.batch_last_columns.col2im_batch_last` adds each kernel tap's block into a batch-last
buffer, then copies that buffer to NCHW: on the digits Net's 4x4 maps (batch 32, 64 -> 32 channels)
the nine strided adds and the transposing copy took 70 of the transposed convolution's 160 us. This
loop sums each output element's taps in the same order (tap rows, then tap columns, from zero) and
writes it in place, so its result is the numpy form's bit for bit.

Imported only where `fxkit.runtime.ops.loop_gate.loops_fit` lets it run (numba takes ~0.5 s to import).
"""
import numba
import numpy as np


@numba.njit(cache=True, nogil=True, error_model="numpy")
def col2im_nchw(taps, out, stride, padding, dilation):
    """``out[b, c, y, x]`` = the sum, from zero, over the kernel taps ``(i, j)`` in row-major order that land
    on ``(y, x)`` of ``taps[c, i, j, iy, ix, b]`` (input pixel ``(iy, ix)``, ``y = iy * sh + i * dh - ph``).

    Args:
        taps: ``(OC, KH, KW, H, W, N)``, C-contiguous: each input pixel's contribution to each tap.
        out: ``(N, OC, OH, OW)``, any strides; every element written.
    """
    oc, kh, kw, h, w, n = taps.shape
    oh, ow = out.shape[2], out.shape[3]
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    acc = np.empty(n, taps.dtype)
    for c in range(oc):
        for y in range(oh):
            for x in range(ow):
                acc[:] = 0
                for i in range(kh):
                    t = y + ph - i * dh
                    if t < 0 or t % sh != 0 or t // sh >= h:
                        continue
                    iy = t // sh
                    for j in range(kw):
                        u = x + pw - j * dw
                        if u < 0 or u % sw != 0 or u // sw >= w:
                            continue
                        ix = u // sw
                        for b in range(n):
                            acc[b] += taps[c, i, j, iy, ix, b]
                for b in range(n):
                    out[b, c, y, x] = acc[b]
