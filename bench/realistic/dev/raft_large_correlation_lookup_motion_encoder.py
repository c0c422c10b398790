"""RAFT-Large optical flow (torchvision raft_large): the all-pairs correlation volume, its pyramid
lookup and the motion encoder, as torchvision writes them in torchvision/models/optical_flow/raft.py
(CorrBlock.build_pyramid / CorrBlock.index_pyramid, MotionEncoder) and _utils.py (grid_sample with
absolute pixel coordinates, make_coords_grid). The correlation volume is the dot product of every
1/8-resolution feature vector of image 1 with every one of image 2 (256 channels, scaled by
1/sqrt(256)), reshaped to (B*h*w, 1, h, w) and average-pooled into a 4-level pyramid; the lookup
bilinearly samples (F.grid_sample, align_corners=True) a 9x9 window (radius 4) around the current
correspondence coords1 = coords0 + flow on every level (coordinates halved per level), giving
4*81 = 324 correlation features per pixel; the motion encoder then runs 1x1 and 3x3 convs on the
correlation features and 7x7 / 3x3 convs on the flow (all conv + ReLU, no norm), concatenates them
and appends the raw flow (128 channels); convs get He init. RAFT.forward builds the pyramid once and runs this lookup and
encoding at the start of each of its 12 refinement iterations; this task is the pyramid build plus
one iteration's lookup and motion encoding.
Use case: MPI-Sintel-sized frame pairs (440x1024 after padding, feature maps 55x128), batch 4."""

import torch
import torch.nn as nn
import torch.nn.functional as F

FEATURE_DIM = 256
NUM_LEVELS = 4
RADIUS = 4
CORR_LAYERS = (256, 192)
FLOW_LAYERS = (128, 64)
MOTION_OUT_CHANNELS = 128
BATCH = 4
IMAGE_H, IMAGE_W = 440, 1024
H, W = IMAGE_H // 8, IMAGE_W // 8  # 55 x 128


def grid_sample(img, absolute_grid, mode="bilinear", align_corners=None):
    """Same as torch's grid_sample, with absolute pixel coordinates instead of normalized coordinates."""
    h, w = img.shape[-2:]

    xgrid, ygrid = absolute_grid.split([1, 1], dim=-1)
    xgrid = 2 * xgrid / (w - 1) - 1
    # Adding condition if h > 1 to enhance ONNX export
    if h > 1:
        ygrid = 2 * ygrid / (h - 1) - 1
    normalized_grid = torch.cat([xgrid, ygrid], dim=-1)

    return F.grid_sample(img, normalized_grid, mode=mode, align_corners=align_corners)


def make_coords_grid(batch_size, h, w, device="cpu"):
    device = torch.device(device)
    coords = torch.meshgrid(torch.arange(h, device=device), torch.arange(w, device=device), indexing="ij")
    coords = torch.stack(coords[::-1], dim=0).float()
    return coords[None].repeat(batch_size, 1, 1, 1)


class Conv2dNormActivation(nn.Sequential):
    """torchvision.ops.Conv2dNormActivation with norm_layer=None (conv with bias + ReLU)."""

    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, norm_layer=None):
        padding = (kernel_size - 1) // 2
        layers = [
            nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, bias=norm_layer is None),
            nn.ReLU(inplace=True),
        ]
        super().__init__(*layers)
        self.out_channels = out_channels


class CorrBlock(nn.Module):
    def __init__(self, *, num_levels=4, radius=4):
        super().__init__()
        self.num_levels = num_levels
        self.radius = radius

        self.corr_pyramid = [torch.tensor(0)]  # useless, but torchscript is otherwise confused :')

        # The neighborhood of a centroid pixel x' is {x' + delta, ||delta||_inf <= radius}
        # so it's a square surrounding x', and its sides have a length of 2 * radius + 1
        # The paper claims that it's ||.||_1 instead of ||.||_inf but it's a typo:
        # https://github.com/princeton-vl/RAFT/issues/122
        self.out_channels = num_levels * (2 * radius + 1) ** 2

    def build_pyramid(self, fmap1, fmap2):
        """Build the correlation pyramid from two feature maps.

        The correlation volume is first computed as the dot product of each pair (pixel_in_fmap1, pixel_in_fmap2)
        The last 2 dimensions of the correlation volume are then pooled num_levels times at different resolutions
        to build the correlation pyramid.
        """

        if fmap1.shape != fmap2.shape:
            raise ValueError(
                f"Input feature maps should have the same shape, instead got {fmap1.shape} (fmap1.shape) != {fmap2.shape} (fmap2.shape)"
            )

        corr_volume = self._compute_corr_volume(fmap1, fmap2)

        batch_size, h, w, num_channels, _, _ = corr_volume.shape  # _, _ = h, w
        corr_volume = corr_volume.reshape(batch_size * h * w, num_channels, h, w)
        self.corr_pyramid = [corr_volume]
        for _ in range(self.num_levels - 1):
            corr_volume = F.avg_pool2d(corr_volume, kernel_size=2, stride=2)
            self.corr_pyramid.append(corr_volume)

    def index_pyramid(self, centroids_coords):
        """Return correlation features by indexing from the pyramid."""
        neighborhood_side_len = 2 * self.radius + 1  # see note in __init__ about out_channels
        di = torch.linspace(-self.radius, self.radius, neighborhood_side_len)
        dj = torch.linspace(-self.radius, self.radius, neighborhood_side_len)
        delta = torch.stack(torch.meshgrid(di, dj, indexing="ij"), dim=-1).to(centroids_coords.device)
        delta = delta.view(1, neighborhood_side_len, neighborhood_side_len, 2)

        batch_size, _, h, w = centroids_coords.shape  # _ = 2
        centroids_coords = centroids_coords.permute(0, 2, 3, 1).reshape(batch_size * h * w, 1, 1, 2)

        indexed_pyramid = []
        for corr_volume in self.corr_pyramid:
            sampling_coords = (
                centroids_coords + delta
            )  # end shape is (batch_size * h * w, side_len, side_len, 2)
            indexed_corr_volume = grid_sample(
                corr_volume, sampling_coords, align_corners=True, mode="bilinear"
            ).view(batch_size, h, w, -1)
            indexed_pyramid.append(indexed_corr_volume)
            centroids_coords = centroids_coords / 2

        corr_features = torch.cat(indexed_pyramid, dim=-1).permute(0, 3, 1, 2).contiguous()

        expected_output_shape = (batch_size, self.out_channels, h, w)
        if corr_features.shape != expected_output_shape:
            raise ValueError(
                f"Output shape of index pyramid is incorrect. Should be {expected_output_shape}, got {corr_features.shape}"
            )

        return corr_features

    def _compute_corr_volume(self, fmap1, fmap2):
        batch_size, num_channels, h, w = fmap1.shape
        fmap1 = fmap1.view(batch_size, num_channels, h * w)
        fmap2 = fmap2.view(batch_size, num_channels, h * w)

        corr = torch.matmul(fmap1.transpose(1, 2), fmap2)
        corr = corr.view(batch_size, h, w, 1, h, w)
        return corr / torch.sqrt(torch.tensor(num_channels))


