"""Cases for the ops derivative rules are built from: scatter_add, index_add, getitem_backward,
threshold_backward, conv2d_weight_grad (fxkit/runtime/autograd/backward_ops.py) and batch_norm_training_backward
(fxkit/runtime/autograd/batch_norm_training_backward.py)."""
import numpy as np

from tests.runtime.opcheck import case, randf, randi, torch_ref


def _torch(name):
    def call(*args, **kwargs):
        import torch

        return getattr(torch, name)(*args, **kwargs)

    return torch_ref(call)


def _scatter_add_ref(a, dim, index, src):
    out = a.copy()
    d = dim % a.ndim
    grid = list(np.indices(index.shape))
    grid[d] = index
    np.add.at(out, tuple(grid), src[tuple(slice(0, s) for s in index.shape)])
    return out


def _index_add_ref(a, dim, index, source, alpha=1):
    out = np.moveaxis(a.copy(), dim, 0)
    np.add.at(out, index, np.moveaxis(source, dim, 0) * alpha)
    return np.moveaxis(out, 0, dim)


# -- scatter_add: repeated indices add up ----------------------------------------------------
case("scatter_add", lambda r: ((randf(r, 3, 5), 1, randi(r, 3, 4, low=0, high=5), randf(r, 3, 4)), {}),
     _scatter_add_ref, id="dim1_repeats")
case("scatter_add", lambda r: ((randf(r, 4, 3), 0, randi(r, 2, 3, low=0, high=4), randf(r, 5, 3)), {}),
     _scatter_add_ref, id="dim0_src_larger")
case("scatter_add", lambda r: ((randf(r, 2, 3, 4), -1, randi(r, 2, 3, 6, low=0, high=4), randf(r, 2, 3, 6)), {}),
     _scatter_add_ref, id="negative_dim")
case("scatter_add", lambda r: ((randf(r, 3, 5, dtype=np.float64), 1, randi(r, 3, 2, low=0, high=5),
                                randf(r, 3, 2, dtype=np.float64)), {}), _scatter_add_ref, id="float64")
case("scatter_add", lambda r: ((randf(r, 3, 5), 1, randi(r, 3, 4, low=0, high=5), randf(r, 3, 4)), {}),
     _torch("scatter_add"), id="torch")

# -- index_add ---------------------------------------------------------------------------------
case("index_add", lambda r: ((randf(r, 5, 3), 0, np.array([4, 0, 4, 2]), randf(r, 4, 3)), {}), _index_add_ref,
     id="dim0_repeats")
case("index_add", lambda r: ((randf(r, 2, 6), 1, np.array([5, 1, 1]), randf(r, 2, 3)), {"alpha": 2.5}),
     _index_add_ref, id="dim1_alpha")
case("index_add", lambda r: ((randf(r, 2, 6), -1, np.array([5, 1, 1]), randf(r, 2, 3)), {}), _index_add_ref,
     id="negative_dim")
case("index_add", lambda r: ((randf(r, 5, 3), 0, np.array([4, 0, 4, 2]), randf(r, 4, 3)), {"alpha": -1.0}),
     _torch("index_add"), id="torch")


# -- getitem_backward: the adjoint of indexing ------------------------------------------------
def _adjoint_ref(grad, shape, index):
    positions = np.arange(int(np.prod(shape))).reshape(shape)[index]
    out = np.zeros(int(np.prod(shape)), grad.dtype)
    np.add.at(out, positions.reshape(-1), grad.reshape(-1))
    return out.reshape(shape)


case("getitem_backward", lambda r: ((randf(r, 2, 3), (4, 3), slice(1, 3)), {}), _adjoint_ref, id="slice")
case("getitem_backward", lambda r: ((randf(r, 3), (4, 3), 2), {}), _adjoint_ref, id="int")
case("getitem_backward", lambda r: ((randf(r, 3, 3), (4, 3), np.array([0, 0, 2])), {}), _adjoint_ref,
     id="repeated_rows_add_up")
case("getitem_backward", lambda r: ((randf(r, 2), (3, 4), (np.array([1, 1]), np.array([2, 2]))), {}), _adjoint_ref,
     id="repeated_elements")
case("getitem_backward", lambda r: ((randf(r, 5), (2, 4), np.array([[True, False, True, True],
                                                                    [False, True, False, True]])), {}),
     _adjoint_ref, id="bool_mask")
