"""XLNet-base-cased's first relative-position self-attention (transformers' XLNetRelativeAttention
in its single-stream inference path, h-stream only, no memory), with what XLNetModel.forward
prepares for it: inputs moved to XLNet's time-major [length, batch] layout, the padding mask
turned into non_tgt_mask (data mask minus the identity, > 0), the one-hot segment matrix from
token_type_ids (same / different segment), and the sinusoidal relative positional encoding for
positions 512 .. -511 expanded over the batch. Per-head projections as einsums with
[768, 12, 64] weights (q, k, v, the positional key r, the output o), content scores
(q + r_w_bias) . k, positional scores (q + r_r_bias) . k_r followed by rel_shift_bnij (a
reshape, a slice and an index_select), segment scores through seg_embed, scaled by 1/8, the mask
subtracted times 1e30, softmax, the weighted sum of values, the output einsum, the residual and
LayerNorm (eps 1e-12). Batch 4 x 512 tokens of sentence pairs, left-padded as XLNet's tokenizer
pads (an NLP encoder's attention)."""

import torch
import torch.nn as nn

D_MODEL, N_HEAD, D_HEAD, EPS = 768, 12, 64, 1e-12
BATCH, LENGTH = 4, 512


class XLNetRelativeAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.n_head = N_HEAD
        self.d_head = D_HEAD
        self.d_model = D_MODEL
        self.scale = 1 / (D_HEAD**0.5)

        self.q = nn.Parameter(torch.randn(D_MODEL, N_HEAD, D_HEAD) * 0.02)
        self.k = nn.Parameter(torch.randn(D_MODEL, N_HEAD, D_HEAD) * 0.02)
        self.v = nn.Parameter(torch.randn(D_MODEL, N_HEAD, D_HEAD) * 0.02)
        self.o = nn.Parameter(torch.randn(D_MODEL, N_HEAD, D_HEAD) * 0.02)
        self.r = nn.Parameter(torch.randn(D_MODEL, N_HEAD, D_HEAD) * 0.02)

        self.r_r_bias = nn.Parameter(torch.randn(N_HEAD, D_HEAD) * 0.02)
        self.r_s_bias = nn.Parameter(torch.randn(N_HEAD, D_HEAD) * 0.02)
        self.r_w_bias = nn.Parameter(torch.randn(N_HEAD, D_HEAD) * 0.02)
        self.seg_embed = nn.Parameter(torch.randn(2, N_HEAD, D_HEAD) * 0.02)

        self.layer_norm = nn.LayerNorm(D_MODEL, eps=EPS)

    @staticmethod
    def rel_shift_bnij(x, klen=-1):
        x_size = x.shape
        x = x.reshape(x_size[0], x_size[1], x_size[3], x_size[2])
        x = x[:, :, 1:, :]
        x = x.reshape(x_size[0], x_size[1], x_size[2], x_size[3] - 1)
        x = torch.index_select(x, 3, torch.arange(klen, device=x.device, dtype=torch.long))
        return x

    def rel_attn_core(self, q_head, k_head_h, v_head_h, k_head_r, seg_mat=None, attn_mask=None):
        # content based attention score
        ac = torch.einsum("ibnd,jbnd->bnij", q_head + self.r_w_bias, k_head_h)

        # position based attention score
        bd = torch.einsum("ibnd,jbnd->bnij", q_head + self.r_r_bias, k_head_r)
        bd = self.rel_shift_bnij(bd, klen=ac.shape[3])

        # segment based attention score
        if seg_mat is None:
            ef = 0
        else:
            ef = torch.einsum("ibnd,snd->ibns", q_head + self.r_s_bias, self.seg_embed)
            ef = torch.einsum("ijbs,ibns->bnij", seg_mat, ef)

        # merge attention scores and perform masking
        attn_score = (ac + bd + ef) * self.scale
        if attn_mask is not None:
            if attn_mask.dtype == torch.float16:
                attn_score = attn_score - 65500 * torch.einsum("ijbn->bnij", attn_mask)
            else:
                attn_score = attn_score - 1e30 * torch.einsum("ijbn->bnij", attn_mask)

        # attention probability
        attn_prob = nn.functional.softmax(attn_score, dim=3)

        # attention output
        attn_vec = torch.einsum("bnij,jbnd->ibnd", attn_prob, v_head_h)
        return attn_vec

    def post_attention(self, h, attn_vec, residual=True):
        attn_out = torch.einsum("ibnd,hnd->ibh", attn_vec, self.o)
        if residual:
            attn_out = attn_out + h
        output = self.layer_norm(attn_out)
        return output

    def forward(self, h, attn_mask_h, r, seg_mat):
        cat = h
        # content heads
        q_head_h = torch.einsum("ibh,hnd->ibnd", h, self.q)
        k_head_h = torch.einsum("ibh,hnd->ibnd", cat, self.k)
        v_head_h = torch.einsum("ibh,hnd->ibnd", cat, self.v)

        # positional heads
        k_head_r = torch.einsum("ibh,hnd->ibnd", r.type(self.r.dtype), self.r)

        # core attention ops
        attn_vec = self.rel_attn_core(
            q_head_h, k_head_h, v_head_h, k_head_r, seg_mat=seg_mat, attn_mask=attn_mask_h
        )

        # post processing
        output_h = self.post_attention(h, attn_vec)
        return output_h


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.d_model = D_MODEL
        self.attn_type = "bi"
        self.bi_data = False
        self.clamp_len = -1
        self.rel_attn = XLNetRelativeAttention()

    @staticmethod
    def positional_embedding(pos_seq, inv_freq, bsz=None):
        sinusoid_inp = pos_seq[:, None] * inv_freq
        pos_emb = torch.cat([torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)], dim=-1)
        pos_emb = pos_emb[:, None, :]
        if bsz is not None:
            pos_emb = pos_emb.expand(-1, bsz, -1)
        return pos_emb

    def relative_positional_encoding(self, qlen, klen, bsz=None, device=None):
        freq_seq = torch.arange(0, self.d_model, 2.0, dtype=torch.int64, device=device).float()
        inv_freq = 1 / torch.pow(10000, (freq_seq / self.d_model))
        # attn_type "bi"
        beg, end = klen, -qlen
        fwd_pos_seq = torch.arange(beg, end, -1.0, dtype=torch.int64, device=device).float()
        if self.clamp_len > 0:
            fwd_pos_seq = fwd_pos_seq.clamp(-self.clamp_len, self.clamp_len)
        pos_emb = self.positional_embedding(fwd_pos_seq, inv_freq, bsz)
        return pos_emb

    def forward(self, inputs_embeds, attention_mask, token_type_ids):
        # XLNetModel.forward up to the first layer (no mems, no perm_mask, no target_mapping)
        inputs_embeds = inputs_embeds.transpose(0, 1).contiguous()
        qlen, bsz = inputs_embeds.shape[0], inputs_embeds.shape[1]
        token_type_ids = token_type_ids.transpose(0, 1).contiguous()
        attention_mask = attention_mask.transpose(0, 1).contiguous()
        mlen = 0
        klen = mlen + qlen
        dtype_float = inputs_embeds.dtype

        input_mask = 1.0 - attention_mask
        data_mask = input_mask[None]
        attn_mask = data_mask[:, :, :, None]
        attn_mask = (attn_mask > 0).to(dtype_float)
        non_tgt_mask = -torch.eye(qlen, device=attn_mask.device, dtype=attn_mask.dtype)
        non_tgt_mask = ((attn_mask + non_tgt_mask[:, :, None, None]) > 0).to(attn_mask)

        output_h = inputs_embeds

        # `1` indicates not in the same segment [qlen x klen x bsz]
        cat_ids = token_type_ids
        seg_mat = (token_type_ids[:, None] != cat_ids[None, :]).long()
        seg_mat = nn.functional.one_hot(seg_mat, num_classes=2).to(dtype_float)

        pos_emb = self.relative_positional_encoding(qlen, klen, bsz=bsz, device=output_h.device)

        output_h = self.rel_attn(output_h, non_tgt_mask, pos_emb, seg_mat)
        return output_h.permute(1, 0, 2).contiguous()


def get_inputs():
    # XLNet pads on the left: [pad]* A <sep> B <sep> <cls>, token types 3 (pad), 0, 1, 2 (cls)
    lengths = torch.randint(320, LENGTH + 1, (BATCH,))
    first = lengths // 2
    position = torch.arange(LENGTH)[None, :]
    start = LENGTH - lengths[:, None]
    attention_mask = (position >= start).long()
    token_type_ids = torch.full((BATCH, LENGTH), 3, dtype=torch.long)
    token_type_ids = torch.where(position >= start, torch.zeros_like(token_type_ids), token_type_ids)
    token_type_ids = torch.where(
        position >= start + first[:, None], torch.ones_like(token_type_ids), token_type_ids
    )
    token_type_ids[:, -1] = 2
    return [torch.randn(BATCH, LENGTH, D_MODEL), attention_mask, token_type_ids]


def get_init_inputs():
    return []
