"""How each ATen overload comes in: one entry per overload, one line each.

``ATEN[overload] = rule``, where the overload is spelled as torch prints it
(``"aten.add.Tensor"``) and the rule is either a registry op name (the ATen
arguments are passed through unchanged, because fxkit ops follow PyTorch's
signatures) or a function ``(c, *args, **kwargs) -> value`` that rearranges
the arguments and records registry ops with ``c("name", ...)``. ``PYTHON``
does the same for the Python functions torch.export records on symbolic
sizes (``operator.mul`` of two ``sym_size`` results) and for runtime checks
that fxkit drops (``DROPPED``), because torch.export already proved them for
every size the dynamic dims allow.

An entry naming a registry op that is not registered counts as missing:
torch decomposes that overload into ops that are here (`capture`). Function
rules record only ops the registry has. In-place overloads (``relu_``) use
their out-of-place twin's entry. Arguments reach the rules converted: nodes
are fxkit nodes, dtypes fxkit dtypes, devices strings; ``c.rank(x)``,
``c.shape(x)`` and ``c.dtype(x)`` read what torch recorded for a node.
"""
_ALL = slice(None)


def _at(dim, item):
    """The index tuple selecting ``item`` along ``dim`` (negative dims count from the end)."""
    return (_ALL,) * dim + (item,) if dim >= 0 else (Ellipsis, item) + (_ALL,) * (-dim - 1)


def _slice(c, x, dim=0, start=None, end=None, step=1):
    """``x[..., start:end:step]``; a symbolic ``end`` (``mask[:length]``) is a ``narrow``, whose
    shape rule gives ``end - start`` where a slice's would need to know that ``end`` is in range."""
    if step == 1 and not isinstance(end, int) and end is not None:
        start = start or 0
        return c("narrow", x, dim, start, end if start == 0 else c("sub", end, start))
    return c("getitem", x, _at(dim, slice(start, end, step if step != 1 else None)))


def _slice_scatter(c, x, src, dim=0, start=None, end=None, step=1):
    """``x`` with ``x[dim][start:end]`` replaced by ``src``, as a concatenation (no in-place write)."""
    if step != 1:
        raise NotImplementedError("slice_scatter with a step")
    parts = [_slice(c, x, dim, None, start)] if start not in (None, 0) else []
    parts.append(src)
    if end is not None and not (isinstance(end, int) and end >= 2 ** 62):
        parts.append(_slice(c, x, dim, end, None))
    return c("cat", parts, dim)


def _select_scatter(c, x, src, dim, index):
    end = index + 1 if index != -1 else None
    return _slice_scatter(c, x, c("unsqueeze", src, dim), dim, index, end)


def _diff(c, x, n=1, dim=-1, prepend=None, append=None):
    """``torch.diff``: ``n`` times the difference of neighbours along ``dim`` (``!=`` for bools)."""
    is_bool = c.dtype(x) is not None and c.dtype(x).name == "bool"
    if prepend is not None or append is not None:
        x = c("cat", [t for t in (prepend, x, append) if t is not None], dim)
    for _ in range(n):
        x = c("logical_xor" if is_bool else "sub", _slice(c, x, dim, 1, None), _slice(c, x, dim, 0, -1))
    return x


def _hardtanh(c, x, low=-1.0, high=1.0):
    """``F.relu6`` reaches ATen as ``hardtanh(x, 0, 6)``: it comes back as ``relu6``."""
    return c("relu6", x) if (low, high) == (0, 6) else c("clamp", x, low, high)


