"""DeBERTa-v3-base's attention sub-layer as transformers writes it (DebertaV2Attention: the
DisentangledSelfAttention, then DebertaV2SelfOutput), with what DebertaV2Encoder prepares for
it: the relative-position table (2 x 256 buckets x 768) passed through its LayerNorm
(norm_rel_ebd "layer_norm", eps 1e-7), the log-bucketed relative positions (position_buckets
256, max_relative_positions 512) and the pairwise attention mask built from the int64 padding
mask. 12 heads of 64 with biased q/k/v projections; the relative embeddings are projected by the
same query and key projections (share_att_key), repeated per batch and head; the content->content
scores by bmm, the content->position and position->content scores by bmm then torch.gather on the
clamped relative positions, all three divided by sqrt(64 * 3); masked_fill with the dtype's
minimum, softmax, the weighted sum of values, then the output dense + residual + LayerNorm
(eps 1e-7). Batch 4 x 512 tokens (an NLP encoder, BERT-family; each sequence padded after 384
to 512 real tokens)."""

import torch
import torch.nn as nn

HIDDEN, HEADS, POSITION_BUCKETS, MAX_POSITIONS, EPS = 768, 12, 256, 512, 1e-7
BATCH, LENGTH = 4, 512


def make_log_bucket_position(relative_pos, bucket_size: int, max_position: int):
    sign = torch.sign(relative_pos)
    mid = bucket_size // 2
    abs_pos = torch.where(
        (relative_pos < mid) & (relative_pos > -mid),
        torch.tensor(mid - 1).type_as(relative_pos),
        torch.abs(relative_pos),
    )
    log_pos = (
        torch.ceil(torch.log(abs_pos / mid) / torch.log(torch.tensor((max_position - 1) / mid)) * (mid - 1))
        + mid
    )
    bucket_pos = torch.where(abs_pos <= mid, relative_pos.type_as(log_pos), log_pos * sign)
    return bucket_pos


def build_relative_position(query_layer, key_layer, bucket_size: int = -1, max_position: int = -1):
    query_size = query_layer.size(-2)
    key_size = key_layer.size(-2)
    q_ids = torch.arange(query_size, dtype=torch.long, device=query_layer.device)
    k_ids = torch.arange(key_size, dtype=torch.long, device=key_layer.device)
    rel_pos_ids = q_ids[:, None] - k_ids[None, :]
    if bucket_size > 0 and max_position > 0:
        rel_pos_ids = make_log_bucket_position(rel_pos_ids, bucket_size, max_position)
    rel_pos_ids = rel_pos_ids.to(torch.long)
    rel_pos_ids = rel_pos_ids[:query_size, :]
    rel_pos_ids = rel_pos_ids.unsqueeze(0)
    return rel_pos_ids


def scaled_size_sqrt(query_layer: torch.Tensor, scale_factor: int):
    return torch.sqrt(torch.tensor(query_layer.size(-1), dtype=torch.float) * scale_factor)


def build_rpos(query_layer, key_layer, relative_pos, position_buckets: int, max_relative_positions: int):
    if key_layer.size(-2) != query_layer.size(-2):
        return build_relative_position(
            key_layer, key_layer, bucket_size=position_buckets, max_position=max_relative_positions
        )
    else:
        return relative_pos


class DisentangledSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_attention_heads = HEADS
        self.attention_head_size = HIDDEN // HEADS
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query_proj = nn.Linear(HIDDEN, self.all_head_size, bias=True)
        self.key_proj = nn.Linear(HIDDEN, self.all_head_size, bias=True)
        self.value_proj = nn.Linear(HIDDEN, self.all_head_size, bias=True)
        self.share_att_key = True
        self.pos_att_type = ["p2c", "c2p"]
        self.relative_attention = True
        self.position_buckets = POSITION_BUCKETS
        self.max_relative_positions = MAX_POSITIONS
        self.pos_ebd_size = self.position_buckets

    def transpose_for_scores(self, x, attention_heads) -> torch.Tensor:
        new_x_shape = x.size()[:-1] + (attention_heads, -1)
        x = x.view(new_x_shape)
        return x.permute(0, 2, 1, 3).contiguous().view(-1, x.size(1), x.size(-1))

    def forward(self, hidden_states, attention_mask, relative_pos, rel_embeddings):
        query_states = hidden_states
        query_layer = self.transpose_for_scores(self.query_proj(query_states), self.num_attention_heads)
        key_layer = self.transpose_for_scores(self.key_proj(hidden_states), self.num_attention_heads)
        value_layer = self.transpose_for_scores(self.value_proj(hidden_states), self.num_attention_heads)

        rel_att = None
        scale_factor = 1
        if "c2p" in self.pos_att_type:
            scale_factor += 1
        if "p2c" in self.pos_att_type:
            scale_factor += 1
        scale = scaled_size_sqrt(query_layer, scale_factor)
        attention_scores = torch.bmm(
            query_layer, key_layer.transpose(-1, -2) / scale.to(dtype=query_layer.dtype)
        )
        if self.relative_attention:
            rel_att = self.disentangled_attention_bias(
                query_layer, key_layer, relative_pos, rel_embeddings, scale_factor
            )
        if rel_att is not None:
            attention_scores = attention_scores + rel_att
        attention_scores = attention_scores.view(
            -1, self.num_attention_heads, attention_scores.size(-2), attention_scores.size(-1)
        )

        attention_mask = attention_mask.bool()
        attention_scores = attention_scores.masked_fill(~(attention_mask), torch.finfo(query_layer.dtype).min)
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        context_layer = torch.bmm(
            attention_probs.view(-1, attention_probs.size(-2), attention_probs.size(-1)), value_layer
        )
        context_layer = (
            context_layer.view(-1, self.num_attention_heads, context_layer.size(-2), context_layer.size(-1))
            .permute(0, 2, 1, 3)
            .contiguous()
        )
        new_context_layer_shape = context_layer.size()[:-2] + (-1,)
        context_layer = context_layer.view(new_context_layer_shape)
        return context_layer

    def disentangled_attention_bias(self, query_layer, key_layer, relative_pos, rel_embeddings, scale_factor):
        if relative_pos.dim() == 2:
            relative_pos = relative_pos.unsqueeze(0).unsqueeze(0)
        elif relative_pos.dim() == 3:
            relative_pos = relative_pos.unsqueeze(1)

        att_span = self.pos_ebd_size
        relative_pos = relative_pos.to(device=query_layer.device, dtype=torch.long)

        rel_embeddings = rel_embeddings[0 : att_span * 2, :].unsqueeze(0)
        pos_query_layer = self.transpose_for_scores(
            self.query_proj(rel_embeddings), self.num_attention_heads
        ).repeat(query_layer.size(0) // self.num_attention_heads, 1, 1)
        pos_key_layer = self.transpose_for_scores(
            self.key_proj(rel_embeddings), self.num_attention_heads
        ).repeat(query_layer.size(0) // self.num_attention_heads, 1, 1)

        score = 0
        # content->position
        if "c2p" in self.pos_att_type:
            scale = scaled_size_sqrt(pos_key_layer, scale_factor)
            c2p_att = torch.bmm(query_layer, pos_key_layer.transpose(-1, -2))
            c2p_pos = torch.clamp(relative_pos + att_span, 0, att_span * 2 - 1)
            c2p_att = torch.gather(
                c2p_att,
                dim=-1,
                index=c2p_pos.squeeze(0).expand(
                    [query_layer.size(0), query_layer.size(1), relative_pos.size(-1)]
                ),
            )
            score += c2p_att / scale.to(dtype=c2p_att.dtype)

        # position->content
        if "p2c" in self.pos_att_type:
            scale = scaled_size_sqrt(pos_query_layer, scale_factor)
            r_pos = build_rpos(
                query_layer, key_layer, relative_pos, self.max_relative_positions, self.position_buckets
            )
            p2c_pos = torch.clamp(-r_pos + att_span, 0, att_span * 2 - 1)
            p2c_att = torch.bmm(key_layer, pos_query_layer.transpose(-1, -2))
            p2c_att = torch.gather(
                p2c_att,
                dim=-1,
                index=p2c_pos.squeeze(0).expand(
                    [query_layer.size(0), key_layer.size(-2), key_layer.size(-2)]
                ),
            ).transpose(-1, -2)
            score += p2c_att / scale.to(dtype=p2c_att.dtype)

        return score


class DebertaV2SelfOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(HIDDEN, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, EPS)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dense(hidden_states)
        hidden_states = self.LayerNorm(hidden_states + input_tensor)
        return hidden_states


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rel_embeddings = nn.Embedding(POSITION_BUCKETS * 2, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, EPS, elementwise_affine=True)
        self.self = DisentangledSelfAttention()
        self.output = DebertaV2SelfOutput()

    def get_attention_mask(self, attention_mask):
        if attention_mask.dim() <= 2:
            extended_attention_mask = attention_mask.unsqueeze(1).unsqueeze(2)
            attention_mask = extended_attention_mask * extended_attention_mask.squeeze(-2).unsqueeze(-1)
        elif attention_mask.dim() == 3:
            attention_mask = attention_mask.unsqueeze(1)
        return attention_mask

    def forward(self, hidden_states, attention_mask):
        # DebertaV2Encoder.forward's preparation, then the first layer's attention
        attention_mask = self.get_attention_mask(attention_mask)
        relative_pos = build_relative_position(
            hidden_states, hidden_states, bucket_size=POSITION_BUCKETS, max_position=MAX_POSITIONS
        )
        rel_embeddings = self.LayerNorm(self.rel_embeddings.weight)
        self_output = self.self(hidden_states, attention_mask, relative_pos, rel_embeddings)
        return self.output(self_output, hidden_states)


def get_inputs():
    lengths = torch.randint(384, LENGTH + 1, (BATCH,))
    attention_mask = (torch.arange(LENGTH)[None, :] < lengths[:, None]).long()
    return [torch.randn(BATCH, LENGTH, HIDDEN), attention_mask]


def get_init_inputs():
    return []
