"""One output pixel's im2col row, for the numba int8 engine's convolutions (both product paths).

The row's columns are ``(ky, kx, channel)`` of a channels-last input, so each tap
is one contiguous copy of the channels; a tap in the padding is filled with
``pad`` (the zero point, as the operand the product sees it).
"""
import numba

_JIT = {"cache": True, "nogil": True}


@numba.njit(inline="always", **_JIT)
def gather_pixel(x, m, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, pad, rows, r):
    """Write the im2col row of output pixel ``m`` (``image * oh * ow + y * ow + x``) of the NHWC ``x``
    into ``rows[r, :kh * kw * channels]``."""
    _, h, width, channels = x.shape
    image, pixel = m // (oh * ow), m % (oh * ow)
    oy, ox = pixel // ow, pixel % ow
    col = 0
    # NOTE: plain indexing, no row views: a numba view costs two atomic reference counts.
    for i in range(kh):
        y = oy * sh - ph + i * dh
        for j in range(kw):
            xx = ox * sw - pw + j * dw
            if 0 <= y < h and 0 <= xx < width:
                # NOTE: blocks of 16 of fixed length: a loop over a runtime channel count (often 64)
                # falls short of LLVM's unrolled vector loop and runs scalar.
                c = 0
                while c + 16 <= channels:
                    for q in range(16):
                        rows[r, col + c + q] = x[image, y, xx, c + q]
                    c += 16
                for q in range(c, channels):
                    rows[r, col + q] = x[image, y, xx, q]
            else:
                for c in range(channels):
                    rows[r, col + c] = pad
            col += channels