case("getitem_backward", lambda r: ((randf(r, 2, 3), (2, 3, 4), (Ellipsis, 1)), {}), _adjoint_ref, id="ellipsis")


def _torch_adjoint(grad, shape, index):
    import torch

    x = torch.zeros(shape, dtype=grad.dtype, requires_grad=True)
    with torch.enable_grad():
        x[index].backward(grad)
    return x.grad


# PyTorch's rule for an integer next to an advanced index (the select applies first)
case("getitem_backward", lambda r: ((randf(r, 6, 3), (5, 6, 7), (0, slice(None), np.array([1, 1, 3]))), {}),
     torch_ref(_torch_adjoint), id="int_and_advanced_torch")


# -- threshold_backward: ReLU's gradient ------------------------------------------------------
def _threshold_backward_ref(grad, x, threshold):
    return np.where(x <= threshold, 0, grad).astype(grad.dtype)


def _signed_zeros_and_nans(r, *shape, dtype=np.float32):
    x = randf(r, *shape, dtype=dtype)
    x.reshape(-1)[::7] = 0.0
    x.reshape(-1)[3::11] = -0.0
    x.reshape(-1)[5::13] = np.nan  # a NaN output passes its gradient on
    return x


case("threshold_backward", lambda r: ((randf(r, 3, 5), _signed_zeros_and_nans(r, 3, 5), 0), {}),
     _threshold_backward_ref, id="small")
case("threshold_backward", lambda r: ((randf(r, 8, 16, 8, 8), _signed_zeros_and_nans(r, 8, 16, 8, 8), 0), {}),
     _threshold_backward_ref, id="loop")
case("threshold_backward", lambda r: ((randf(r, 64, 80, dtype=np.float64),
                                       _signed_zeros_and_nans(r, 64, 80, dtype=np.float64), 0.25), {}),
     _threshold_backward_ref, id="loop_float64_threshold")
case("threshold_backward", lambda r: ((randf(r, 4, 1), randf(r, 4, 6), 0), {}), _threshold_backward_ref,
     id="broadcast")
def _threshold_backward_torch(grad, x, threshold):
    import torch

    return torch.ops.aten.threshold_backward(grad, x, threshold)


case("threshold_backward", lambda r: ((randf(r, 8, 16, 8, 8), _signed_zeros_and_nans(r, 8, 16, 8, 8), 0), {}),
     torch_ref(_threshold_backward_torch), id="loop_torch")


# -- conv2d_weight_grad --------------------------------------------------------------------------
def _weight_grad_ref(x, weight_size, g, stride=1, padding=0, dilation=1, groups=1):
    oc, cg, kh, kw = weight_size
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    out = np.zeros(weight_size)
    ocg = oc // groups
    oh, ow = g.shape[2:]
    for o in range(oc):
        grp = o // ocg
        for i in range(kh):
            for j in range(kw):
                rows = x[:, grp * cg:(grp + 1) * cg, i * dilation:i * dilation + (oh - 1) * stride + 1:stride,
                         j * dilation:j * dilation + (ow - 1) * stride + 1:stride]
                out[o, :, i, j] = np.einsum("nchw,nhw->c", rows, g[:, o])
    return out


def _weight_grad_torch(x, weight_size, g, stride=1, padding=0, dilation=1, groups=1):
    import torch

    return torch.nn.grad.conv2d_weight(x, weight_size, g, stride, padding, dilation, groups)


