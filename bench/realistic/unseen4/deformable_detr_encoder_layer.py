"""Deformable DETR's encoder layer (ResNet-50 backbone, 4 feature levels) as transformers writes
it (DeformableDetrEncoderLayer with the pure-PyTorch MultiScaleDeformableAttention, the path
taken without the custom CUDA kernel), with the reference points DeformableDetrEncoder builds
(get_reference_points: a linspace meshgrid per level scaled by the valid ratios). The
multi-scale deformable self-attention: position embeddings added to the queries, value_proj
256 -> 256 with padded pixels zeroed (masked_fill), sampling offsets (Linear 256 -> 8 heads x 4
levels x 4 points x 2) normalised by each level's width and height, attention weights (Linear
256 -> 128, softmax over the 16 level-points), per level a bilinear grid_sample of the values
(zeros padding, align_corners False), the weighted sum and output_proj; residual, LayerNorm; FFN
256 -> 1024 -> 256 with ReLU; residual, LayerNorm. A COCO evaluation batch of 2 images padded to
800 x 1066 (the second 608 x 800): levels 100 x 134, 50 x 67, 25 x 34, 13 x 17, i.e. 17821
tokens per image (vision; a detector's attention)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

D_MODEL, HEADS, LEVELS, POINTS, FFN = 256, 8, 4, 4, 1024
SPATIAL_SHAPES = [(100, 134), (50, 67), (25, 34), (13, 17)]
BATCH, IMAGE_H, IMAGE_W = 2, 800, 1066
SECOND_H, SECOND_W = 608, 800


class MultiScaleDeformableAttention(nn.Module):
    def forward(
        self,
        value,
        value_spatial_shapes,
        value_spatial_shapes_list,
        level_start_index,
        sampling_locations,
        attention_weights,
        im2col_step: int,
    ):
        batch_size, _, num_heads, hidden_dim = value.shape
        _, num_queries, num_heads, num_levels, num_points, _ = sampling_locations.shape
        value_list = value.split([height * width for height, width in value_spatial_shapes_list], dim=1)
        sampling_grids = 2 * sampling_locations - 1
        sampling_value_list = []
        for level_id, (height, width) in enumerate(value_spatial_shapes_list):
            value_l_ = (
                value_list[level_id]
                .flatten(2)
                .transpose(1, 2)
                .reshape(batch_size * num_heads, hidden_dim, height, width)
            )
            sampling_grid_l_ = sampling_grids[:, :, :, level_id].transpose(1, 2).flatten(0, 1)
            sampling_value_l_ = nn.functional.grid_sample(
                value_l_,
                sampling_grid_l_,
                mode="bilinear",
                padding_mode="zeros",
                align_corners=False,
            )
            sampling_value_list.append(sampling_value_l_)
        attention_weights = attention_weights.transpose(1, 2).reshape(
            batch_size * num_heads, 1, num_queries, num_levels * num_points
        )
        output = (
            (torch.stack(sampling_value_list, dim=-2).flatten(-2) * attention_weights)
            .sum(-1)
            .view(batch_size, num_heads * hidden_dim, num_queries)
        )
        return output.transpose(1, 2).contiguous()


class DeformableDetrMultiscaleDeformableAttention(nn.Module):
    def __init__(self, num_heads: int, n_points: int):
        super().__init__()
        self.attn = MultiScaleDeformableAttention()
        self.im2col_step = 64
        self.d_model = D_MODEL
        self.n_levels = LEVELS
        self.n_heads = num_heads
        self.n_points = n_points
        self.sampling_offsets = nn.Linear(D_MODEL, num_heads * self.n_levels * n_points * 2)
        self.attention_weights = nn.Linear(D_MODEL, num_heads * self.n_levels * n_points)
        self.value_proj = nn.Linear(D_MODEL, D_MODEL)
        self.output_proj = nn.Linear(D_MODEL, D_MODEL)

    def forward(
        self,
        hidden_states,
        attention_mask=None,
        encoder_hidden_states=None,
        position_embeddings=None,
        reference_points=None,
        spatial_shapes=None,
        spatial_shapes_list=None,
        level_start_index=None,
    ):
        if position_embeddings is not None:
            hidden_states = hidden_states + position_embeddings

        batch_size, num_queries, _ = hidden_states.shape
        batch_size, sequence_length, _ = encoder_hidden_states.shape

        value = self.value_proj(encoder_hidden_states)
        if attention_mask is not None:
            # we invert the attention_mask
            value = value.masked_fill(~attention_mask[..., None], float(0))
        value = value.view(batch_size, sequence_length, self.n_heads, self.d_model // self.n_heads)
        sampling_offsets = self.sampling_offsets(hidden_states).view(
            batch_size, num_queries, self.n_heads, self.n_levels, self.n_points, 2
        )
        attention_weights = self.attention_weights(hidden_states).view(
            batch_size, num_queries, self.n_heads, self.n_levels * self.n_points
        )
        attention_weights = F.softmax(attention_weights, -1).view(
            batch_size, num_queries, self.n_heads, self.n_levels, self.n_points
        )
        num_coordinates = reference_points.shape[-1]
        if num_coordinates == 2:
            offset_normalizer = torch.stack([spatial_shapes[..., 1], spatial_shapes[..., 0]], -1)
            sampling_locations = (
                reference_points[:, :, None, :, None, :]
                + sampling_offsets / offset_normalizer[None, None, None, :, None, :]
            )
        else:
            sampling_locations = (
                reference_points[:, :, None, :, None, :2]
                + sampling_offsets / self.n_points * reference_points[:, :, None, :, None, 2:] * 0.5
            )

        output = self.attn(
            value,
            spatial_shapes,
            spatial_shapes_list,
            level_start_index,
            sampling_locations,
            attention_weights,
            self.im2col_step,
        )
        output = self.output_proj(output)
        return output, attention_weights


class DeformableDetrMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.fc1 = nn.Linear(hidden_size, intermediate_size)
        self.fc2 = nn.Linear(intermediate_size, hidden_size)
        self.activation_fn = nn.ReLU()

    def forward(self, hidden_states):
        hidden_states = self.activation_fn(self.fc1(hidden_states))
        hidden_states = self.fc2(hidden_states)
        return hidden_states


class DeformableDetrEncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden_size = D_MODEL
        self.self_attn = DeformableDetrMultiscaleDeformableAttention(num_heads=HEADS, n_points=POINTS)
        self.self_attn_layer_norm = nn.LayerNorm(self.hidden_size)
        self.mlp = DeformableDetrMLP(self.hidden_size, FFN)
        self.final_layer_norm = nn.LayerNorm(self.hidden_size)

    def forward(
        self,
        hidden_states,
        attention_mask,
        spatial_position_embeddings=None,
        reference_points=None,
        spatial_shapes=None,
        spatial_shapes_list=None,
        level_start_index=None,
    ):
        residual = hidden_states
        hidden_states, _ = self.self_attn(
            hidden_states=hidden_states,
            attention_mask=attention_mask,
            encoder_hidden_states=hidden_states,
            position_embeddings=spatial_position_embeddings,
            reference_points=reference_points,
            spatial_shapes=spatial_shapes,
            spatial_shapes_list=spatial_shapes_list,
            level_start_index=level_start_index,
        )
        hidden_states = residual + hidden_states
        hidden_states = self.self_attn_layer_norm(hidden_states)

        residual = hidden_states
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        hidden_states = self.final_layer_norm(hidden_states)
        return hidden_states


def get_reference_points(spatial_shapes_list, valid_ratios, device):
    reference_points_list = []
    for level, (height, width) in enumerate(spatial_shapes_list):
        ref_y, ref_x = torch.meshgrid(
            torch.linspace(0.5, height - 0.5, height, dtype=valid_ratios.dtype, device=device),
            torch.linspace(0.5, width - 0.5, width, dtype=valid_ratios.dtype, device=device),
            indexing="ij",
        )
        ref_y = ref_y.reshape(-1)[None] / (valid_ratios[:, None, level, 1] * height)
        ref_x = ref_x.reshape(-1)[None] / (valid_ratios[:, None, level, 0] * width)
        ref = torch.stack((ref_x, ref_y), -1)
        reference_points_list.append(ref)
    reference_points = torch.cat(reference_points_list, 1)
    reference_points = reference_points[:, :, None] * valid_ratios[:, None]
    return reference_points


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = DeformableDetrEncoderLayer()
        spatial_shapes = torch.tensor(SPATIAL_SHAPES, dtype=torch.long)
        self.register_buffer("spatial_shapes", spatial_shapes, persistent=False)
        level_start_index = torch.cat((spatial_shapes.new_zeros((1,)), spatial_shapes.prod(1).cumsum(0)[:-1]))
        self.register_buffer("level_start_index", level_start_index, persistent=False)

    def forward(self, inputs_embeds, attention_mask, spatial_position_embeddings, valid_ratios):
        # DeformableDetrEncoder.forward for its first layer
        spatial_shapes_tuple = tuple(SPATIAL_SHAPES)
        reference_points = get_reference_points(
            spatial_shapes_tuple, valid_ratios, device=inputs_embeds.device
        )
        return self.layer(
            inputs_embeds,
            attention_mask,
            spatial_position_embeddings=spatial_position_embeddings,
            reference_points=reference_points,
            spatial_shapes=self.spatial_shapes,
            spatial_shapes_list=SPATIAL_SHAPES,
            level_start_index=self.level_start_index,
        )


def get_inputs():
    # DeformableDetrModel: the pixel mask resized to each level (nearest), flattened; valid ratios
    pixel_mask = torch.zeros(BATCH, IMAGE_H, IMAGE_W)
    pixel_mask[0] = 1
    pixel_mask[1, :SECOND_H, :SECOND_W] = 1
    masks, ratios = [], []
    for height, width in SPATIAL_SHAPES:
        mask = F.interpolate(pixel_mask[None], size=(height, width)).to(torch.bool)[0]
        valid_height = torch.sum(mask[:, :, 0], 1)
        valid_width = torch.sum(mask[:, 0, :], 1)
        ratios.append(torch.stack([valid_width.float() / width, valid_height.float() / height], -1))
        masks.append(mask.flatten(1))
    tokens = sum(height * width for height, width in SPATIAL_SHAPES)
    return [
        torch.randn(BATCH, tokens, D_MODEL),
        torch.cat(masks, 1),
        torch.randn(BATCH, tokens, D_MODEL),
        torch.stack(ratios, 1),
    ]


def get_init_inputs():
    return []
