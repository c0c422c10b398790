"""TiSASRec (Time Interval Aware Self-Attention for Sequential Recommendation, Li et al., WSDM 2020) -- full
sequence encoder + candidate scoring.

Model / block: sequential recommender (next-item prediction). Item-id embeddings (x sqrt(d)), padding
mask, then 2 blocks of
    Q = LayerNorm(seqs);  seqs = Q + TimeAwareMHA(Q, seqs)
    seqs = PointWiseFFN(LayerNorm(seqs)) (+ residual inside);  seqs *= ~padding
TimeAwareMHA adds, on top of scaled dot-product attention, learned absolute-position key/value embeddings and
learned *pairwise time-interval* key/value embeddings r_ij (an embedding lookup on the clipped |t_i - t_j| matrix,
one [L, L, d] tensor per user):
    a_ij = q_i . (k_j + pK_j + rK_ij) / sqrt(d_head);  out_i = sum_j softmax(a)_ij (v_j + pV_j + rV_ij)
with heads folded into the batch via torch.split/torch.cat, and causal + padding masking via torch.where with
-2^32+1. Final LayerNorm, last-position feature dotted with the candidate items' embeddings.
Upstream code followed: pmixer/TiSASRec.pytorch model.py (PointWiseFeedForward, TimeAwareMultiHeadAttention,
TiSASRec.seq2feats / predict) and utils.py (computeRePos: clipped |t_i - t_j| matrix).
Use case: scoring 101 candidates (1 held-out positive + 100 sampled negatives, the paper's evaluation protocol)
for a batch of 128 users with 200-long interaction histories over a 50k-item catalogue.
Shapes: log_seqs [128, 200] int64 (left-padded with 0), time_matrices [128, 200, 200] int64 in [0, 256],
item_indices [128, 101] int64 -> logits [128, 101] fp32.
Config: hidden 64, 2 heads, 2 blocks, maxlen 200, time_span 256, LayerNorm eps 1e-8.
Rough FLOPs: only ~10 GFLOP (QK^T, r_ij batched mat-vecs, PV, projections, FFN), but memory-heavy: the
time-interval embeddings rK / rV are [128, 200, 200, 64] fp32 = 1.3 GB each and are re-split per head every
block -> roughly 10+ GB of traffic (~4-6 ms at 3 TB/s).

Departures:
- Inputs are tensors already on the device (upstream converts numpy arrays inside seq2feats); positions built
  with torch.arange; the -2^32+1 padding tensor is created directly on the device.
- Init: upstream applies xavier_normal to every >=2-D parameter; kept for the projection / conv / position / time
  weights, but the item embedding (50001 x 64, xavier std 0.006) uses normal(0, 0.1) so the logits are not ~0.
- Dropout removed (p = 0, inference). user_ids argument dropped (unused upstream).
"""

import torch
import torch.nn as nn

BATCH = 128
MAXLEN = 200
HIDDEN = 64
NUM_HEADS = 2
NUM_BLOCKS = 2
TIME_SPAN = 256
ITEM_NUM = 50000
NUM_CANDIDATES = 101


class PointWiseFeedForward(nn.Module):
    def __init__(self, hidden_units):
        super().__init__()
        self.conv1 = nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv1d(hidden_units, hidden_units, kernel_size=1)

    def forward(self, inputs):
        outputs = self.conv2(self.relu(self.conv1(inputs.transpose(-1, -2))))
        outputs = outputs.transpose(-1, -2)  # as Conv1D requires (N, C, Length)
        outputs += inputs
        return outputs


