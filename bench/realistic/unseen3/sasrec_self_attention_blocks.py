"""SASRec's sequential recommender scoring (the SASRec.pytorch reference implementation's
log2feats + predict) at its MovieLens-1M configuration: each user's last 200 items (left-padded
with item 0) embedded (3416 items + padding, 50 dims) and scaled by sqrt(50), learned positional
embeddings added, padding positions zeroed, two self-attention blocks (LayerNorm, single-head
nn.MultiheadAttention with a causal mask in sequence-first layout, residual on the normed
query, LayerNorm, point-wise feed-forward as two kernel-1 Conv1d 50 -> 50 with ReLU and a
residual, padding zeroed again), a final LayerNorm (eps 1e-8 throughout), and the last
position's feature dotted with 101 candidate items' embeddings (the positive plus 100 sampled
negatives, as SASRec evaluates); batch 256 users."""

import torch
import torch.nn as nn

ITEM_NUM, MAXLEN, HIDDEN, BLOCKS, HEADS, CANDIDATES, BATCH = 3416, 200, 50, 2, 1, 101, 256


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


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.item_emb = nn.Embedding(ITEM_NUM + 1, HIDDEN, padding_idx=0)
        self.pos_emb = nn.Embedding(MAXLEN, HIDDEN)
        self.attention_layernorms = nn.ModuleList()
        self.attention_layers = nn.ModuleList()
        self.forward_layernorms = nn.ModuleList()
        self.forward_layers = nn.ModuleList()
        self.last_layernorm = nn.LayerNorm(HIDDEN, eps=1e-8)
        for _ in range(BLOCKS):
            self.attention_layernorms.append(nn.LayerNorm(HIDDEN, eps=1e-8))
            self.attention_layers.append(nn.MultiheadAttention(HIDDEN, HEADS, dropout=0.0))
            self.forward_layernorms.append(nn.LayerNorm(HIDDEN, eps=1e-8))
            self.forward_layers.append(PointWiseFeedForward(HIDDEN))

    def log2feats(self, log_seqs):
        seqs = self.item_emb(log_seqs)
        seqs *= self.item_emb.embedding_dim**0.5
        positions = torch.arange(log_seqs.shape[1], device=log_seqs.device)[None, :].expand(
            log_seqs.shape[0], -1
        )
        seqs += self.pos_emb(positions)

        timeline_mask = log_seqs == 0
        seqs *= ~timeline_mask.unsqueeze(-1)  # broadcast in last dim

        tl = seqs.shape[1]  # time dim len for enforce causality
        attention_mask = ~torch.tril(torch.ones((tl, tl), dtype=torch.bool, device=log_seqs.device))

        for i in range(len(self.attention_layers)):
            seqs = torch.transpose(seqs, 0, 1)
            Q = self.attention_layernorms[i](seqs)
            mha_outputs, _ = self.attention_layers[i](Q, seqs, seqs, attn_mask=attention_mask)
            seqs = Q + mha_outputs
            seqs = torch.transpose(seqs, 0, 1)

            seqs = self.forward_layernorms[i](seqs)
            seqs = self.forward_layers[i](seqs)
            seqs *= ~timeline_mask.unsqueeze(-1)

        log_feats = self.last_layernorm(seqs)  # (U, T, C) -> (U, -1, C)
        return log_feats

    def forward(self, log_seqs, item_indices):
        log_feats = self.log2feats(log_seqs)
        final_feat = log_feats[:, -1, :]  # only use last QKV classifier
        item_embs = self.item_emb(item_indices)  # (U, I, C)
        logits = item_embs.matmul(final_feat.unsqueeze(-1)).squeeze(-1)
        return logits


def get_inputs():
    lengths = torch.randint(5, MAXLEN + 1, (BATCH,))
    items = torch.randint(1, ITEM_NUM + 1, (BATCH, MAXLEN))
    keep = torch.arange(MAXLEN)[None, :] >= (MAXLEN - lengths)[:, None]  # left padding
    log_seqs = torch.where(keep, items, torch.zeros_like(items))
    item_indices = torch.randint(1, ITEM_NUM + 1, (BATCH, CANDIDATES))
    return [log_seqs, item_indices]


def get_init_inputs():
    return []
