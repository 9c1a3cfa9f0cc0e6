"""The ``__device__`` helpers generated CUDA kernels call, by name, with the helpers each one calls.

Each is emitted into a kernel's source only when used (`fxkit.codegen.cuda_expr.Helpers`),
so a kernel reads as the code it runs. Arithmetic helpers come in three
flavours named by suffix: ``_f`` (float, which float16 computes in), ``_d``
(double) and ``_i`` (integers and bool, computed in ``long long``; the caller
converts the result to the node's type). Their semantics are numpy's, which
eager mode runs: ``maximum``/``minimum`` propagate NaN from either side; float
``floor_divide`` and ``remainder`` are numpy's ``npy_divmod`` (a zero divisor
gives ``a / b`` and ``fmod(a, b)``); integer ones give 0 for a zero divisor and
never trap on ``MIN / -1``; integer ``pow`` wraps like numpy's and gives
PyTorch's values for negative exponents (eager refuses those before running).

Helpers touching hardware (half conversions, warp shuffles) have an
``#ifndef __CUDA_ARCH__`` branch in portable C++ (``_Float16``, one thread a
block), so a kernel's source also compiles on a CPU: NVRTC always defines
``__CUDA_ARCH__``, the tests' host build never does.
"""

_ATTRS = "__device__ __forceinline__"
_FLOAT_TYPES = {"f": ("float", "f"), "d": ("double", "")}  # flavour -> (C type, math function suffix)


def _float_helpers(kind):
    t, m = _FLOAT_TYPES[kind]
    zero, one, half = (f"0.0{'f' if kind == 'f' else ''}", f"1.0{'f' if kind == 'f' else ''}",
                       f"0.5{'f' if kind == 'f' else ''}")
    bits = ("unsigned int", "0x7f800000u", "0x7fc00000u") if kind == "f" else (
        "unsigned long long", "0x7ff0000000000000ull", "0x7ff8000000000000ull")
    return {
        f"fx_inf_{kind}": ((), f"""{_ATTRS} {t} fx_inf_{kind}() {{
    union {{ {bits[0]} u; {t} v; }} x = {{{bits[1]}}};
    return x.v;
}}"""),
        f"fx_nan_{kind}": ((), f"""{_ATTRS} {t} fx_nan_{kind}() {{
    union {{ {bits[0]} u; {t} v; }} x = {{{bits[2]}}};
    return x.v;
}}"""),
        f"fx_maximum_{kind}": ((), f"""{_ATTRS} {t} fx_maximum_{kind}({t} a, {t} b) {{
    return (a < b || b != b) ? b : a;  // NaN from either side
}}"""),
        f"fx_minimum_{kind}": ((), f"""{_ATTRS} {t} fx_minimum_{kind}({t} a, {t} b) {{
    return (a > b || b != b) ? b : a;  // NaN from either side
}}"""),
        f"fx_floor_divide_{kind}": ((), f"""{_ATTRS} {t} fx_floor_divide_{kind}({t} a, {t} b) {{
    // numpy's npy_floor_divide: floor(a / b) computed exactly through fmod
    if (b == {zero}) return a / b;
    const {t} mod = fmod{m}(a, b);
    {t} div = (a - mod) / b;
    if (mod != {zero} && ((b < {zero}) != (mod < {zero}))) div -= {one};
    if (div == {zero}) return copysign{m}({zero}, a / b);
    const {t} floordiv = floor{m}(div);
    return div - floordiv > {half} ? floordiv + {one} : floordiv;
}}"""),
        f"fx_remainder_{kind}": ((), f"""{_ATTRS} {t} fx_remainder_{kind}({t} a, {t} b) {{
    // numpy's npy_remainder: the sign of b
    {t} mod = fmod{m}(a, b);
    if (b == {zero}) return mod;
    if (mod == {zero}) return copysign{m}({zero}, b);
    return (b < {zero}) != (mod < {zero}) ? mod + b : mod;
}}"""),
        f"fx_pow_{kind}": ((), f"""{_ATTRS} {t} fx_pow_{kind}({t} a, {t} b) {{
    return pow{m}(a, b);
}}"""),
    }