class MotionEncoder(nn.Module):
    """The motion encoder, part of the update block.

    Takes the current predicted flow and the correlation features as input and returns an encoded version of these.
    """

    def __init__(self, *, in_channels_corr, corr_layers=(256, 192), flow_layers=(128, 64), out_channels=128):
        super().__init__()

        if len(flow_layers) != 2:
            raise ValueError(f"The expected number of flow_layers is 2, instead got {len(flow_layers)}")
        if len(corr_layers) not in (1, 2):
            raise ValueError(f"The number of corr_layers should be 1 or 2, instead got {len(corr_layers)}")

        self.convcorr1 = Conv2dNormActivation(
            in_channels_corr, corr_layers[0], norm_layer=None, kernel_size=1
        )
        if len(corr_layers) == 2:
            self.convcorr2 = Conv2dNormActivation(
                corr_layers[0], corr_layers[1], norm_layer=None, kernel_size=3
            )
        else:
            self.convcorr2 = nn.Identity()

        self.convflow1 = Conv2dNormActivation(2, flow_layers[0], norm_layer=None, kernel_size=7)
        self.convflow2 = Conv2dNormActivation(flow_layers[0], flow_layers[1], norm_layer=None, kernel_size=3)

        # out_channels - 2 because we cat the flow (2 channels) at the end
        self.conv = Conv2dNormActivation(
            corr_layers[-1] + flow_layers[-1], out_channels - 2, norm_layer=None, kernel_size=3
        )

        self.out_channels = out_channels

    def forward(self, flow, corr_features):
        corr = self.convcorr1(corr_features)
        corr = self.convcorr2(corr)

        flow_orig = flow
        flow = self.convflow1(flow)
        flow = self.convflow2(flow)

        corr_flow = torch.cat([corr, flow], dim=1)
        corr_flow = self.conv(corr_flow)
        return torch.cat([corr_flow, flow_orig], dim=1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.corr_block = CorrBlock(num_levels=NUM_LEVELS, radius=RADIUS)
        self.motion_encoder = MotionEncoder(
            in_channels_corr=self.corr_block.out_channels,
            corr_layers=CORR_LAYERS,
            flow_layers=FLOW_LAYERS,
            out_channels=MOTION_OUT_CHANNELS,
        )
        for m in self.modules():  # He init so the encoded motion features keep trained-like magnitudes
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
                nn.init.uniform_(m.bias, -0.05, 0.05)
        self.eval()

    def forward(self, fmap1, fmap2, flow):
        # RAFT.forward: correlation pyramid from the two feature-encoder outputs
        self.corr_block.build_pyramid(fmap1, fmap2)
        batch_size, _, h, w = fmap1.shape
        coords0 = make_coords_grid(batch_size, h, w).to(fmap1.device)
        coords1 = coords0 + flow  # current flow estimate of this refinement iteration
        # first part of one refinement iteration
        corr_features = self.corr_block.index_pyramid(centroids_coords=coords1)
        flow = coords1 - coords0
        motion_features = self.motion_encoder(flow, corr_features)
        return motion_features


def get_inputs():
    fmap1 = torch.randn(BATCH, FEATURE_DIM, H, W)
    fmap2 = torch.randn(BATCH, FEATURE_DIM, H, W)
    flow = 3.0 * torch.randn(BATCH, 2, H, W)  # flow at 1/8 resolution, in 1/8-resolution pixels
    return [fmap1, fmap2, flow]


def get_init_inputs():
    return []