for _ref, _tag in ((_weight_grad_ref, ""), (torch_ref(_weight_grad_torch), "_torch")):
    case("conv2d_weight_grad", lambda r: ((randf(r, 2, 3, 7, 7), (4, 3, 3, 3), randf(r, 2, 4, 5, 5)), {}), _ref,
         id="basic" + _tag, rtol=1e-4, atol=1e-5)
    case("conv2d_weight_grad", lambda r: ((randf(r, 2, 4, 9, 8), (6, 2, 3, 3), randf(r, 2, 6, 4, 3)),
                                          {"stride": 2, "padding": 1, "dilation": 2, "groups": 2}), _ref,
         id="stride_padding_dilation_groups" + _tag, rtol=1e-4, atol=1e-5)
    case("conv2d_weight_grad", lambda r: ((randf(r, 1, 2, 20, 20), (3, 2, 1, 1), randf(r, 1, 3, 20, 20)), {}), _ref,
         id="pointwise" + _tag, rtol=1e-4, atol=1e-5)
    # rows of 16+ outputs: the image-outer columns (the cases above gather batch-last), more columns than channels
    case("conv2d_weight_grad", lambda r: ((randf(r, 2, 3, 18, 18), (4, 3, 3, 3), randf(r, 2, 4, 16, 16)), {}), _ref,
         id="wide_rows" + _tag, rtol=1e-4, atol=1e-5)
    # 16+ channels, batch x pixels >= 512: the channels-last columns (both GEMM orientations), strided and dilated
    case("conv2d_weight_grad", lambda r: ((randf(r, 8, 16, 8, 8), (24, 16, 3, 3), randf(r, 8, 24, 8, 8)),
                                          {"padding": 1}), _ref, id="channels_last" + _tag, rtol=1e-4, atol=1e-4)
    case("conv2d_weight_grad", lambda r: ((randf(r, 16, 64, 9, 9), (8, 64, 3, 3), randf(r, 16, 8, 4, 4)),
                                          {"stride": 2, "dilation": 2, "padding": 1}), _ref,
         id="channels_last_wide_stride_dilation" + _tag, rtol=1e-4, atol=1e-4)


def _weight_grad3d_torch(x, weight_size, g, stride=1, padding=0, dilation=1, groups=1):
    import torch

    return torch.nn.grad.conv3d_weight(x, weight_size, g, stride, padding, dilation, groups)


case("conv2d_weight_grad", lambda r: ((randf(r, 2, 4, 5, 7, 6), (6, 2, 3, 2, 3), randf(r, 2, 6, 5, 4, 4)),
                                      {"stride": (1, 2, 1), "padding": 1, "dilation": (1, 1, 2), "groups": 2}),
     torch_ref(_weight_grad3d_torch), id="conv3d_weight_torch", rtol=1e-4, atol=1e-5)


# -- batch_norm_training_backward ------------------------------------------------------------
def _batch_norm_training_backward_ref(g, x, weight=None, eps=1e-5):
    """Ioffe and Szegedy's chain rule through the variance and the mean, in float64."""
    dtype = x.dtype
    g, x = g.astype(np.float64), x.astype(np.float64)
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    count = x.size // x.shape[1]
    mu, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    std = np.sqrt(var + eps)
    dxhat = g * (1.0 if weight is None else weight.astype(np.float64).reshape(shape))
    dvar = (dxhat * (x - mu)).sum(axes, keepdims=True) * -0.5 / std ** 3
    dmu = (-dxhat / std).sum(axes, keepdims=True) + dvar * (-2 * (x - mu)).mean(axes, keepdims=True)
    dx = dxhat / std + dvar * 2 * (x - mu) / count + dmu / count
    return (dx.astype(dtype), (g * (x - mu) / std).sum(axes).astype(dtype), g.sum(axes).astype(dtype))


def _batch_norm_training_backward_torch(g, x, weight=None, eps=1e-5):
    import torch

    with torch.enable_grad():
        x = x.clone().requires_grad_()
        w = (torch.ones(x.shape[1], dtype=x.dtype) if weight is None else weight.clone()).requires_grad_()
        b = torch.zeros(x.shape[1], dtype=x.dtype, requires_grad=True)
        out = torch.nn.functional.batch_norm(x, None, None, w, b, training=True, eps=eps)
        return torch.autograd.grad(out, (x, w, b), g)


_BN_REFS = ((_batch_norm_training_backward_ref, ""), (torch_ref(_batch_norm_training_backward_torch), "_torch"))
for _ref, _tag in _BN_REFS:
    case("batch_norm_training_backward",
         lambda r: ((randf(r, 4, 3, 5, 6), randf(r, 4, 3, 5, 6) + 1.5, randf(r, 3)), {}),
         _ref, id="nchw" + _tag, rtol=1e-4, atol=1e-5)
    case("batch_norm_training_backward", lambda r: ((randf(r, 6, 4), randf(r, 6, 4), None), {"eps": 1e-3}), _ref,
         id="nc_no_weight" + _tag, rtol=1e-4, atol=1e-5)
    case("batch_norm_training_backward",
         lambda r: ((randf(r, 2, 3, 4, 3, 5, dtype=np.float64), randf(r, 2, 3, 4, 3, 5, dtype=np.float64),
                     randf(r, 3, dtype=np.float64)), {}), _ref, id="ncdhw_float64" + _tag)