_INTEGER = {
    "fx_maximum_i": ((), f"""{_ATTRS} long long fx_maximum_i(long long a, long long b) {{
    return a < b ? b : a;
}}"""),
    "fx_minimum_i": ((), f"""{_ATTRS} long long fx_minimum_i(long long a, long long b) {{
    return a > b ? b : a;
}}"""),
    "fx_abs_i": ((), f"""{_ATTRS} long long fx_abs_i(long long a) {{
    return a < 0 ? -a : a;
}}"""),
    "fx_floor_divide_i": ((), f"""{_ATTRS} long long fx_floor_divide_i(long long a, long long b) {{
    // rounds toward -inf; numpy gives 0 for a zero divisor, and MIN / -1 wraps
    if (b == 0) return 0;
    if (b == -1) return (long long)(0ull - (unsigned long long)a);
    const long long q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}}"""),
    "fx_remainder_i": ((), f"""{_ATTRS} long long fx_remainder_i(long long a, long long b) {{
    // the sign of b; numpy gives 0 for a zero divisor
    if (b == 0 || b == -1) return 0;
    const long long r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}}"""),
    "fx_pow_i": ((), f"""{_ATTRS} long long fx_pow_i(long long a, long long b) {{
    // by squaring, wrapping like numpy; negative exponents as PyTorch (eager refuses them)
    if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
    unsigned long long result = 1, base = (unsigned long long)a;
    for (; b; b >>= 1) {{
        if (b & 1) result *= base;
        base *= base;
    }}
    return (long long)result;
}}"""),
}

_HALF = {
    "fx_half_to_float": ((), f"""{_ATTRS} float fx_half_to_float(unsigned short h) {{
#ifdef __CUDA_ARCH__
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else
    union {{ unsigned short u; _Float16 v; }} x = {{h}};
    return (float)x.v;
#endif
}}"""),
    "fx_float_to_half": ((), f"""{_ATTRS} unsigned short fx_float_to_half(float f) {{
#ifdef __CUDA_ARCH__
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    union {{ _Float16 v; unsigned short u; }} x = {{(_Float16)f}};
    return x.u;
#endif
}}"""),
    "fx_round_half": (("fx_half_to_float", "fx_float_to_half"), f"""{_ATTRS} float fx_round_half(float f) {{
    return fx_half_to_float(fx_float_to_half(f));  // f rounded to the nearest float16
}}"""),
}


def _block_reductions(kind):
    t, m = _FLOAT_TYPES[kind]
    forms = {"sum": ("v + other", f"0.0{'f' if kind == 'f' else ''}", ()),
             "max": (f"fmax{m}(v, other)", f"-fx_inf_{kind}()", (f"fx_inf_{kind}",))}
    made = {}
    for name, (combine, identity, deps) in forms.items():
        made[f"fx_block_{name}_{kind}"] = (deps, f"""{_ATTRS} {t} fx_block_{name}_{kind}({t} v, {t}* partial) {{
    // the {name} of v over the block (blockDim.x a multiple of 32); partial: 32 shared values
#ifdef __CUDA_ARCH__
    for (int offset = 16; offset > 0; offset >>= 1) {{
        const {t} other = __shfl_down_sync(0xffffffffu, v, offset);
        v = {combine};
    }}
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();  // partial may still be read from the previous reduction
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {{
        v = lane < (int)(blockDim.x >> 5) ? partial[lane] : {identity};
        for (int offset = 16; offset > 0; offset >>= 1) {{
            const {t} other = __shfl_down_sync(0xffffffffu, v, offset);
            v = {combine};
        }}
        if (lane == 0) partial[0] = v;
    }}
    __syncthreads();
    return partial[0];
#else
    return v;  // a CPU build runs one thread a block
#endif
}}""")
    return made


HELPERS = {**_float_helpers("f"), **_float_helpers("d"), **_INTEGER, **_HALF,
           **_block_reductions("f"), **_block_reductions("d")}
"""Helper name -> (names of the helpers it calls, its C++ definition)."""