class TimeAwareMultiHeadAttention(nn.Module):
    # required homebrewed mha layer for Ti/SASRec experiments
    def __init__(self, hidden_size, head_num):
        super().__init__()
        self.Q_w = nn.Linear(hidden_size, hidden_size)
        self.K_w = nn.Linear(hidden_size, hidden_size)
        self.V_w = nn.Linear(hidden_size, hidden_size)
        self.softmax = nn.Softmax(dim=-1)
        self.hidden_size = hidden_size
        self.head_num = head_num
        self.head_size = hidden_size // head_num

    def forward(
        self, queries, keys, time_mask, attn_mask, time_matrix_K, time_matrix_V, abs_pos_K, abs_pos_V
    ):
        Q, K, V = self.Q_w(queries), self.K_w(keys), self.V_w(keys)

        # head dim * batch dim for parallelization (h*N, T, C/h)
        Q_ = torch.cat(torch.split(Q, self.head_size, dim=2), dim=0)
        K_ = torch.cat(torch.split(K, self.head_size, dim=2), dim=0)
        V_ = torch.cat(torch.split(V, self.head_size, dim=2), dim=0)

        time_matrix_K_ = torch.cat(torch.split(time_matrix_K, self.head_size, dim=3), dim=0)
        time_matrix_V_ = torch.cat(torch.split(time_matrix_V, self.head_size, dim=3), dim=0)
        abs_pos_K_ = torch.cat(torch.split(abs_pos_K, self.head_size, dim=2), dim=0)
        abs_pos_V_ = torch.cat(torch.split(abs_pos_V, self.head_size, dim=2), dim=0)

        # batched channel wise matmul to gen attention weights
        attn_weights = Q_.matmul(torch.transpose(K_, 1, 2))
        attn_weights += Q_.matmul(torch.transpose(abs_pos_K_, 1, 2))
        attn_weights += time_matrix_K_.matmul(Q_.unsqueeze(-1)).squeeze(-1)

        # seq length adaptive scaling
        attn_weights = attn_weights / (K_.shape[-1] ** 0.5)

        # key masking, -2^32 lead to leaking, inf lead to nan
        time_mask = time_mask.unsqueeze(-1).repeat(self.head_num, 1, 1)
        time_mask = time_mask.expand(-1, -1, attn_weights.shape[-1])
        attn_mask = attn_mask.unsqueeze(0).expand(attn_weights.shape[0], -1, -1)
        paddings = torch.ones(attn_weights.shape, device=attn_weights.device) * (-(2**32) + 1)
        attn_weights = torch.where(time_mask, paddings, attn_weights)  # True:pick padding
        attn_weights = torch.where(attn_mask, paddings, attn_weights)  # enforcing causality

        attn_weights = self.softmax(attn_weights)

        outputs = attn_weights.matmul(V_)
        outputs += attn_weights.matmul(abs_pos_V_)
        outputs += attn_weights.unsqueeze(2).matmul(time_matrix_V_).reshape(outputs.shape).squeeze(2)

        # (num_head * N, T, C / num_head) -> (N, T, C)
        outputs = torch.cat(torch.split(outputs, Q.shape[0], dim=0), dim=2)  # div batch_size
        return outputs


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.item_num = ITEM_NUM
        self.item_emb = nn.Embedding(ITEM_NUM + 1, HIDDEN, padding_idx=0)
        self.abs_pos_K_emb = nn.Embedding(MAXLEN, HIDDEN)
        self.abs_pos_V_emb = nn.Embedding(MAXLEN, HIDDEN)
        self.time_matrix_K_emb = nn.Embedding(TIME_SPAN + 1, HIDDEN)
        self.time_matrix_V_emb = nn.Embedding(TIME_SPAN + 1, HIDDEN)

        self.attention_layernorms = nn.ModuleList()
        self.attention_layers = nn.ModuleList()
        self.forward_layernorms = nn.ModuleList()
        self.forward_layers = nn.ModuleList()
        self.last_layernorm = nn.LayerNorm(HIDDEN, eps=1e-8)
        for _ in range(NUM_BLOCKS):
            self.attention_layernorms.append(nn.LayerNorm(HIDDEN, eps=1e-8))
            self.attention_layers.append(TimeAwareMultiHeadAttention(HIDDEN, NUM_HEADS))
            self.forward_layernorms.append(nn.LayerNorm(HIDDEN, eps=1e-8))
            self.forward_layers.append(PointWiseFeedForward(HIDDEN))

        # upstream main.py: xavier_normal_ on every parameter that accepts it (>= 2-D)
        with torch.no_grad():
            for _name, param in self.named_parameters():
                if param.dim() >= 2:
                    nn.init.xavier_normal_(param)
            # departure: trained-scale item embeddings
            self.item_emb.weight.normal_(0.0, 0.1)
        self.eval()

    def seq2feats(self, log_seqs, time_matrices):
        seqs = self.item_emb(log_seqs)
        seqs *= self.item_emb.embedding_dim**0.5
        positions = (
            torch.arange(log_seqs.shape[1], device=log_seqs.device).unsqueeze(0).expand(log_seqs.shape[0], -1)
        )
        abs_pos_K = self.abs_pos_K_emb(positions)
        abs_pos_V = self.abs_pos_V_emb(positions)

        time_matrix_K = self.time_matrix_K_emb(time_matrices)
        time_matrix_V = self.time_matrix_V_emb(time_matrices)

        # mask 0th items(placeholder for dry-run) in log_seqs
        # would be easier if 0th item could be an exception for training
        timeline_mask = log_seqs == 0
        seqs *= ~timeline_mask.unsqueeze(-1)  # broadcast in last dim

        tl = seqs.shape[1]  # time dim len for enforce causality
        attention_mask = ~torch.tril(torch.ones((tl, tl), dtype=torch.bool, device=seqs.device))

        for i in range(len(self.attention_layers)):
            # Self-attention, Q=layernorm(seqs), K=V=seqs
            Q = self.attention_layernorms[i](seqs)
            mha_outputs = self.attention_layers[i](
                Q, seqs, timeline_mask, attention_mask, time_matrix_K, time_matrix_V, abs_pos_K, abs_pos_V
            )
            seqs = Q + mha_outputs

            # Point-wise Feed-forward, actually 2 Conv1D for channel wise fusion
            seqs = self.forward_layernorms[i](seqs)
            seqs = self.forward_layers[i](seqs)
            seqs *= ~timeline_mask.unsqueeze(-1)

        log_feats = self.last_layernorm(seqs)
        return log_feats

    def forward(self, log_seqs, time_matrices, item_indices):  # == TiSASRec.predict
        log_feats = self.seq2feats(log_seqs, time_matrices)
        final_feat = log_feats[:, -1, :]  # only use last QKV classifier, a waste
        item_embs = self.item_emb(item_indices)  # (U, I, C)
        logits = item_embs.matmul(final_feat.unsqueeze(-1)).squeeze(-1)
        return logits


def get_inputs():
    # left-padded histories of 20..200 interactions
    lengths = torch.randint(20, MAXLEN + 1, (BATCH,))
    pos = torch.arange(MAXLEN).unsqueeze(0)
    valid = pos >= (MAXLEN - lengths).unsqueeze(1)
    log_seqs = torch.randint(1, ITEM_NUM + 1, (BATCH, MAXLEN)) * valid
    # personalised, rescaled timestamps (integer units); padding positions have time 0 as upstream
    gaps = torch.randint(0, 12, (BATCH, MAXLEN))
    times = (torch.cumsum(gaps, dim=1) + 1) * valid
    time_matrices = (times.unsqueeze(2) - times.unsqueeze(1)).abs().clamp(max=TIME_SPAN)
    item_indices = torch.randint(1, ITEM_NUM + 1, (BATCH, NUM_CANDIDATES))
    return [log_seqs.long(), time_matrices.long(), item_indices.long()]


def get_init_inputs():
    return []