def _convolution(c, x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    spatial = c.rank(w) - 2  # the weight's rank tells the dims, batched input or not
    if spatial not in ((2,) if transposed else (1, 2, 3)):
        kind = f"{spatial}-D {'transposed ' if transposed else ''}convolution"
        raise NotImplementedError(f"a {kind} has no fxkit registry op (fxkit has conv1d, conv2d, conv3d and "
                                  f"conv_transpose2d)")
    if transposed:
        return c("conv_transpose2d", x, w, b, stride, padding, output_padding, groups, dilation)
    return c(f"conv{spatial}d", x, w, b, stride, padding, dilation, groups)


def _index(c, x, indices):
    return c("getitem", x, tuple(_ALL if i is None else i for i in indices))


def _bn_no_training(c, x, weight, bias, mean, var, momentum, eps):
    return c("batch_norm", x, mean, var, weight, bias, False, momentum, eps), None, None


def _bn_no_stats(c, x, weight, bias, training, momentum, eps):
    """Batch statistics without running ones (``F.batch_norm(w, None, None, training=True)``: timm's
    weight-standardised convolutions); the saved mean and inverse std are for backward only."""
    return c("batch_norm", x, None, None, weight, bias, True, momentum, eps), None, None


def _factory(name):
    """A factory (``zeros``, ``full``, ...): layout, device and pinning dropped; fxkit arrays live on the cpu."""
    def rule(c, *args, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None,
             requires_grad=False):
        return c(name, *args, dtype=dtype)
    return rule


def _like(name):
    """``zeros_like`` and friends; ``new_zeros(x, size)`` is ``zeros(size)`` of ``x``'s dtype."""
    def rule(c, x, *args, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
        if name.startswith("new_"):
            return c(name[4:], *args, dtype=dtype if dtype is not None else c.dtype(x))
        return c(name, x, *args, dtype=dtype)
    return rule


def _to(c, x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None,
        copy=False):
    return x if dtype is None or dtype == c.dtype(x) else c("to", x, dtype=dtype)


def _copy(c, dst, src, non_blocking=False):
    """``dst.copy_(src)`` made functional: ``src`` in ``dst``'s dtype, broadcast to ``dst``'s shape."""
    src = _to(c, src, c.dtype(dst))
    return src if c.shape(src) == c.shape(dst) else c("add", c("zeros_like", dst), src)


def _identity(c, x, *args, **kwargs):
    return x


ATEN = {
    # -- elementwise arithmetic ---------------------------------------------------------
    "aten.add.Tensor":                  "add",
    "aten.add.Scalar":                  "add",
    "aten.sub.Tensor":                  "sub",
    "aten.sub.Scalar":                  "sub",
    "aten.rsub.Scalar":                 lambda c, x, y, alpha=1: c("sub", y, c("mul", x, alpha) if alpha != 1 else x),
    "aten.rsub.Tensor":                 lambda c, x, y, alpha=1: c("sub", y, x, alpha=alpha),
    "aten.mul.Tensor":                  "mul",
    "aten.mul.Scalar":                  "mul",
    "aten.div.Tensor":                  "div",
    "aten.div.Scalar":                  "div",
    "aten.div.Tensor_mode":             "div",
    "aten.floor_divide.default":        "floor_divide",
    "aten.remainder.Tensor":            "remainder",
    "aten.remainder.Scalar":            "remainder",
    "aten.pow.Tensor_Scalar":           "pow",
    "aten.pow.Tensor_Tensor":           "pow",
    "aten.pow.Scalar":                  "pow",
    "aten.neg.default":                 "neg",
    "aten.abs.default":                 "abs",
    "aten.sign.default":                "sign",
    "aten.reciprocal.default":          "reciprocal",
    "aten.sqrt.default":                "sqrt",
    "aten.rsqrt.default":               "rsqrt",
    "aten.exp.default":                 "exp",
    "aten.expm1.default":               "expm1",
    "aten.log.default":                 "log",
    "aten.log1p.default":               "log1p",
    "aten.sin.default":                 "sin",
    "aten.cos.default":                 "cos",
    "aten.tanh.default":                "tanh",
    "aten.erf.default":                 "erf",
    "aten.floor.default":               "floor",
    "aten.ceil.default":                "ceil",
    "aten.round.default":               "round",
    "aten.maximum.default":             "maximum",
    "aten.minimum.default":             "minimum",
    "aten.max.other":                   "maximum",
    "aten.min.other":                   "minimum",
    "aten.lerp.Scalar":                 "lerp",
    "aten.lerp.Tensor":                 "lerp",
    "aten.clamp.default":               "clamp",
    "aten.clamp.Tensor":                "clamp",
    "aten.clamp_min.default":           lambda c, x, low: c("clamp", x, min=low),
    "aten.clamp_max.default":           lambda c, x, high: c("clamp", x, max=high),
    "aten.where.self":                  "where",
    "aten.where.ScalarSelf":            "where",
    "aten.where.ScalarOther":           "where",
    "aten.where.Scalar":                "where",
    "aten.square.default":              lambda c, x: c("pow", x, 2),
    "aten.masked_fill.Scalar":          "masked_fill",
    "aten.masked_fill.Tensor":          "masked_fill",
    "aten.isnan.default":               "isnan",
    "aten.isinf.default":               "isinf",
    "aten.isfinite.default":            "isfinite",
    # -- comparisons and logic ------------------------------------------------------------
    "aten.eq.Tensor":                   "eq",
    "aten.eq.Scalar":                   "eq",
    "aten.ne.Tensor":                   "ne",
    "aten.ne.Scalar":                   "ne",
    "aten.lt.Tensor":                   "lt",
    "aten.lt.Scalar":                   "lt",
    "aten.le.Tensor":                   "le",
    "aten.le.Scalar":                   "le",
    "aten.gt.Tensor":                   "gt",
    "aten.gt.Scalar":                   "gt",
    "aten.ge.Tensor":                   "ge",
    "aten.ge.Scalar":                   "ge",
    "aten.logical_and.default":         "logical_and",
    "aten.logical_or.default":          "logical_or",
    "aten.logical_xor.default":         "logical_xor",
    "aten.logical_not.default":         "logical_not",
    "aten.bitwise_and.Tensor":          "bitwise_and",
    "aten.bitwise_or.Tensor":           "bitwise_or",
    "aten.bitwise_xor.Tensor":          "bitwise_xor",
    "aten.bitwise_not.default":         "bitwise_not",
    "aten.__and__.Tensor":              "bitwise_and",
    "aten.__or__.Tensor":               "bitwise_or",
    "aten.__xor__.Tensor":              "bitwise_xor",
    # -- activations (kept whole) ------------------------------------------------------------
    "aten.relu.default":                "relu",
    "aten.sigmoid.default":             "sigmoid",
    "aten.silu.default":                "silu",
    "aten.gelu.default":                "gelu",
    "aten.leaky_relu.default":          "leaky_relu",
    "aten.hardtanh.default":            _hardtanh,
    "aten.relu6.default":               "relu6",
    "aten.hardswish.default":           "hardswish",
    "aten.hardsigmoid.default":         "hardsigmoid",
    "aten.mish.default":                "mish",
    "aten.glu.default":                 "glu",
    "aten.softmax.int":                 "softmax",
    "aten._softmax.default":            lambda c, x, dim, half_to_float: c("softmax", x, dim),
    "aten.log_softmax.int":             "log_softmax",
    "aten._log_softmax.default":        lambda c, x, dim, half_to_float: c("log_softmax", x, dim),
    "aten.dropout.default":             lambda c, x, p, train: c("dropout", x, p, train),
    "aten.native_dropout.default":      lambda c, x, p, train: (c("dropout", x, p, bool(train)), None),
    # -- reductions ---------------------------------------------------------------------------
    "aten.sum.default":                 "sum",
    "aten.sum.dim_IntList":             "sum",
    "aten.mean.default":                "mean",
    "aten.mean.dim":                    "mean",
    "aten.prod.default":                "prod",
    "aten.prod.dim_int":                "prod",
    "aten.amax.default":                "amax",
    "aten.amin.default":                "amin",
    "aten.max.default":                 "max",
    "aten.min.default":                 "min",
    "aten.max.dim":                     "max",
    "aten.min.dim":                     "min",
    "aten.argmax.default":              "argmax",
    "aten.argmin.default":              "argmin",
    "aten.any.default":                 "any",
    "aten.any.dim":                     "any",
    "aten.all.default":                 "all",
    "aten.all.dim":                     "all",
    "aten.var.correction":              "var",
    "aten.std.correction":              "std",
    "aten.var.dim":                     "var",
    "aten.std.dim":                     "std",
    "aten.var_mean.correction":         "var_mean",
    "aten.std_mean.correction":         "std_mean",
    "aten.var_mean.dim":                "var_mean",
    "aten.std_mean.dim":                "std_mean",
    "aten.logsumexp.default":           "logsumexp",
    "aten.linalg_vector_norm.default":  lambda c, x, ord=2, dim=None, keepdim=False, dtype=None:
                                            c("norm", x, ord, dim, keepdim, dtype=dtype),
    "aten.cumsum.default":              "cumsum",
    "aten.diff.default":                _diff,
    "aten.sort.default":                "sort",
    "aten.sort.stable":                 lambda c, x, *, stable=None, dim=-1, descending=False:
                                            c("sort", x, dim, descending, stable=bool(stable)),
    "aten.argsort.default":             "argsort",
    "aten.argsort.stable":              lambda c, x, *, stable, dim=-1, descending=False:
                                            c("argsort", x, dim, descending, stable=stable),
    "aten.topk.default":                "topk",
    # -- matrix products, convolutions, pools, norms (kept whole) -------------------------
    "aten.linear.default":              "linear",
    "aten.mm.default":                  "mm",
    "aten.bmm.default":                 "bmm",
    "aten.matmul.default":              "matmul",
    "aten.addmm.default":               "addmm",
    "aten.baddbmm.default":             "baddbmm",
    "aten.einsum.default":              lambda c, equation, operands, path=None: c("einsum", equation, *operands),
    "aten.conv1d.default":              "conv1d",
    "aten.conv2d.default":              "conv2d",
    "aten.conv3d.default":              "conv3d",
    "aten.conv_transpose2d.input":      "conv_transpose2d",
    "aten.convolution.default":         _convolution,
    "aten.max_pool1d.default":          "max_pool1d",
    "aten.max_pool1d_with_indices.default": lambda c, x, kernel, stride=(), padding=0, dilation=1, ceil=False:
                                            c("max_pool1d", x, kernel, stride or None, padding, dilation, ceil, True),
    "aten.avg_pool1d.default":          "avg_pool1d",
    "aten.max_pool2d.default":          "max_pool2d",
    "aten.max_pool2d_with_indices.default": lambda c, x, kernel, stride=(), padding=0, dilation=1, ceil=False:
                                            c("max_pool2d", x, kernel, stride or None, padding, dilation, ceil, True),
    "aten.adaptive_max_pool2d.default": lambda c, x, size: c("adaptive_max_pool2d", x, size, True),
    "aten.avg_pool2d.default":          "avg_pool2d",
    "aten.adaptive_avg_pool2d.default": "adaptive_avg_pool2d",
    "aten._adaptive_avg_pool2d.default": "adaptive_avg_pool2d",
    "aten.max_pool3d.default":          "max_pool3d",
    "aten.max_pool3d_with_indices.default": lambda c, x, kernel, stride=(), padding=0, dilation=1, ceil=False:
                                            c("max_pool3d", x, kernel, stride or None, padding, dilation, ceil, True),
    "aten.avg_pool3d.default":          "avg_pool3d",
    "aten.adaptive_avg_pool3d.default": "adaptive_avg_pool3d",
    "aten._adaptive_avg_pool3d.default": "adaptive_avg_pool3d",
    "aten.batch_norm.default":          lambda c, x, w, b, mean, var, training, momentum, eps, cudnn:
                                            c("batch_norm", x, mean, var, w, b, training, momentum, eps),
    "aten._native_batch_norm_legit_no_training.default": _bn_no_training,
    "aten._native_batch_norm_legit.no_stats": _bn_no_stats,
    "aten.layer_norm.default":          lambda c, x, shape, w=None, b=None, eps=1e-5, cudnn=True:
                                            c("layer_norm", x, shape, w, b, eps),
    "aten.group_norm.default":          lambda c, x, groups, w=None, b=None, eps=1e-5, cudnn=True:
                                            c("group_norm", x, groups, w, b, eps),
    "aten.rms_norm.default":            "rms_norm",
    "aten.instance_norm.default":       lambda c, x, w, b, mean, var, use_input_stats, momentum, eps, cudnn:
                                            c("instance_norm", x, mean, var, w, b, use_input_stats, momentum, eps),
    "aten.scaled_dot_product_attention.default": "scaled_dot_product_attention",
    "aten.embedding.default":           lambda c, w, ids, padding_idx=-1, scale_grad=False, sparse=False:
                                            c("embedding", ids, w),
    "aten.upsample_nearest1d.vec":      lambda c, x, size, scales: c("interpolate", x, size, scales, "nearest"),
    "aten.upsample_nearest2d.vec":      lambda c, x, size, scales: c("interpolate", x, size, scales, "nearest"),
    "aten.upsample_nearest3d.vec":      lambda c, x, size, scales: c("interpolate", x, size, scales, "nearest"),
    "aten._upsample_nearest_exact2d.vec": lambda c, x, size, scales:
                                            c("interpolate", x, size, scales, "nearest-exact"),
    "aten.upsample_linear1d.vec":       lambda c, x, size, align, scales:
                                            c("interpolate", x, size, scales, "linear", align),
    "aten.upsample_bilinear2d.vec":     lambda c, x, size, align, scales:
                                            c("interpolate", x, size, scales, "bilinear", align),
    "aten.upsample_bicubic2d.vec":      lambda c, x, size, align, scales:
                                            c("interpolate", x, size, scales, "bicubic", align),
    "aten.upsample_trilinear3d.vec":    lambda c, x, size, align, scales:
                                            c("interpolate", x, size, scales, "trilinear", align),
    "aten.pixel_shuffle.default":       "pixel_shuffle",
    "aten.pixel_unshuffle.default":     "pixel_unshuffle",
    "aten.constant_pad_nd.default":     lambda c, x, pad, value=0: c("pad", x, pad, "constant", value),
    "aten.pad.default":                 "pad",
    # -- views and layout ---------------------------------------------------------------------
    "aten.view.default":                lambda c, x, size: c("reshape", x, *size),  # NOTE: fxkit's strides
    "aten._unsafe_view.default":        lambda c, x, size: c("reshape", x, *size),  # may differ from torch's
    "aten.reshape.default":             lambda c, x, size: c("reshape", x, *size),
    "aten.expand.default":              lambda c, x, size, implicit=False: c("expand", x, *size),
    "aten.expand_as.default":           lambda c, x, other: c("expand", x, c("size", other)),
    "aten.permute.default":             lambda c, x, dims: c("permute", x, *dims),
    "aten.transpose.int":               "transpose",
    "aten.swapaxes.default":            "swapaxes",
    "aten.t.default":                   "t",
    "aten.unsqueeze.default":           "unsqueeze",
    "aten.squeeze.default":             "squeeze",
    "aten.squeeze.dim":                 "squeeze",
    "aten.squeeze.dims":                lambda c, x, dims: c("squeeze", x, tuple(dims)),
    "aten.flatten.using_ints":          "flatten",
    "aten.unflatten.int":               "unflatten",
    "aten.slice.Tensor":                _slice,
    "aten.select.int":                  lambda c, x, dim, index: c("getitem", x, _at(dim, index)),
    "aten.narrow.default":              "narrow",
    "aten.unfold.default":              "unfold",
    "aten.index.Tensor":                _index,
    "aten.index_select.default":        "index_select",
    "aten.gather.default":              lambda c, x, dim, index, sparse_grad=False: c("gather", x, dim, index),
    "aten.scatter.src":                 "scatter",
    "aten.scatter.value":               lambda c, x, dim, index, value: c("scatter", x, dim, index, value=value),
    "aten.scatter.reduce":              lambda c, x, dim, index, src, *, reduce: c("scatter", x, dim, index, src,
                                                                                   reduce=reduce),
    "aten.scatter_add.default":         "scatter_add",
    "aten.index_add.default":           "index_add",
    "aten.index_put.default":           lambda c, x, indices, values, accumulate=False:
                                            c("index_put", x, tuple(indices), values, accumulate),
    "aten.slice_scatter.default":       _slice_scatter,
    "aten.select_scatter.default":      _select_scatter,
    "aten.split.Tensor":                "split",
    "aten.split_with_sizes.default":    "split",
    "aten.chunk.default":               "chunk",
    "aten.unbind.int":                  "unbind",
    "aten.cat.default":                 "cat",
    "aten.stack.default":               "stack",
    "aten.repeat.default":              lambda c, x, sizes: c("repeat", x, *sizes),
    "aten.tile.default":                lambda c, x, dims: c("tile", x, *dims),
    "aten.flip.default":                lambda c, x, dims: c("flip", x, dims=tuple(dims)),
    "aten.roll.default":                "roll",
    "aten.tril.default":                "tril",
    "aten.triu.default":                "triu",
    "aten.clone.default":               _identity,
    "aten.contiguous.default":          _identity,
    "aten.alias.default":               _identity,
    "aten.detach.default":              _identity,
    "aten.lift_fresh_copy.default":     _identity,
    "aten.copy.default":                _copy,
    "aten.fill.Scalar":                 lambda c, x, value: c("full_like", x, value),
    "aten.fill.Tensor":                 lambda c, x, value: c("add", c("zeros_like", x), value),
    # -- dtypes and factories -------------------------------------------------------------
    "aten._to_copy.default":            _to,
    "aten.to.dtype":                    lambda c, x, dtype, non_blocking=False, copy=False, memory_format=None:
                                            _to(c, x, dtype),
    "aten.to.dtype_layout":             lambda c, x, **kw: _to(c, x, kw.get("dtype")),
    "aten.to.device":                   lambda c, x, device, dtype, non_blocking=False, copy=False, memory_format=None:
                                            _to(c, x, dtype),
    "aten.to.other":                    lambda c, x, other, non_blocking=False, copy=False, memory_format=None:
                                            _to(c, x, c.dtype(other)),
    "aten.type_as.default":             lambda c, x, other: _to(c, x, c.dtype(other)),
    "aten.zeros.default":               _factory("zeros"),
    "aten.ones.default":                _factory("ones"),
    "aten.empty.memory_format":         _factory("zeros"),
    "aten.full.default":                _factory("full"),
    "aten.scalar_tensor.default":       lambda c, value, **kw: c("full", (), value, dtype=kw.get("dtype")),
    "aten.arange.default":              _factory("arange"),
    "aten.arange.start":                _factory("arange"),
    "aten.arange.start_step":           _factory("arange"),
    "aten.zeros_like.default":          _like("zeros_like"),
    "aten.ones_like.default":           _like("ones_like"),
    "aten.full_like.default":           _like("full_like"),
    "aten.empty_like.default":          _like("zeros_like"),
    "aten.new_zeros.default":           _like("new_zeros"),
    "aten.new_ones.default":            _like("new_ones"),
    "aten.new_empty.default":           _like("new_zeros"),
    "aten.new_full.default":            _like("new_full"),
    # -- sizes ------------------------------------------------------------------------------
    "aten.sym_size.int":                "size",
    "aten.sym_numel.default":           "numel",
}

# Python functions on symbolic sizes: the registry's arithmetic ops compute on ints too.
PYTHON = {
    "operator.add":                     "add",
    "operator.sub":                     "sub",
    "operator.mul":                     "mul",
    "operator.truediv":                 "div",
    "operator.floordiv":                "floor_divide",
    "operator.mod":                     "remainder",
    "operator.pow":                     "pow",
    "operator.neg":                     "neg",
    "torch.sym_max":                    "maximum",
    "torch.sym_min":                    "minimum",
    "torch.sym_float":                  lambda c, x: x,
    "torch.sym_int":                    lambda c, x: x,
    "torch.sym_sum":                    lambda c, items: _sum(c, items),
}


def _sum(c, items):
    total = items[0]
    for item in items[1:]:
        total = c("add", total, item)
    return total


# Checks torch.export proved for every allowed size; they compute nothing fxkit needs.
DROPPED = {
    "aten._assert_scalar.default", "aten._assert_tensor_metadata.default", "aten.sym_constrain_range.default",
    "aten.sym_constrain_range_for_size.default", "aten._assert_async.msg", "aten._assert_async.default",
    "operator.eq", "operator.ne", "operator.lt", "operator.le", "operator.gt", "operator.ge",
    "torch._sym_assert", "torch.sym_not", "aten._functional_assert_async.msg",
}
