"""The ops with no gradient, each with the reason the error asking for one gives."""
from fxkit.runtime.autograd.function import nondifferentiable

nondifferentiable("it returns bool; compare without tracking gradients", "eq", "ne", "lt", "le", "gt", "ge",
                  "isnan", "isinf", "isfinite", "logical_and", "logical_or", "logical_xor", "logical_not")
nondifferentiable("it works on integer or bool tensors", "bitwise_and", "bitwise_or", "bitwise_xor",
                  "bitwise_not", "one_hot", "bitwise_left_shift", "bitwise_right_shift")
nondifferentiable("it returns integer indices", "argmax", "argmin", "argsort")
nondifferentiable("it returns bool", "all", "any")
nondifferentiable("it casts to an integer or bool dtype", "int", "long", "bool")
nondifferentiable("its result is piecewise constant and PyTorch defines no derivative for it; use div() "
                  "(true division) or div(rounding_mode='floor') for a zero gradient", "floor_divide")
nondifferentiable("it creates a new tensor from sizes and values, not from its inputs' values", "zeros", "ones",
                  "empty", "full", "arange", "rand", "randn", "zeros_like", "ones_like", "empty_like", "full_like",
                  "rand_like", "randn_like")
nondifferentiable("it returns Python numbers (a size query)", "size", "dim", "numel")
nondifferentiable("it is a backward op; higher-order gradients are not supported", "getitem_backward",
                  "conv2d_weight_grad", "batch_norm_training_backward", "nll_loss_backward",
                  "max_pool2d_with_indices_backward", "threshold_backward")
nondifferentiable("it is a pipeline-stage marker without tensor inputs", "pipe_split")
nondifferentiable("it works on Python numbers (arithmetic on traced sizes), not on tensors", "math_sqrt",
                  "math_floor", "math_ceil", "math_trunc", "math_exp", "math_log2", "math_log10", "math_fabs",
                  "math_log", "math_pow", "math_gcd", "math_isqrt")
