"""The vision generality set: torchvision and timm models outside the corpus list (issue 14).

The corpus (`vision`) is what fxkit was built against; this set checks that
the import is built for the libraries' idioms rather than for that list:
grouped and wide bottlenecks, hard-swish and squeeze-excite mobile nets,
fused-MBConv, channel shuffle, dense concatenation, window and grid attention
(swin v2, maxvit), 3-D video convolutions, segmentation heads that
interpolate back to the input size and return dicts, and timm's hybrids
(levit's attention biases, mobilevit's unfold into patches, poolformer's
pooling mixer, ghost modules, hrnet's multi-resolution fusion, xcit's
cross-covariance attention, fastvit's reparameterisable blocks, nf-resnet's weight
standardisation by batch statistics, eva's rotary embeddings, halonet's sliding
windows (``Tensor.unfold``), lambda_resnet26t's lambda layers (a Conv3d over positions), ...).

Entries are ``name -> (input shape without the batch, builder keyword arguments)``;
sizes are the smallest each architecture accepts with every stage non-trivial.
Names are the corpus's ``"library/arch"``; `tests.corpus.build` builds them.
"""
# torchvision.models.<arch>(weights=None, **kwargs); segmentation models live in models.segmentation,
# video models in models.video (see `vision.build_torchvision`).
TORCHVISION = {
    "resnext50_32x4d": ((3, 64, 64), {}),
    "wide_resnet50_2": ((3, 64, 64), {}),
    "mobilenet_v3_large": ((3, 64, 64), {}),
    "efficientnet_v2_s": ((3, 64, 64), {}),
    "regnet_x_400mf": ((3, 64, 64), {}),
    "mnasnet1_0": ((3, 64, 64), {}),
    "shufflenet_v2_x0_5": ((3, 64, 64), {}),
    "alexnet": ((3, 64, 64), {}),
    "squeezenet1_1": ((3, 64, 64), {}),
    "densenet169": ((3, 64, 64), {}),
    "convnext_small": ((3, 64, 64), {}),
    "vit_b_32": ((3, 64, 64), {"image_size": 64}),
    "swin_v2_t": ((3, 64, 64), {}),
    "maxvit_t": ((3, 224, 224), {}),
    "segmentation.fcn_resnet50": ((3, 64, 64), {"weights_backbone": None, "num_classes": 5}),
    "segmentation.deeplabv3_mobilenet_v3_large": ((3, 64, 64), {"weights_backbone": None, "num_classes": 5}),
    "segmentation.lraspp_mobilenet_v3_large": ((3, 64, 64), {"weights_backbone": None, "num_classes": 5}),
    "video.r3d_18": ((3, 4, 32, 32), {}),
    "video.mc3_18": ((3, 4, 32, 32), {}),
    "video.r2plus1d_18": ((3, 4, 32, 32), {}),
}

# timm.create_model(arch, pretrained=False, **kwargs)
TIMM = {
    "deit_tiny_patch16_224": ((3, 64, 64), {"img_size": 64}),
    "levit_128s": ((3, 64, 64), {"img_size": 64}),
    "mobilevit_xxs": ((3, 64, 64), {}),
    "poolformer_s12": ((3, 64, 64), {}),
    "resnetv2_50": ((3, 64, 64), {}),
    "ghostnet_100": ((3, 64, 64), {}),
    "efficientformer_l1": ((3, 224, 224), {}),  # its last stage's attention biases are fixed to 7x7
    "regnetx_002": ((3, 64, 64), {}),
    "mixer_s16_224": ((3, 64, 64), {"img_size": 64}),
    "coat_lite_tiny": ((3, 64, 64), {"img_size": 64}),
    "cait_xxs24_224": ((3, 64, 64), {"img_size": 64}),
    "rexnet_100": ((3, 64, 64), {}),
    "dla34": ((3, 64, 64), {}),
    "hrnet_w18_small": ((3, 64, 64), {}),
    "xcit_nano_12_p16_224": ((3, 64, 64), {"img_size": 64}),
    "edgenext_xx_small": ((3, 64, 64), {}),
    "fastvit_t8": ((3, 64, 64), {}),
    "tiny_vit_5m_224": ((3, 224, 224), {}),
    "mobilenetv4_conv_small": ((3, 64, 64), {}),
    "nf_resnet26": ((3, 64, 64), {}),
    "eva02_tiny_patch14_224": ((3, 224, 224), {}),
    "halonet26t": ((3, 256, 256), {}),  # its halo blocks need 256 pixels
    "lambda_resnet26t": ((3, 64, 64), {}),  # lambda layers: a Conv3d over (query dim, H, W) positions
}

NAMES = tuple(f"torchvision/{a}" for a in TORCHVISION) + tuple(f"timm/{a}" for a in TIMM)

FAST = ("torchvision/shufflenet_v2_x0_5", "timm/poolformer_s12")
"""The unmarked representatives: channel shuffle (view/transpose/chunk) and timm's pooling mixer."""

KNOWN_FAILURES = {}
"""Models of the set that fxkit cannot import yet, and why: the tests expect the failure (strictly,
so a fix shows up as an unexpected pass)."""

FLOAT64_REFERENCE = {
    "torchvision/segmentation.fcn_resnet50": "its random-weight dilated ResNet-50 is ill-conditioned in float32: "
                                             "PyTorch's own float32 output is 5e-5 to 7e-5 (relative) from its "
                                             "float64 one, so fxkit is held to PyTorch in float64",
}
"""Models whose outputs are compared with PyTorch run in float64 instead of float32, and why."""
